"""loadgen: realistic load on LLM inference endpoints, with numbers you can trust."""

__version__ = "0.1.0"

__all__ = ["__version__"]

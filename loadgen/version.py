"""loadgen's version: one constant on the ground floor, so every room can record it."""

__version__ = "0.1.0"

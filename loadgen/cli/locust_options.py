"""``loadgen locust``'s options as a typed value (its endpoint's are :class:`~loadgen.cli.target_options.EndpointOptions`).

Frozen, built once per command from click's values (``--config`` merged into them) by
:meth:`LocustOptions.from_kw`; :mod:`loadgen.cli.locust` takes it, never click's dict. Its names
and types are this command's own: ``--trace-start`` and ``--trace-duration`` are seconds here, and
``--output-tokens-override`` is a flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Self

from loadgen.cli.load_options import picked

__all__ = ["LocustOptions"]


@dataclass(frozen=True, slots=True)
class LocustOptions:
    """``loadgen locust``'s load, workload, output and Locust-process options."""

    rate: float | None = None
    """Open loop: requests per second (None: closed loop, Locust's users)."""
    arrival: str = "poisson"
    burstiness: float = 1.0
    n_requests: int | None = None
    duration: str | None = None
    max_concurrency: int | None = None
    """The in-flight cap per process (None: the default)."""
    input_tokens: str = "128"
    output_tokens: str = "64"
    output_tokens_override: bool = False
    trace: str | None = None
    trace_format: str = "auto"
    trace_time_scale: float | None = None
    trace_start: float = 0.0
    """The trace window's start, seconds."""
    trace_duration: float | None = None
    """The trace window's length, seconds."""
    trace_max_requests: int | None = None
    dataset: str | None = None
    tokenizer: str | None = None
    prompt_format: str = "text"
    shared_prefix_tokens: int = 0
    prefix_groups: int = 1
    sessions: str | None = None
    seed: int = 0
    salt: str | None = None
    save_text: bool = False
    no_token_lists: bool = False
    latency_origin: Literal["scheduled", "sent"] = "scheduled"
    slos: tuple[str, ...] = ()
    out_dir: str | None = None
    sim_args: str = ""
    web_token_env: str | None = None
    """The name of the environment variable with the web UI's token (never the token)."""
    master_token_env: str | None = None
    """The name of the environment variable with the master's token (never the token)."""
    allow_remote_workers: bool = False

    @classmethod
    def from_kw(cls, kw: dict[str, Any]) -> Self:
        """The options of ``kw`` (click's values)."""
        return cls(**picked(cls, kw))

    @property
    def open_loop(self) -> bool:
        """An open-loop schedule (``--rate`` or a trace's timestamps), not Locust's closed-loop users."""
        return self.rate is not None or bool(self.trace)

    def workload(self) -> dict[str, Any]:
        """WorkloadOptions fields (as JSON); ``api``/``salt`` are set later. Each has its option's name but
        the trace window's two, which are seconds here (``trace_start_s``, ``trace_duration_s``)."""
        out = {name: getattr(self, name) for name in _WORKLOAD_FIELDS}
        out.update(trace_start_s=self.trace_start, trace_duration_s=self.trace_duration)
        return out


# the options that are WorkloadOptions fields of the same name (LocustOptions.workload)
_WORKLOAD_FIELDS = (
    "input_tokens", "output_tokens", "output_tokens_override", "trace", "trace_format", "trace_time_scale",
    "trace_max_requests", "dataset", "tokenizer", "prompt_format", "shared_prefix_tokens", "prefix_groups", "seed",
    "salt",
)  # fmt: skip

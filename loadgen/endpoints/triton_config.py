"""What both Triton transports share: the configuration naming the model's tensors, and a
stream's bookkeeping (:class:`StreamProgress`, :func:`error_line`) as responses arrive.

Used by :mod:`loadgen.endpoints.triton` (the endpoint and its HTTP path) and
:mod:`loadgen.endpoints.triton_grpc` (its gRPC path).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from loadgen.types import RequestRecord, TokenEvent

__all__ = ["StreamProgress", "TritonConfig", "error_line"]


@dataclass
class TritonConfig:
    """How to talk to a Triton model.

    ``url``: ``http://host:port`` for HTTP; ``host:port`` (or ``grpc://host:port``) for
    gRPC. ``model``: the Triton model name (default: the only, or first ready, model
    of the repository index). Tensor names are configurable (``None`` never sends
    that input). ``sampling_parameters`` are merged into the JSON sent on
    ``sampling_parameters_input``. ``cumulative_text``: the model streams the whole
    text so far (old vLLM backends) instead of deltas.
    """

    url: str
    protocol: Literal["http", "grpc"] = "http"
    model: str | None = None
    model_version: str = ""
    text_input: str = "text_input"
    text_output: str = "text_output"
    stream_input: str | None = "stream"
    sampling_parameters_input: str | None = "sampling_parameters"
    exclude_input_input: str | None = "exclude_input_in_output"
    return_num_output_tokens_input: str | None = "return_num_output_tokens"
    num_output_tokens_output: str = "num_output_tokens"
    return_num_input_tokens_input: str | None = "return_num_input_tokens"
    num_input_tokens_output: str = "num_input_tokens"
    return_finish_reason_input: str | None = "return_finish_reason"
    finish_reason_output: str = "finish_reason"
    max_tokens_input: str | None = None  # e.g. "max_tokens" (TensorRT-LLM); found at open() when present
    sampling_parameters: dict[str, Any] = field(default_factory=dict)
    ignore_eos: bool = True
    cumulative_text: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    pool_limit: int = 4096
    streams_per_channel: int = 100
    request_id_prefix: str | None = None
    max_event_bytes: int = 16 * 1024 * 1024


def error_line(err: str) -> str:
    """One line for an error message: a Python traceback gives its last line (the exception)."""
    lines = [ln.strip() for ln in err.strip().splitlines() if ln.strip()]
    if not lines:
        return "error"
    if len(lines) > 1 and lines[0].startswith("Traceback"):
        return lines[-1]
    return " ".join(lines)


class StreamProgress:
    """What a stream delivered so far, shared by both protocols."""

    __slots__ = ("record", "cumulative", "n_out", "have_counts", "text_len")

    def __init__(self, record: RequestRecord, cumulative: bool) -> None:
        self.record = record
        self.cumulative = cumulative
        self.n_out = 0
        self.have_counts = False
        self.text_len = 0

    def add(self, t: int, text: str, n_out: int | None, n_in: int | None, fr: str | None) -> None:
        rec = self.record
        if self.cumulative and text:
            new = text[self.text_len :]
            self.text_len = len(text)
            text = new
        if n_out is not None:
            self.have_counts = True
            self.n_out += n_out
        if n_in is not None:
            rec.prompt_tokens = n_in
        if fr:
            rec.finish_reason = fr
        if text:
            rec.events.append(TokenEvent(t, text, True, self.n_out if self.have_counts else None))

    def finish_ok(self, t: int) -> None:
        rec = self.record
        rec.end_ns = t
        if self.have_counts:
            rec.completion_tokens = self.n_out
        rec.status = "ok"

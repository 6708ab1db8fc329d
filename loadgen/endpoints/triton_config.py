"""What both Triton transports share: the configuration naming the model's tensors, and a
stream's bookkeeping (:class:`StreamProgress`, :func:`error_line`) as responses arrive.

Used by :mod:`loadgen.endpoints.triton` (the endpoint and its HTTP path) and
:mod:`loadgen.endpoints.triton_grpc` (its gRPC path).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Literal

from loadgen.core.types import RequestRecord, TokenEvent
from loadgen.endpoints.header_wait import DEFAULT_HEADER_TIMEOUT_S
from loadgen.endpoints.http import settle

__all__ = ["StreamProgress", "TritonConfig", "error_line"]


@dataclass
class TritonConfig:
    """How to talk to a Triton model.

    ``url``: ``http://host:port`` for HTTP; ``host:port`` (or ``grpc://host:port``) for
    gRPC. ``model``: the Triton model name (default: the only, or first ready, model
    of the repository index). Tensor names are configurable (``None`` never sends
    that input). ``sampling_parameters`` are merged into the JSON sent on
    ``sampling_parameters_input``. ``cumulative_text``: the model streams the whole
    text so far (old vLLM backends) instead of deltas. ``header_timeout_s``: no response
    headers (gRPC: no first response) this long after the send is ``header_timeout``.
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
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # may hold a credential: never in a repr
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    header_timeout_s: float | None = DEFAULT_HEADER_TIMEOUT_S  # no headers (gRPC: first response): header_timeout
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
    """What a stream delivered so far, shared by both protocols.

    Two faults of real models' accounting are detected and corrected here, each named in
    ``fixes`` (the endpoint counts them in its description):

    * ``prompt_echo``: ``echo`` is the prompt when the request could not ask for
      ``exclude_input_in_output`` (the model does not declare that input). A first text that
      starts with the whole prompt has it removed: vLLM's backend prepends the prompt to its
      first response (to every response with cumulative text), which would count the prompt's
      tokens as output (1,100 for 100 generated) and stamp TTFT on the echo.
    * ``cumulative_num_output_tokens``: counts that never fall and whose sum exceeds the
      requested ``max_tokens`` while the last does not (or, with no length asked, that rise at
      every one of three or more responses) are running totals, not per-response counts: the
      output is their largest value, not their sum.

    ``finish_ok`` settles the record (:func:`~loadgen.endpoints.http.settle`: ``ok`` or
    ``filtered``, and ``buffered`` when the tokens came in one burst).
    """

    __slots__ = ("record", "cumulative", "counts", "ev_counts", "text_len", "echo", "max_tokens", "fixes")

    def __init__(
        self, record: RequestRecord, cumulative: bool, *, echo: str | None = None, max_tokens: int | None = None
    ) -> None:
        self.record = record
        self.cumulative = cumulative
        self.counts: list[int] = []  # num_output_tokens of each response that reported one
        self.ev_counts: list[int] = []  # per token event: how many counts had arrived with it
        self.text_len = 0
        self.echo = echo or None
        self.max_tokens = max_tokens
        self.fixes: list[str] = []

    def add(self, t: int, text: str, n_out: int | None, n_in: int | None, fr: str | None) -> None:
        rec = self.record
        if self.cumulative and text:
            new = text[self.text_len :]
            self.text_len = len(text)
            text = new
        if self.echo is not None and text:
            if text.startswith(self.echo):
                text = text[len(self.echo) :]
                self.fixes.append("prompt_echo")
            self.echo = None  # only the first text can start with an echo (later cumulative ones are cut above)
        if n_out is not None:
            self.counts.append(n_out)
        if n_in is not None:
            rec.prompt_tokens = n_in
        if fr:
            rec.finish_reason = fr
        if text:
            rec.events.append(TokenEvent(t, text, True, None))
            self.ev_counts.append(len(self.counts))

    def counts_cumulative(self) -> bool:
        """Whether the reported ``num_output_tokens`` are running totals (see the class)."""
        c = [x for x in self.counts if x > 0]
        if len(c) < 2 or any(b < a for a, b in zip(c, c[1:])):
            return False
        if self.max_tokens is not None:
            return sum(c) > self.max_tokens >= c[-1]
        return len(c) >= 3 and all(b > a for a, b in zip(c, c[1:]))

    def finish_ok(self, t: int) -> None:
        rec = self.record
        rec.end_ns = t
        if self.counts:
            if self.counts_cumulative():
                running = list(itertools.accumulate(self.counts, max))
                self.fixes.append("cumulative_num_output_tokens")
            else:
                running = list(itertools.accumulate(self.counts))
            for ev, k in zip(rec.events, self.ev_counts):
                ev.usage_completion_tokens = running[k - 1] if k else None
            rec.completion_tokens = running[-1]
        settle(rec)

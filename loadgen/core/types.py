"""Plain data passed between layers: specs, the schedule, raw request facts.

Everything here is a value: no I/O, no clocks. Times are integer nanoseconds on
the monotonic clock of :mod:`loadgen.core.clock` unless a name says otherwise.
Derived metrics (TTFT, ITL, ...) are *not* stored here: :mod:`loadgen.core.metrics`
computes them from the raw facts of a :class:`RequestRecord`, so each metric has
exactly one definition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from loadgen.core.errors import Abandoned

ERROR_KINDS: tuple[str, ...] = (
    "connect",  # TCP/TLS connection could not be made (refused, DNS, reset before headers)
    "timeout",  # the per-request total deadline (or connect timeout) expired
    "header_timeout",  # sent, and no response headers within --header-timeout: the server's failure
    "rate_limited",  # HTTP 429; Retry-After kept in retry_after_s
    "http_error",  # any other non-2xx status; http_status kept
    "incomplete_stream",  # the stream closed before a clean end ([DONE] or finish_reason + EOF)
    "stream_error",  # an error object inside a 200 stream
    "protocol",  # malformed SSE framing or JSON
    "cancelled",  # still in flight at the drain deadline (stop or Ctrl-C)
    "client_limit",  # the client ran out of descriptors or pool slots: not a server fault
    "filtered",  # a content filter stopped the output (finish_reason content_filter) or refused the prompt
    "abandoned",  # its user walked away mid-reply (--abandon): counted apart, not a failure
)
"""Every error kind a request can end with; each is counted separately."""

Phase = Literal["warmup", "measure"]


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What to send: one request of the workload.

    ``prompt`` is the completion prompt text; ``messages`` (chat) takes precedence
    for the chat API when given. ``requested_output_tokens`` is enforced with
    ``max_tokens`` (+ ``ignore_eos``/``min_tokens`` where accepted).
    ``prompt_token_ids``, when set (``--prompt-format token-ids``), is sent as the
    completions prompt instead of ``prompt`` (which then only mirrors it as text).
    """

    index: int
    prompt: str
    requested_input_tokens: int | None = None
    requested_output_tokens: int | None = None
    messages: tuple[dict[str, Any], ...] | None = None
    prefix_group: int | None = None
    session_id: str | None = None
    prompt_token_ids: tuple[int, ...] | None = None  # completions: send these ids as the prompt
    model: str | None = None  # --model a=0.7,b=0.3: this request's model of the mix (None: the endpoint's one)


@dataclass(frozen=True, slots=True)
class ScheduledRequest:
    """One entry of a schedule: send ``spec`` at ``t0 + offset_ns``."""

    offset_ns: int
    spec: RequestSpec
    phase: Phase = "measure"


class TokenEvent(msgspec.Struct, gc=False):
    """A token-bearing stream event, stamped at the arrival of its terminating blank line.

    ``text`` is the generated text it carries (content, reasoning and tool-call
    arguments concatenated); ``answer`` is True when it carries answer content
    (``content`` / completion ``text``), False for reasoning or tool calls only.
    ``usage_completion_tokens`` is the cumulative completion-token count when the
    server sends continuous usage stats on this chunk, else None.

    A ``msgspec.Struct`` untracked by the garbage collector (``gc=False``: it holds only an int, a
    str, a bool and an int or None, so it can be in no cycle): a record holds one an output token,
    and a tracked object a token made every young collection scan the tokens of the requests in
    flight. Built ~3x faster than a slots dataclass.
    """

    t_ns: int
    text: str
    answer: bool = True
    usage_completion_tokens: int | None = None


@dataclass(slots=True)
class RequestRecord:
    """The raw facts of one request, ok or failed. Every scheduled request ends as one.

    Times are absolute monotonic ns. ``scheduled_ns`` is the latency origin
    (coordinated-omission free, as MLPerf LoadGen and wrk2); ``sent_ns`` is when
    the request's bytes were handed to the socket (the body's first chunk, which
    carries the buffered headers; the headers for a request without a body; None if
    never sent). ``end_ns`` is the clean
    end for ok requests, or the moment the failure was observed.
    """

    index: int
    phase: Phase
    scheduled_ns: int
    requested_input_tokens: int | None = None
    requested_output_tokens: int | None = None
    sent_ns: int | None = None
    connect_ns: int = 0  # time spent creating a new connection for this request (0 if reused)
    connect_late_ns: int = 0  # the part of connect_ns after scheduled_ns (a prepared request connects early)
    end_ns: int | None = None
    status: Literal["ok", "error"] = "error"
    error_kind: str | None = None
    error_detail: str | None = None
    http_status: int | None = None  # a non-2xx status, or a 2xx other than 200; None for a 200
    retry_after_s: float | None = None
    events: list[TokenEvent] = field(default_factory=list)
    prompt_tokens: int | None = None  # usage.prompt_tokens
    completion_tokens: int | None = None  # usage.completion_tokens (final)
    reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens
    finish_reason: str | None = None
    streamed: bool = True
    prefix_group: int | None = None
    session_id: str | None = None
    body_text: str | None = None  # whole output text of a non-streamed response
    pool_queued: bool = False  # waited for a free connection-pool slot (a client limit)
    # --- provider dialects, quotas and the network (optional; None = not observed) ---
    response_headers_ns: int | None = None  # the (last attempt's) response status and headers arrived
    ratelimit: dict[str, float] | None = None  # x-ratelimit-* / anthropic-ratelimit-* of the response
    buffered: bool = False  # the tokens came in one burst (buffering proxy, batching server): no TPOT/ITL
    buffered_judged: bool = False  # ``buffered`` decided by metrics.stream_buffered (settle): not decided again
    dns_ns: int | None = None  # DNS resolution for a new connection (0: cache hit; None: none done)
    tcp_connect_ns: int | None = None  # TCP connect of a new connection
    tls_ns: int | None = None  # TLS handshake of a new connection (None: plain TCP or reused)
    connection_reused: bool | None = None  # sent on a pooled connection (None: never got one)
    cached_prompt_tokens: int | None = None  # prompt tokens served from the provider's prompt cache
    throttle_ns: int = 0  # waited for the client's own cap (--max-concurrency, --max-rpm, --max-tpm) before sending
    attempts: list[dict[str, Any]] | None = None  # earlier attempts answered 429 (--retry-429)
    replica: int | None = None  # which --endpoint served it (0-based; endpoints.balance), None: one endpoint
    # the reply's tool calls, OpenAI chat form ({"id", "type", "function": {"name", "arguments"}}), any API
    # (loadgen.endpoints.toolcalls); None: it called no tool
    tool_calls: list[dict[str, Any]] | None = None
    # --abandon (loadgen.engine.abandon): the output token its reader stops at; when its user walked away
    abandon_after_tokens: int | None = None
    abandoned_ns: int | None = None
    model: str | None = None  # --model a=0.7,b=0.3: the model of the mix it went to

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def check_abandon(self, t_ns: int) -> None:
        """``--abandon SHARE,Ntok``: raise :class:`~loadgen.core.errors.Abandoned` (stamping ``abandoned_ns``)
        once the reply has the token count its user walks away at (usage when reported, else its token events).
        For the readers, after each read."""
        k = self.abandon_after_tokens
        if k is not None and (self.completion_tokens if self.completion_tokens is not None else len(self.events)) >= k:
            self.abandoned_ns = t_ns
            raise Abandoned(f"its user walked away after {k} tokens")

    @property
    def text(self) -> str:
        if self.body_text is not None:
            return self.body_text
        return "".join(e.text for e in self.events)

    @property
    def answer_text(self) -> str:
        """The reply's answer content only (no reasoning, no tool-call arguments): what a history carries back
        (:class:`loadgen.workload.session_model.SessionHistory`); a whole body's text where it was not streamed
        (its reasoning then included, as the output count reads it)."""
        if self.body_text is not None:
            return self.body_text
        return "".join(e.text for e in self.events if e.answer)

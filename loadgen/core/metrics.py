"""Per-request metrics, each with one definition, computed from a RequestRecord's raw facts.

Conventions (shared/cases/streams.json, the project's reference):

* **Request start** (the latency origin) is the scheduled send time by default,
  as MLPerf LoadGen and wrk2 measure (coordinated-omission free); ``origin="sent"``
  measures from the actual send (request bytes handed to the socket) instead.
* A **token-bearing event** is a stream event that carries at least one generated
  token: non-empty completion ``text``, or a chat delta with non-empty ``content``,
  ``reasoning_content``, ``reasoning`` or ``tool_calls``. Role-only deltas, empty
  content, finish-only and usage-only chunks, ``[DONE]`` and comments carry none.
* **Output tokens** = ``usage.completion_tokens`` when the server reports it; else the
  configured tokenizer's count over the whole output text (``output_tokens_estimated``);
  else ``ceil(characters / 4)`` (also estimated). Never the number of chunks.

Functions here are pure: integers in nanoseconds in, values out.
"""

from __future__ import annotations

import itertools
import math
import operator
from dataclasses import dataclass, field
from typing import Literal, Protocol

from loadgen.core.types import RequestRecord, TokenEvent

CHARS_PER_TOKEN_ESTIMATE = 4
"""Fallback characters-per-token when neither usage nor a tokenizer is available."""


class TokenCounter(Protocol):
    """Anything that counts the tokens of a text (a tokenizer adapter)."""

    def count(self, text: str) -> int: ...


@dataclass(slots=True)
class RequestMetrics:
    """Derived metrics of one request. None means "no sample" (never 0 as a stand-in).

    * ``ttft_ns``: TTFT = first token-bearing event - request start.
    * ``time_to_first_answer_token_ns``: first event carrying answer content
      (not reasoning or tool calls) - request start.
    * ``tpot_ns``: TPOT = (last token event - first token event) / (output_tokens - 1),
      as in vLLM ``bench serve``; None when output_tokens <= 1.
    * ``e2e_ns``: E2E latency = clean end - request start (ok requests only).
    * ``itl_ns``: per-token gaps, output_tokens - 1 samples whose mean equals TPOT
      (see :func:`itl_samples`).
    * ``inter_chunk_ns``: raw gaps between consecutive token-bearing events
      (what vLLM ``bench serve`` calls ITL).
    * ``tokens_per_chunk``: the tokens each token-bearing event carried (:func:`tokens_per_event`),
      kept with ``inter_chunk_ns`` for :func:`token_pace_ns`.
    * ``error_e2e_ns``: for failed requests, the time from request start to the
      failure (kept apart from success latencies).
    """

    output_tokens: int = 0
    output_tokens_estimated: bool = False
    itl_estimated: bool = False
    ttft_ns: int | None = None
    time_to_first_answer_token_ns: int | None = None
    tpot_ns: float | None = None
    e2e_ns: int | None = None
    itl_ns: list[float] = field(default_factory=list)
    inter_chunk_ns: list[int] = field(default_factory=list)
    tokens_per_chunk: list[int] = field(default_factory=list)  # each token-bearing event's tokens (with the gaps)
    error_e2e_ns: int | None = None
    schedule_lag_ns: int | None = None

    @property
    def zero_output(self) -> bool:
        return self.output_tokens == 0


def estimate_tokens(text: str) -> int:
    """Fallback token estimate: ceil(len(text) / 4); documented as an approximation."""
    return math.ceil(len(text) / CHARS_PER_TOKEN_ESTIMATE)


def count_output_tokens(record: RequestRecord, tokenizer: TokenCounter | None = None) -> tuple[int, bool]:
    """Return ``(output_tokens, estimated)`` for a record (see module docstring)."""
    if record.completion_tokens is not None:
        return record.completion_tokens, False
    last_usage = None
    for ev in reversed(record.events):
        if ev.usage_completion_tokens is not None:
            last_usage = ev.usage_completion_tokens
            break
    if last_usage is not None:
        return last_usage, False
    text = record.text
    if not text:
        return 0, bool(record.events)
    if tokenizer is not None:
        return tokenizer.count(text), True
    return estimate_tokens(text), True


def allocate_tokens(weights: list[int], total: int) -> list[int]:
    """Split ``total`` tokens over chunks in proportion to ``weights`` (largest remainder).

    Shares are ``total * w / sum(w)``, floored, with the remaining tokens going to
    the largest remainders (ties to the earlier chunk). Every chunk gets at least
    one token when ``total >= len(weights)`` (a token-bearing event carries at
    least one token), taken from the chunks with the most. Returns a list summing
    to ``total``.
    """
    n = len(weights)
    if n == 0:
        return []
    if total < n:
        # more events than tokens: give one to the first `total` chunks
        return [1] * total + [0] * (n - total)
    if total == n:  # one token a chunk: what the rules below give (each at least one, summing to n)
        return [1] * n
    w = [max(x, 0) for x in weights]
    wsum = sum(w)
    if wsum == 0:
        w, wsum = [1] * n, n
    shares = [total * x / wsum for x in w]
    ks = [int(x) for x in shares]
    left = total - sum(ks)
    for i in sorted(range(n), key=lambda i: (-(shares[i] - ks[i]), i))[:left]:
        ks[i] += 1
    for i in range(n):
        while ks[i] < 1:
            j = max(range(n), key=lambda j: (ks[j], -j))
            ks[j] -= 1
            ks[i] += 1
    return ks


def tokens_per_event(
    events: list[TokenEvent], output_tokens: int, tokenizer: TokenCounter | None = None
) -> tuple[list[int], bool]:
    """Tokens carried by each token-bearing event, and whether that is estimated.

    From continuous usage (cumulative ``usage.completion_tokens`` on every chunk)
    when present on all events: exact. Else from the tokenizer per chunk, scaled
    so the counts sum to ``output_tokens``; else from the characters. Both estimated.
    """
    if events and events[0].usage_completion_tokens is not None:
        cum = [e.usage_completion_tokens for e in events]
        n = len(cum)
        if cum[-1] == n == output_tokens and cum == list(range(1, n + 1)):
            return [1] * n, False  # one token an event, counted 1..n: the rule below's answer, in C-level passes
        if None not in cum:  # each event's tokens: the difference of the cumulative counts
            ks = list(map(operator.sub, cum, [0, *cum[:-1]]))  # None was ruled out above
            if sum(ks) == output_tokens and min(ks) >= 1:
                return ks, False
    if tokenizer is not None:
        weights = [max(tokenizer.count(e.text), 1) for e in events]
    else:
        weights = [max(len(e.text), 1) for e in events]
    return allocate_tokens(weights, output_tokens), True


def itl_samples(events: list[TokenEvent], ks: list[int], output_tokens: int) -> list[float]:
    """Per-token inter-token latencies (ns) for one request.

    A chunk that carries k tokens after a gap g contributes k samples of g/k; the
    extra tokens of the first token-bearing chunk contribute samples of 0. The
    result has ``output_tokens - 1`` samples and its mean equals TPOT
    (shared/cases conventions). A chunk assigned 0 tokens folds its gap into the
    next chunk that carries tokens.
    """
    if output_tokens <= 1 or not events:
        return []
    if len(events) > output_tokens:
        # more token events than tokens (inconsistent server): spread evenly
        span = events[-1].t_ns - events[0].t_ns
        return [span / (output_tokens - 1)] * (output_tokens - 1)
    out: list[float] = [0.0] * (ks[0] - 1)
    prev_t = events[0].t_ns
    for ev, k in zip(events[1:], ks[1:]):
        if k <= 0:
            continue
        g = (ev.t_ns - prev_t) / k
        out.extend([g] * k)
        prev_t = ev.t_ns
    return out


BUFFERED_TOKEN_SHARE = 0.9
"""A stream is buffered when this share of its output tokens arrived in one burst (see :func:`is_buffered`)."""

BUFFERED_SPAN_FRACTION = 0.1
"""... a burst shorter than this fraction of the silence before it (the TTFT, or the previous gap)."""

COALESCE_NS = 500_000
"""Token events less than this apart arrive together: one read (HTTP events of one read share
their stamp) or messages handled back to back (gRPC stamps each message as it is taken)."""

BUFFERED_TOKENS_PER_ARRIVAL = 8
"""Arrivals carrying this many tokens each are a burst even one event at a time (more than
speculative decoding's few tokens a step)."""


def arrivals(events: list[TokenEvent], ks: list[int]) -> list[tuple[int, int, int, int]]:
    """Token events grouped into arrivals: ``(first_t_ns, last_t_ns, tokens, events)`` per group.

    An event joins the group before it when it came less than :data:`COALESCE_NS` after
    that group's last event; ``ks`` are the tokens of each event (:func:`tokens_per_event`)."""
    out: list[tuple[int, int, int, int]] = []
    for ev, k in zip(events, ks):
        if out and ev.t_ns - out[-1][1] < COALESCE_NS:
            first, _, n, e = out[-1]
            out[-1] = (first, ev.t_ns, n + k, e + 1)
        else:
            out.append((ev.t_ns, ev.t_ns, k, 1))
    return out


def is_buffered(events: list[TokenEvent], ks: list[int], start_ns: int) -> bool:
    """Whether a stream's tokens came in one burst, so that TPOT and ITL cannot be measured.

    Buffered when some run ``W`` of consecutive arrivals (:func:`arrivals`) holds at least
    :data:`BUFFERED_TOKEN_SHARE` (90 %) of the output tokens, spans less than
    :data:`BUFFERED_SPAN_FRACTION` (a tenth) of the gap before it (from ``start_ns``, the
    send, for the first arrival; else from the arrival before it), and its tokens came
    together rather than one arrival at a time: ``W`` is one arrival, or its arrivals hold
    two or more events each on average (events coalesced in reads), or
    :data:`BUFFERED_TOKENS_PER_ARRIVAL` tokens each.

    What it catches: one event carrying every token (a batching server, a non-streaming
    backend behind a streaming API); a buffering proxy that hands the stream over in one
    read or in a few reads milliseconds apart, with or without the first token sent ahead;
    gRPC responses delivered in one batch. What it leaves alone: honest fast streams,
    however short and whatever their TTFT (8 tokens 1 ms apart arrive one at a time);
    multi-token chunks written one at a time (speculative decoding, ``stream_interval``);
    a stream that resumes at its own pace after a long stall. One token, or none, has no
    TPOT to protect. ``ks`` are the tokens of each event (summing to the output tokens).
    """
    n = sum(ks)
    if n < 2 or not events:
        return False
    if n == len(ks) == len(events) and min(ks) == 1 and not _may_be_burst(events, start_ns):
        return False
    groups = arrivals(events, ks)
    need = BUFFERED_TOKEN_SHARE * n
    j, tokens, evs = 0, 0, 0
    for i, (first, _, k_i, e_i) in enumerate(groups):
        # the shortest run of arrivals starting at i that holds `need` tokens: groups[i..j-1]
        while j < len(groups) and tokens < need:
            tokens += groups[j][2]
            evs += groups[j][3]
            j += 1
        if tokens < need:
            return False
        span = groups[j - 1][1] - first
        gap = first - (groups[i - 1][1] if i else start_ns)
        width = j - i
        together = width == 1 or evs >= 2 * width or tokens >= BUFFERED_TOKENS_PER_ARRIVAL * width
        if span < BUFFERED_SPAN_FRACTION * gap and together:
            return True
        tokens -= k_i
        evs -= e_i
    return False


def _may_be_burst(events: list[TokenEvent], start_ns: int) -> bool:
    """False when no run of one-token events can pass :func:`is_buffered`'s test (a sound early
    exit, exact): every run holding :data:`BUFFERED_TOKEN_SHARE` of the tokens spans at least the
    shortest such run of consecutive events, and every gap before a run is at most the largest
    gap (the first from ``start_ns``); when the shortest span is at least
    :data:`BUFFERED_SPAN_FRACTION` of the largest gap, no run is a burst. One pass of C-level
    ``map`` instead of the arrival grouping a token (an honest stream of 256 tokens: ~10 µs)."""
    ts = [e.t_ns for e in events]
    n = len(ts)
    m = math.ceil(BUFFERED_TOKEN_SHARE * n)  # events (one token each) in the shortest qualifying run
    shortest = min(map(operator.sub, ts[m - 1 :], ts))
    widest = max(ts[0] - start_ns, max(map(operator.sub, ts[1:], ts), default=0))
    return not shortest >= BUFFERED_SPAN_FRACTION * widest


def stream_buffered(record: RequestRecord) -> bool:
    """:func:`is_buffered` for a streamed record, from its own facts only (usage, else the
    characters: no tokenizer), so that every endpoint's reader and :func:`compute` agree.
    The gap before the first arrival runs from the send (the scheduled time if none)."""
    events = record.events
    if len(events) == 0:
        return False
    n, _ = count_output_tokens(record)
    ks, _ = tokens_per_event(events, n)
    start = record.sent_ns if record.sent_ns is not None else record.scheduled_ns
    return is_buffered(events, ks, start)


def compute(
    record: RequestRecord,
    tokenizer: TokenCounter | None = None,
    origin: Literal["scheduled", "sent"] = "scheduled",
) -> RequestMetrics:
    """Derive the metrics of one finished request (see :class:`RequestMetrics`).

    A request with zero output tokens adds no TTFT/TPOT/ITL/E2E sample; a failed
    request adds only ``error_e2e_ns``; a buffered one (its tokens in one burst,
    :func:`is_buffered`) no TPOT, ITL or inter-chunk sample.
    """
    m = RequestMetrics()
    if record.sent_ns is not None:
        m.schedule_lag_ns = record.sent_ns - record.scheduled_ns
    start = record.scheduled_ns
    if origin == "sent" and record.sent_ns is not None:
        start = record.sent_ns
    n, est = count_output_tokens(record, tokenizer)
    m.output_tokens = n
    m.output_tokens_estimated = est
    if not record.ok:
        if record.end_ns is not None:
            m.error_e2e_ns = record.end_ns - start
        return m
    if n == 0:
        return m
    events = record.events
    if record.end_ns is not None:
        m.e2e_ns = record.end_ns - start
    if not events:
        # non-streaming response: only E2E is measurable
        return m
    first = events[0].t_ns
    m.ttft_ns = first - start
    for ev in events:
        if ev.answer:
            m.time_to_first_answer_token_ns = ev.t_ns - start
            break
    ks, itl_est = tokens_per_event(events, n, tokenizer)
    if record.buffered or record.buffered_judged:  # settled by stream_buffered: this rule, already applied
        buffered = record.buffered
    elif tokenizer is None:  # the same token split stream_buffered uses: computed once
        sent = record.sent_ns if record.sent_ns is not None else record.scheduled_ns
        buffered = is_buffered(events, ks, sent)
    else:
        buffered = stream_buffered(record)
    if buffered:
        # the tokens came in one burst (a buffering proxy, a batching server): no TPOT or ITL
        return m
    if n >= 2:
        m.tpot_ns = (events[-1].t_ns - first) / (n - 1)
    ts = [e.t_ns for e in events]
    m.inter_chunk_ns = list(map(operator.sub, ts[1:], ts))
    m.tokens_per_chunk = ks
    m.itl_estimated = itl_est
    if len(events) == n:  # one token an event (ks all 1): itl_samples gives the gaps themselves
        m.itl_ns = list(map(float, m.inter_chunk_ns))
    else:
        m.itl_ns = itl_samples(events, ks, n)
    return m


def token_pace_ns(m: RequestMetrics) -> list[float]:
    """Each output token's pace since the first token, for the token-deadline SLO (``tbt_deadline``).

    Token ``i`` (0-based; token 0 is the first, TTFT's) is due by ``first + i * target``: it is on time
    when ``pace_i = (arrival_i - first) / i <= target``. A token arrives with the event that carries it
    (every token of a k-token event at that event's arrival: a burst after a stall is late, not spread
    over the stall as ITL spreads it); the first event's other tokens arrive with it (pace 0). Returns
    ``output_tokens - 1`` values (none for a request with fewer than two tokens or a buffered one).
    Without the tokens each event carried (a record line read back), tokens follow the ITL samples.
    """
    ks = m.tokens_per_chunk
    gaps = m.inter_chunk_ns
    if ks and len(ks) == len(gaps) + 1:
        offsets: list[float] = []
        for off, k in zip(itertools.accumulate(gaps, initial=0), ks):
            offsets.extend([off] * k)
    elif m.itl_ns:
        offsets = list(itertools.accumulate(m.itl_ns, initial=0.0))
    else:
        return []
    return [off / i for i, off in enumerate(offsets[1:], 1)]


def prefix_cache_hit_rate(cached_tokens: int, prompt_tokens: int) -> float | None:
    """Prefix-cache hit rate = cached prompt tokens / prompt tokens, over the same requests.

    ``cached_tokens``: the sum of ``usage.prompt_tokens_details.cached_tokens`` (vLLM with
    ``--enable-prompt-tokens-details``, OpenAI) over the requests that report it; ``prompt_tokens``:
    the sum of ``usage.prompt_tokens`` of those same requests. None when they hold no prompt token.
    As vLLM's ``prefix_cache_hits`` / ``prefix_cache_queries`` counters, per request.
    """
    return cached_tokens / prompt_tokens if prompt_tokens > 0 else None

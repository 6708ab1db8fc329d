"""Issue 22: the record path off the read path, closed-loop semantics, stamp lateness.

* ``LatencyHistogram.record_many_ns`` gives exactly the counts of ``record_ns`` one by one (the
  per-token HDR recording was ~8 µs a value, milliseconds a record, on the loop that stamps reads);
* closed-loop users start staggered over the ramp, each request's ``scheduled_ns`` is its due time
  (its user's previous request done), and closed-loop latency counts from the send;
* the stamp lateness is token-weighted; the verdict judges it, and the closed loop's due->send lag.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core.clock import now_ns
from loadgen.core.histograms import HIGHEST_US, SIGNIFICANT_FIGURES, LatencyHistogram
from loadgen.core.samples import SampleLog
from loadgen.core.types import RequestRecord, RequestSpec, TokenEvent
from loadgen.engine.closed_loop import RAMP_MAX_NS, RAMP_PER_USER_NS, ramp_ns
from loadgen.engine.runner import ClientStats, Runner, RunPlan
from loadgen.engine.runplan import LoadConfig
from loadgen.engine.stamp_lateness import StampLateness
from loadgen.engine.validity import ValidityBounds, validity

MS = 1_000_000


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(min_value=-1e6, max_value=5e15, allow_nan=False),
            st.integers(min_value=0, max_value=4_000_000_000_000_000).map(float),
        ),
        max_size=300,
    )
)
def test_record_many_is_record_one_by_one(values: list[float]) -> None:
    """The batched count (both ``record_ns`` and ``record_many_ns`` are buffered) against hdrh's own
    ``record_value`` one value at a time, with the rounding and the overflow counted beside it."""
    ref = HdrHistogram(1, HIGHEST_US, SIGNIFICANT_FIGURES)
    count = total = n_over = max_over = 0
    for v in values:
        u = int(v / 1000 + 0.5) if v >= 0 else 0
        count, total = count + 1, total + u
        if not ref.record_value(u):
            n_over, max_over = n_over + 1, max(max_over, u)
    a, b = LatencyHistogram("a"), LatencyHistogram("b")
    for v in values:
        a.record_ns(v)
    b.record_many_ns(values)
    for h in (a, b):
        assert list(h.hist.counts) == list(ref.counts)
        assert (h.count, h.sum_us, h.overflow_count, h.overflow_max_us) == (count, total, n_over, max_over)
        assert (h.hist.total_count, h.hist.min_value, h.hist.max_value) == (
            ref.total_count,
            ref.min_value,
            ref.max_value,
        )
        if ref.total_count:
            assert h.hist.get_value_at_percentile(99) == ref.get_value_at_percentile(99)


def test_buffered_values_are_counted_by_every_read_and_across_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Values wait in the buffer: each read (count, sum, overflow, percentiles, merge, state) sees them
    all, and batches cut at PENDING_MAX (made small here) count as one pass would."""
    import loadgen.core.histograms as hmod

    monkeypatch.setattr(hmod, "PENDING_MAX", 7)
    rng = np.random.default_rng(3)
    values = [float(v) for v in rng.integers(0, 5_000_000_000_000_000, 100)] + [-5.0, 0.0, 1e6]
    one, many, also = LatencyHistogram("a"), LatencyHistogram("b"), LatencyHistogram("c")
    for v in values:
        one.record_ns(v)
    for k in range(0, len(values), 5):
        many.record_many_ns(values[k : k + 5], also)
    assert len(many._pending) < 7  # batches were counted on the way
    for h in (many, also):
        assert (h.count, h.sum_us, h.overflow_count, h.overflow_max_us) == (
            one.count,
            one.sum_us,
            one.overflow_count,
            one.overflow_max_us,
        )
        assert list(h.hist.counts) == list(one.hist.counts)
        assert h.percentile_ms(50) == one.percentile_ms(50) and h.max_ms() == one.max_ms()
    late = LatencyHistogram("d")
    late.record_many_ns([2e6, 3e6])
    merged = LatencyHistogram("e")
    merged.merge(late)  # the other's buffer is counted before it is added
    assert merged.count == 2 and merged.percentile_ms(100) == late.percentile_ms(100)
    fresh = LatencyHistogram("f")
    fresh.record_many_ns([4e6])
    assert LatencyHistogram.from_state(fresh.to_state()).count == 1


def test_stamp_lateness_charges_only_tokens_stamped_in_a_hold() -> None:
    s = StampLateness()
    # probe 1: due at 5 ms, ended at 5 ms (on time); probe 2: due at 10 ms, ended at 30 ms (held 20 ms)
    s.probe(5 * MS, 0)
    s.probe(30 * MS, 20 * MS)
    # 98 tokens stamped on time (before probe 2 was due), 2 stamped after the hold began
    s.add([1 * MS] * 49 + [7 * MS] * 49 + [12 * MS, 29 * MS, 31 * MS])
    assert s.tokens == 0  # its last token (31 ms) came after the last probe: the request waits for the next one
    s.probe(36 * MS, 0)
    assert s.tokens == 101
    s.probe(41 * MS, 0)
    assert s.tokens == 101
    assert s.percentile_ms(97) == 0.1  # the first bin (0-0.1 ms)
    assert s.percentile_ms(99) == 2.1  # the held tokens: charged the part of the hold before their stamp (2 ms)...
    assert s.percentile_ms(100) == 19.1  # ...and 19 ms
    s2 = StampLateness()
    assert s2.percentile_ms(99) is None


def _closed(concurrency: int, requests: int) -> tuple[list[RequestRecord], dict[int, int], Runner]:
    class Fake:
        def __init__(self) -> None:
            self.started: dict[int, int] = {}

        def accepts_send_gate(self) -> bool:
            return False

        async def send(self, spec: RequestSpec, rec: RequestRecord, gate: Any = None) -> None:
            self.started[spec.index] = now_ns()
            rec.sent_ns = now_ns()
            await asyncio.sleep(0.02)
            rec.events.append(TokenEvent(now_ns(), "x"))
            rec.end_ns = now_ns()
            rec.status = "ok"

    ep = Fake()
    got: list[RequestRecord] = []
    plan = RunPlan(
        mode="closed",
        concurrency=concurrency,
        make_spec=lambda i: RequestSpec(index=i, prompt="p"),
        max_requests=requests,
    )
    runner = Runner(ep, plan, got.append, install_signal_handlers=False)  # type: ignore[arg-type]  # a fake endpoint
    asyncio.run(asyncio.wait_for(runner.run(), 60))
    return got, ep.started, runner


@pytest.mark.timing
def test_closed_loop_users_start_staggered_and_requests_are_due_when_the_previous_ends() -> None:
    c = 16
    got, started, runner = _closed(c, 3 * c)
    assert len(got) == 3 * c
    ramp = ramp_ns(c)
    assert ramp == min(c * RAMP_PER_USER_NS, RAMP_MAX_NS)
    firsts = sorted(started[i] for i in range(c))
    # before: every user's first send at t0 together (span ~0); now spread over the ramp
    assert firsts[-1] - firsts[0] >= ramp // 2
    by_index = {r.index: r for r in got}
    for r in got:
        assert r.sent_ns is not None and r.scheduled_ns <= r.sent_ns
    # a later request is due when some earlier one of its user was done: after that one's end
    ends = sorted(r.end_ns for r in got if r.end_ns is not None)
    for i in range(c, 3 * c):
        r = by_index[i]
        assert any(e <= r.scheduled_ns for e in ends), "a follow-up request is due after a previous end"
    # the token stamps are charged (the last ones, after the last loop probe, may not be)
    assert c <= runner.stamps.tokens <= 3 * c


def test_closed_loop_latency_counts_from_the_send() -> None:
    assert LoadConfig(concurrency=8, requests=10).latency_origin == "sent"
    assert LoadConfig(rate_rps=5.0, requests=10).latency_origin == "scheduled"
    assert LoadConfig(rate_rps=5.0, requests=10, origin="sent").latency_origin == "sent"


class _Agg:
    def __init__(self, lags_ns: list[int], e2e_ns: list[int]) -> None:
        self.generator_lag = SampleLog()
        for v in lags_ns:
            self.generator_lag.append(v)
        e2e = SampleLog()
        for v in e2e_ns:
            e2e.append(v)
        self.samples = {"e2e": e2e}
        self.generator_sends = len(lags_ns)
        self.first_generator_send_ns = self.last_generator_send_ns = None
        self.errors_by_kind: dict[str, int] = {}
        self.pool_queued = self.throttled = self.rate_limited_attempts = 0
        self.requests = self.completed = len(lags_ns)
        self.failed = self.length_checked = self.length_mismatch = self.buffered = 0
        self.duration_s = 20.0

    def throughput(self) -> dict[str, Any]:
        return {}


def _checks(v: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in v["checks"]}


def test_closed_loop_verdict_judges_due_to_send_lag_and_stamp_lateness() -> None:
    b = ValidityBounds()
    busy_loop = [50.0] * 200  # a loop busy at moments with no token: p99 50 ms
    ok = ClientStats(
        cpu_s=1, wall_s=10, loop_lag_ms=busy_loop, open_loop=False, stamp_lateness_p99_ms=1.0, stamp_tokens=5000
    )
    v = validity(_Agg([1 * MS] * 200, [100 * MS] * 200), ok, b)  # type: ignore[arg-type]  # a stand-in Aggregator
    c = _checks(v)
    assert v["valid"], v
    assert c["send_lag"]["ok"] and c["stamp_lateness_p99"]["ok"]
    assert c["event_loop_lag_p99"]["group"] == "measurement" and not c["event_loop_lag_p99"]["ok"]
    # late stamps: INVALID
    late = ClientStats(
        cpu_s=1, wall_s=10, loop_lag_ms=busy_loop, open_loop=False, stamp_lateness_p99_ms=9.0, stamp_tokens=5000
    )
    v = validity(_Agg([1 * MS] * 200, [100 * MS] * 200), late, b)  # type: ignore[arg-type]  # a stand-in Aggregator
    assert not v["valid"] and not _checks(v)["stamp_lateness_p99"]["ok"]
    # a caller that loosened --max-loop-lag (a busy CI machine) loosens the stamp bound with it
    v = validity(_Agg([1 * MS] * 200, [100 * MS] * 200), late, ValidityBounds(max_loop_lag_p99_ms=500))  # type: ignore[arg-type]  # a stand-in Aggregator
    assert _checks(v)["stamp_lateness_p99"]["ok"]
    # users sent late: idle 8 / 108 of their time, over 5 %
    v = validity(_Agg([8 * MS] * 200, [100 * MS] * 200), ok, b)  # type: ignore[arg-type]  # a stand-in Aggregator
    assert not v["valid"] and not _checks(v)["send_lag"]["ok"]
    # ...0.4 % of their time beside a 2 s E2E
    v = validity(_Agg([8 * MS] * 200, [2000 * MS] * 200), ok, b)  # type: ignore[arg-type]  # a stand-in Aggregator
    assert v["valid"], v
    # too few token stamps: the event-loop lag is judged as before
    few = ClientStats(
        cpu_s=1, wall_s=10, loop_lag_ms=busy_loop, open_loop=False, stamp_lateness_p99_ms=1.0, stamp_tokens=10
    )
    v = validity(_Agg([1 * MS] * 200, [100 * MS] * 200), few, b)  # type: ignore[arg-type]  # a stand-in Aggregator
    assert not v["valid"] and _checks(v)["event_loop_lag_p99"]["group"] == "generator"
    assert "stamp_lateness_p99" not in _checks(v)
    assert np.isfinite(v["loop_lag_p99_ms"])


def _parse(reads: list[bytes], fast: bool) -> tuple[Any, ...]:
    from loadgen.core.errors import ProtocolError
    from loadgen.core.redact import Redactor
    from loadgen.endpoints import openai_stream

    rec = RequestRecord(index=0, phase="measure", scheduled_ns=0)
    p = openai_stream.OpenAIStreamParser(rec, chat=False, redact=Redactor(), max_event_bytes=400)
    fast_events = openai_stream._plain_data_events
    if not fast:
        openai_stream._plain_data_events = lambda chunk, max_event_bytes: None  # every read through the SSE decoder
    err = None
    try:
        for i, chunk in enumerate(reads):
            if p.feed(chunk, i):
                break
        p.finish(len(reads))
    except ProtocolError as exc:
        err = "protocol"
        assert str(exc)
    finally:
        openai_stream._plain_data_events = fast_events
    return (err, rec.status, rec.error_kind, rec.finish_reason, rec.completion_tokens, rec.prompt_tokens,
            [(e.t_ns, e.text, e.usage_completion_tokens) for e in rec.events], rec.end_ns)  # fmt: skip


_EVENTS = st.sampled_from(
    [
        b'data: {"choices":[{"text":" a","finish_reason":null}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}\n\n',
        b'data:{"choices":[{"text":"b\\u00e9","finish_reason":null}]}\n\n',
        b'data: {"choices":[{"text":" c","finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":1}}}\n\n',
        b": keep-alive\n\n",
        b"data: \n\n",
        b'data: {"choices":[{"text":\n',
        b'data: " split"}]}\n\n',
        b'event: x\r\ndata: {"choices":[{"text":" d"}]}\r\n\r\n',
        b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}\n\n',
        b'data: {"choices":[{"text":" \xc3\xa9"}]}\n\n',
        b'data: {"choices":[{"text":"' + b"x" * 420 + b'"}]}\n\n',
        b"data: {not json}\n\n",
        b'data: {"error":{"message":"boom"}}\n\n',
        b"\xef\xbb\xbfdata: [DONE]\n\n",
        b"data: [DONE]\n\n",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_EVENTS, min_size=1, max_size=12), st.lists(st.integers(min_value=0, max_value=2000), max_size=8))
def test_fast_reads_give_what_the_sse_decoder_gives(events: list[bytes], cuts: list[int]) -> None:
    """The parser's fast path (whole data-only events in a read, decoder state clean) yields exactly
    what the SSE decoder path yields, for any byte split of any stream (issue 22 item 1)."""
    stream = b"".join(events)
    at = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    reads = [stream[a:b] for a, b in zip(at, at[1:]) if b > a]
    by_event = [e for e in events]  # one event per read: the fast path's common case
    for r in (reads, by_event):
        assert _parse(r, fast=True) == _parse(r, fast=False)

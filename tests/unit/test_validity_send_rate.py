"""The send-rate validity check charges the generator only with its own lateness, in exact ns.

100 requests scheduled 2 ms apart (the schedule's realized rate: 99 / 0.198 s = 500 req/s).
A send's lateness that is the server's TCP/TLS handshake after the scheduled time
(``connect_late_ns``) is excused, as the schedule-lag check excuses it; lateness of the
generator itself is not. The CLI case against a real slow-handshake server is
``tests/integration/test_send_rate_handshake.py``.
"""

from __future__ import annotations

import pytest

from loadgen.core.metrics import compute
from loadgen.core.types import RequestRecord, TokenEvent
from loadgen.engine.results import Aggregator
from loadgen.engine.runner import ClientStats
from loadgen.engine.validity import ValidityBounds, generator_send_rps, validity

MS = 1_000_000
N = 100
GAP_NS = 2 * MS
REALIZED_RPS = (N - 1) / ((N - 1) * GAP_NS / 1e9)


def _run(lateness_ns: list[int], connect_late_ns: list[int]) -> tuple[Aggregator, dict]:
    agg = Aggregator()
    for i, (late, conn) in enumerate(zip(lateness_ns, connect_late_ns)):
        t = 1_000 * MS + i * GAP_NS
        sent = t + late
        rec = RequestRecord(
            i, "measure", t, sent_ns=sent, end_ns=sent + 10 * MS, status="ok", completion_tokens=2,
            events=[TokenEvent(sent + 5 * MS, "a"), TokenEvent(sent + 8 * MS, "b")],
            connect_ns=conn, connect_late_ns=conn, connection_reused=not conn,
        )  # fmt: skip
        agg.add(rec, compute(rec))
    client = ClientStats(open_loop=True, schedule_realized_rps=REALIZED_RPS)
    v = validity(agg, client, ValidityBounds(min_requests=1, min_duration_s=0))
    return agg, {c["name"]: c for c in v["checks"]}


def test_a_slow_handshake_is_not_a_slow_generator() -> None:
    # a server whose handshakes fall behind: request i waits i * 0.2 ms for its connection
    late = [i * MS // 5 for i in range(N)]
    agg, checks = _run(late, late)
    assert agg.throughput()["achieved_send_rps"] == pytest.approx(99 / 0.2178)  # the actual sends: 9 % slow
    assert generator_send_rps(agg) == pytest.approx(REALIZED_RPS)
    assert checks["send_rate"]["ok"] and checks["schedule_lag_p99"]["ok"], checks


def test_a_generator_falling_behind_still_fails() -> None:
    # the same lateness, the generator's own (no connection was being set up)
    late = [i * MS // 5 for i in range(N)]
    agg, checks = _run(late, [0] * N)
    assert generator_send_rps(agg) == pytest.approx(99 / 0.2178)
    assert not checks["send_rate"]["ok"], checks["send_rate"]
    # within the lag bound (p99 19.6 ms > 5 ms fails too here); a slower drift fails on rate alone
    late = [i * MS // 25 for i in range(N)]  # 3.96 ms behind at the end: p99 lag < 5 ms
    agg, checks = _run(late, [0] * N)
    assert checks["schedule_lag_p99"]["ok"] and not checks["send_rate"]["ok"], checks


def test_only_the_handshakes_part_after_the_scheduled_time_is_excused() -> None:
    # the second half of the requests 4 ms late, of which a new connection's set-up after the
    # scheduled time accounts for 1 ms: the generator's own 3 ms stretch its span by 1.5 %
    late = [0] * (N // 2) + [4 * MS] * (N // 2)
    agg, checks = _run(late, [0] * (N // 2) + [1 * MS] * (N // 2))
    assert generator_send_rps(agg) == pytest.approx(99 / (0.198 + 0.003))
    assert not checks["send_rate"]["ok"], checks["send_rate"]
    agg, checks = _run(late, late)  # all 4 ms the handshake's
    assert generator_send_rps(agg) == pytest.approx(REALIZED_RPS)
    assert checks["send_rate"]["ok"], checks["send_rate"]


def test_the_client_cpu_check_says_when_the_loop_waited_for_a_cpu() -> None:
    # a vLLM on CPU beside the client: the loop waited 1.52 s of 128 s runnable; the client's own CPU was 5 %
    from loadgen.engine.lifecycle import loop_cpu_wait_ns
    from loadgen.engine.validity import cpu_wait_note

    busy = ClientStats(cpu_s=6.4, wall_s=128.0, cpu_wait_s=1.52)
    assert "waited 1.52 s (1.2 % of the run) for a CPU" in cpu_wait_note(busy)
    assert cpu_wait_note(ClientStats(cpu_s=6.4, wall_s=128.0, cpu_wait_s=0.5)) == ""  # under 1 %: nothing said
    assert cpu_wait_note(ClientStats(cpu_s=6.4, wall_s=128.0)) == ""  # not measured (not Linux)
    w = loop_cpu_wait_ns()
    assert w is None or w >= 0

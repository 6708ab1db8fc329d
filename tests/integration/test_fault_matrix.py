"""The fault matrix: each row is a run against a real local server on 127.0.0.1.

Servers: the simulated endpoint (``loadgen.sim``), or the fault server of
``tests/fixtures/fault_proxy.py`` in its own process, either as a raw HTTP/1.1
server playing a behavior per request or as a proxy in front of a server (added
latency, one byte per send, a freeze, a down period, TLS termination).

The client runs in this process through the library (``loadgen.measurement.measure``
with an ``OpenAIEndpoint``), so descriptors and tasks can be counted before and
after (``check_run``). For every row: no crash, no hang (the run ends within its
deadline), every scheduled request accounted for exactly once (a record, or
unsent), the right error kind, no descriptor or task leak, no retries (the
server saw each request once), and success latencies untouched (failed requests
stay out of them; the ok requests of a mixed run keep the server's timing).

Mixed rows interleave the fault with good requests: request ``i`` is faulted when
``i % 3 == 1`` (the server picks the behavior from the ``x-request-id`` suffix).

The 10 s "server down" variant lives in ``test_soak.py`` with the other long runs;
this file keeps the 3 s one. The rows about the client's own limits (a 64 MiB line,
descriptors, pool, schedule, TLS, redirects) are in ``test_fault_matrix_client.py``; the
shared checks in ``tests/fixtures/fault_matrix.py``.
"""

from __future__ import annotations

import socket
import statistics
from pathlib import Path
from typing import Any

import pytest

from loadgen.core.clock import now_ns
from loadgen.sim.launch import SimProcess
from tests.fixtures.fault_matrix import (
    FIRST_S,
    OK,
    SUCCESS_MEDIAN_TOL_MS,
    TOKENS,
    check_deviations,
    check_no_retries,
    check_success_untouched,
    free_port,
    go,
    load,
    ttft_ms,
)
from tests.fixtures.fault_proxy import (
    DONE,
    STREAM_HEAD,
    FaultServer,
    b64,
    check_run,
    chunk,
    run_inprocess,
    server_down_and_back,
    text_event,
    truth_for,
)

# alone: its 30 ms tolerance on a success beside a fault is an idle machine's (.ci/LEDGER.md, e17f3dd)
pytestmark = [pytest.mark.timeout(180), pytest.mark.timing, pytest.mark.alone]

N_MIXED = 12


# --------------------------------------------------------------------------- mixed rows

MALFORMED = {
    "kind": "raw",
    "then": "keep",
    "writes": [
        [
            0,
            b64(
                STREAM_HEAD
                + chunk(text_event(" a"))
                + chunk(b'data: {"choices": [\n\n')
                + chunk(text_event(" b", "length"))
                + chunk(DONE)
                + b"0\r\n\r\n"
            ),
        ]
    ],
}

# name -> (behavior, expected kind, endpoint options, token events before the failure or None)
MIXED: dict[str, tuple[dict[str, Any], str, dict[str, Any], int | None]] = {
    "reset_before_headers": ({"kind": "reset_before_headers"}, "connect", {}, 0),
    "close_before_headers": ({"kind": "close_before_headers"}, "connect", {}, 0),
    "reset_mid_stream": ({"kind": "reset_mid_stream", "after": 2}, "incomplete_stream", {}, 2),
    "clean_end_without_done": ({"kind": "clean_end_no_done", "tokens": 3}, "incomplete_stream", {}, 3),
    "eof_without_done": ({"kind": "eof_no_done", "tokens": 3}, "incomplete_stream", {}, 3),
    "no_response_total_deadline": ({"kind": "no_response"}, "timeout", {"timeout_s": 1.0}, 0),
    "stall_mid_stream": ({"kind": "stall", "after": 2}, "timeout", {"timeout_s": 1.0}, 2),
    "error_event_in_200_stream": ({"kind": "inband_error", "after": 2}, "stream_error", {}, 2),
    "malformed_json_event": (MALFORMED, "protocol", {}, 1),
}


@pytest.mark.parametrize("name", list(MIXED))
def test_mixed_fault(name: str, tmp_path: Path, client: str = "aiohttp") -> None:
    beh, kind, ep_kw, events_before = MIXED[name]
    with FaultServer({"mode": "raw", "cycle": [OK, beh, OK]}) as srv:
        run = go(run_inprocess(srv.url, load(N_MIXED), tmp_path / "out", http_client=client, **ep_kw))
        check_run(run, max_wall_s=8.0)
        check_no_retries(srv, N_MIXED)
    recs = run.by_index()
    faulted = [i for i in range(N_MIXED) if i % 3 == 1]
    for i in faulted:
        r = recs[i]
        assert (r.status, r.error_kind) == ("error", kind), (i, r.error_kind, r.error_detail)
        assert r.http_status is None and r.retry_after_s is None
        assert r.sent_ns is not None  # each reached the server (logged there)
        if events_before is not None:
            assert len(r.events) == events_before
        if kind == "timeout":
            e = run.metrics_of(i).error_e2e_ns / 1e6
            assert 1000.0 <= e < 1000.0 + 500.0, e  # the 1 s deadline ended it, not the server
    check_success_untouched(run, [i for i in range(N_MIXED) if i % 3 != 1])
    assert run.result["counts"]["errors_by_kind"] == {kind: len(faulted)}


@pytest.mark.parametrize("name", list(MIXED))
def test_mixed_fault_lean(name: str, tmp_path: Path) -> None:
    """``test_mixed_fault`` with ``--http-client lean`` (loadgen.endpoints.lean_pool)."""
    test_mixed_fault(name, tmp_path, client="lean")


# --------------------------------------------------------------------------- connection refused, DNS


def test_connection_refused(tmp_path: Path) -> None:
    port = free_port()  # bound and closed: nothing listens there
    run = go(run_inprocess(f"http://127.0.0.1:{port}", load(8), tmp_path / "out"))
    check_run(run, max_wall_s=5.0)
    assert {(r.status, r.error_kind) for r in run.records} == {("error", "connect")}
    assert all(r.sent_ns is None for r in run.records)  # nothing was sent
    assert run.result["counts"]["errors_by_kind"] == {"connect": 8}


def test_dns_failure_sends_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A name that cannot resolve (``.invalid``, RFC 6761). The resolver is stubbed so no
    query leaves this machine: it answers EAI_NONAME for that name and refuses any other
    non-loopback name."""
    real = socket.getaddrinfo
    asked: list[str] = []

    def getaddrinfo(host: Any, *a: Any, **k: Any) -> Any:
        h = host.decode() if isinstance(host, bytes) else str(host)
        asked.append(h)
        if h in ("127.0.0.1", "localhost"):
            return real(host, *a, **k)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    run = go(run_inprocess("http://nonexistent.invalid:8000", load(6), tmp_path / "out"))
    check_run(run, max_wall_s=5.0)
    assert "nonexistent.invalid" in asked
    assert {(r.status, r.error_kind) for r in run.records} == {("error", "connect")}
    assert all(r.sent_ns is None for r in run.records)
    assert all("nonexistent.invalid" in r.error_detail for r in run.records)


# --------------------------------------------------------------------------- proxy rows against the sim


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Any:
    truth = tmp_path_factory.mktemp("sim") / "truth.jsonl"
    with SimProcess(["--ttft-ms", "20", "--itl-ms", "5", "--slots", "256", "--truth-log", str(truth)]) as s:
        s.truth_path = truth  # type: ignore[attr-defined]  # the truth log rides on the fixture
        yield s


def test_added_latency_500ms(sim: Any, tmp_path: Path) -> None:
    n = 10
    direct = go(
        run_inprocess(sim.url, load(n, rate=10), tmp_path / "direct", request_id_prefix="lat0", model="sim-model")
    )
    check_run(direct, max_wall_s=6.0)
    up = sim.url.rsplit("//", 1)[1]
    with FaultServer({"mode": "proxy", "upstream": up, "latency_s": 0.5}) as px:
        slow = go(
            run_inprocess(px.url, load(n, rate=10), tmp_path / "slow", request_id_prefix="lat1", model="sim-model")
        )
    check_run(slow, max_wall_s=8.0)
    assert all(r.ok for r in direct.records + slow.records)
    d = [direct.metrics_of(i) for i in range(n)]
    s = [slow.metrics_of(i) for i in range(n)]
    assert all(m.ttft_ns / 1e6 >= 500.0 + 20.0 for m in s)
    shift = statistics.median(m.ttft_ns for m in s) / 1e6 - statistics.median(m.ttft_ns for m in d) / 1e6
    assert abs(shift - 500.0) <= 15.0, shift
    e2e_shift = statistics.median(m.e2e_ns for m in s) / 1e6 - statistics.median(m.e2e_ns for m in d) / 1e6
    assert abs(e2e_shift - 500.0) <= 15.0, e2e_shift
    # the spacing of the stream is kept: inter-chunk gaps as without the proxy
    gd = statistics.median(g for m in d for g in m.inter_chunk_ns) / 1e6
    gs = statistics.median(g for m in s for g in m.inter_chunk_ns) / 1e6
    assert abs(gd - gs) <= 3.0, (gd, gs)
    assert len(truth_for(sim, "lat1", n)) == n  # no retries


def test_stream_one_byte_at_a_time(sim: Any, tmp_path: Path) -> None:
    n = 4
    up = sim.url.rsplit("//", 1)[1]
    with FaultServer({"mode": "proxy", "upstream": up, "byte_at_a_time": True, "byte_gap_s": 0.0}) as px:
        run = go(run_inprocess(px.url, load(n, rate=5), tmp_path / "out", request_id_prefix="byte", model="sim-model"))
        check_run(run, max_wall_s=15.0)
        writes = px.wait_events("proxy_writes", 1, 5.0)
    assert all(r.ok for r in run.records), [(r.error_kind, r.error_detail) for r in run.records]
    for i in range(n):
        m = run.metrics_of(i)
        assert m.output_tokens == TOKENS and not m.output_tokens_estimated
        assert len(run.by_index()[i].events) == TOKENS
        assert m.ttft_ns is not None and m.tpot_ns is not None
    assert writes and all(w["sends"] == w["bytes"] > 0 for w in writes)  # one byte per send
    assert len(truth_for(sim, "byte", n)) == n


def test_server_down_3s_and_back(sim: Any, tmp_path: Path) -> None:
    server_down_and_back(sim, tmp_path, down_s=3.0, before_s=0.8, after_s=0.8, rate=10.0)


# --------------------------------------------------------------------------- 2 s freeze, analytic check

FREEZE_TOL_MS = 15.0


def test_freeze_2s_open_loop_analytic(tmp_path: Path) -> None:
    """All bytes held for 2 s at a known moment of a constant-rate open-loop run.

    A request scheduled at ``s`` inside the freeze ``[F, F + 2]`` cannot get its first
    token before the freeze ends, so measured from its scheduled time
    ``TTFT = (F + 2 - s) + normal TTFT``; requests scheduled well before or after see
    the normal TTFT. The upstream is the raw server (first token 20 ms after the body,
    independent of load) so the normal TTFT is the same for every request. ``F + 2`` is
    the moment the proxy really let go (logged; within a few ms of the plan). The freeze is
    planned before the run starts (1.5 s ahead, 5 s of load): the 4 requests wanted well
    before it leave ~0.6 s for the run's setup on a busy machine, and the 4 after it hold
    for any setup time."""
    rate, n, freeze_at, freeze_s = 5.0, 25, 1.5, 2.0
    with FaultServer({"mode": "raw", "default": OK}) as origin:
        up = origin.url.rsplit("//", 1)[1]
        with FaultServer({"mode": "proxy", "upstream": up}) as px:
            px.command(cmd="freeze", at_ns=now_ns() + int(freeze_at * 1e9), for_s=freeze_s)
            run = go(run_inprocess(px.url, load(n, rate=rate), tmp_path / "out"))
            (ev,) = px.wait_events("freeze", 1, 8.0)
        check_no_retries(origin, n)
    check_run(run, max_wall_s=n / rate + 5.0)
    assert all(r.ok for r in run.records)
    F, E = ev["start_ns"], ev["end_ns"]
    assert abs(F - ev["planned_start_ns"]) < 20e6 and abs(E - ev["planned_end_ns"]) < 20e6, ev
    before = [r for r in run.records if r.scheduled_ns < F - 0.2e9]
    inside = [r for r in run.records if F <= r.scheduled_ns < E]
    after = [r for r in run.records if r.scheduled_ns > E + 0.2e9]
    assert len(before) >= 4 and len(inside) >= int(freeze_s * rate) - 1 and len(after) >= 4
    base = statistics.median(ttft_ms(run, r.index) for r in before)
    assert FIRST_S * 1e3 <= base <= FIRST_S * 1e3 + SUCCESS_MEDIAN_TOL_MS
    dev = {}
    for r in inside:
        want = (E - r.scheduled_ns) / 1e6 + base
        dev[r.index] = ttft_ms(run, r.index) - want
        assert (r.sent_ns - r.scheduled_ns) / 1e6 < 500.0  # sent long before the freeze ended: no wait
    for r in after:
        dev[r.index] = ttft_ms(run, r.index) - base
    check_deviations(dev, FREEZE_TOL_MS)


# --------------------------------------------------------------------------- slow close


def test_slow_close_after_done(tmp_path: Path, client: str = "aiohttp") -> None:
    """[DONE] arrives, the body's end only 1.5 s later: the requests are ok and their
    E2E ends at [DONE], not at the close."""
    slow = {"kind": "slow_close", "close_after_s": 1.5}
    with FaultServer({"mode": "raw", "cycle": [OK, slow, OK]}) as srv:
        run = go(run_inprocess(srv.url, load(6), tmp_path / "out", timeout_s=10.0, http_client=client))
        check_no_retries(srv, 6)
    check_run(run, max_wall_s=6.0)
    assert all(r.ok for r in run.records), [(r.index, r.error_kind) for r in run.records]
    for i in (1, 4):
        e2e = run.metrics_of(i).e2e_ns / 1e6
        assert e2e < 20 + 3 * 5 + 100.0, e2e  # ends at [DONE], not 1.5 s later
    check_success_untouched(run, list(range(6)))


def test_slow_close_after_done_lean(tmp_path: Path) -> None:
    """``test_slow_close_after_done`` with ``--http-client lean`` (loadgen.endpoints.lean_pool)."""
    test_slow_close_after_done(tmp_path, client="lean")


HOLD_AFTER_DONE = {
    "kind": "raw",
    "then": "hold",
    "writes": [
        [
            FIRST_S,
            b64(
                STREAM_HEAD
                + b"".join(chunk(text_event(f" w{i}", "length" if i == 3 else None)) for i in range(4))
                + chunk(DONE)
            ),
        ]
    ],
}


def test_server_never_closes_after_done(tmp_path: Path, client: str = "aiohttp") -> None:
    with FaultServer({"mode": "raw", "cycle": [OK, HOLD_AFTER_DONE, OK]}) as srv:
        run = go(run_inprocess(srv.url, load(3), tmp_path / "out", timeout_s=2.0, http_client=client))
    check_run(run, max_wall_s=10.0)
    r = run.by_index()[1]
    assert (r.status, r.error_kind) == ("ok", None), (r.error_kind, r.error_detail)
    assert run.metrics_of(1).e2e_ns / 1e6 < 20 + 3 * 5 + 100.0
    assert run.wall_s < 1.8  # it did not wait for the deadline


def test_server_never_closes_after_done_lean(tmp_path: Path) -> None:
    """``test_server_never_closes_after_done`` with ``--http-client lean`` (loadgen.endpoints.lean_pool)."""
    test_server_never_closes_after_done(tmp_path, client="lean")


# --------------------------------------------------------------------------- HTTP statuses

DATE = "Mon, 01 Jan 2024 00:00:00 GMT"
STATUSES: list[tuple[int, dict[str, str], str, float | None]] = [
    (400, {}, "http_error", None),
    (401, {}, "http_error", None),
    (403, {}, "http_error", None),
    (404, {}, "http_error", None),
    (408, {}, "http_error", None),
    (413, {}, "http_error", None),
    (422, {}, "http_error", None),
    (429, {"Retry-After": "7"}, "rate_limited", 7.0),
    (429, {"Retry-After": "Mon, 01 Jan 2024 00:02:00 GMT", "Date": DATE}, "rate_limited", 120.0),
    (429, {}, "rate_limited", None),
    (500, {}, "http_error", None),
    (502, {}, "http_error", None),
    (503, {"Retry-After": "5"}, "http_error", None),
    (504, {}, "http_error", None),
]


def test_http_4xx_5xx(tmp_path: Path, client: str = "aiohttp") -> None:
    by_index = {}
    for k, (status, headers, _, _) in enumerate(STATUSES):
        body = {"error": {"message": f"status {status} from the server", "type": "x"}}
        by_index[str(2 * k + 1)] = {"kind": "status", "status": status, "headers": headers, "body": body}
    n = 2 * len(STATUSES) + 1
    with FaultServer({"mode": "raw", "default": OK, "by_index": by_index}) as srv:
        run = go(run_inprocess(srv.url, load(n, rate=50), tmp_path / "out", http_client=client))
        check_no_retries(srv, n)
    check_run(run, max_wall_s=6.0)
    recs = run.by_index()
    for k, (status, _, kind, retry) in enumerate(STATUSES):
        r = recs[2 * k + 1]
        assert (r.error_kind, r.http_status, r.retry_after_s) == (kind, status, retry), (status, r.error_detail)
        assert r.error_detail.startswith(f"HTTP {status}: ") and f"status {status} from the server" in r.error_detail
    check_success_untouched(run, list(range(0, n, 2)))


def test_http_4xx_5xx_lean(tmp_path: Path) -> None:
    """``test_http_4xx_5xx`` with ``--http-client lean`` (loadgen.endpoints.lean_pool)."""
    test_http_4xx_5xx(tmp_path, client="lean")

"""The fault matrix, client side: rows about the client's own protections and limits.

A 64 MiB SSE line (bounded memory, linear time), exhausted descriptors and connection
pool, a generator that cannot keep its schedule, TLS verification, and redirects to
another origin. Each row runs against the fault server of
``tests/fixtures/fault_proxy.py`` on 127.0.0.1, with the same invariants as
``test_fault_matrix.py`` (``check_run``: no crash, no hang, every scheduled request
accounted for once, no descriptor or task leak, no retries).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.core.errors import ProtocolError
from loadgen.core.sse import SSEDecoder
from tests.fixtures.cli_proc import cli_run
from tests.fixtures.fault_matrix import OK, check_no_retries, check_success_untouched, go, load
from tests.fixtures.fault_proxy import FaultServer, check_run, make_self_signed, run_inprocess

pytestmark = [pytest.mark.timeout(180), pytest.mark.timing]


# --------------------------------------------------------------------------- a 64 MiB line


def _vm_hwm() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def test_single_64mib_line_aborts_with_bounded_memory(tmp_path: Path, client: str = "aiohttp") -> None:
    """One SSE line of 64 MiB (no newline until its end): the request is aborted as a
    ``protocol`` error once the line passes 16 Mi characters; the client's peak RSS grows
    by far less than the line."""
    huge = {"kind": "huge_line", "bytes": 64 * 1024 * 1024, "after": 1}
    with FaultServer({"mode": "raw", "default": OK, "by_index": {"1": huge}}) as srv:
        with open("/proc/self/clear_refs", "w") as fh:  # reset this process's peak RSS (VmHWM)
            fh.write("5")
        base = _vm_hwm()
        run = go(run_inprocess(srv.url, load(2, rate=4), tmp_path / "out", timeout_s=30.0, http_client=client))
        peak = _vm_hwm()
        check_no_retries(srv, 2)
    check_run(run, max_wall_s=15.0)
    r = run.by_index()[1]
    assert (r.error_kind, r.error_detail) == ("protocol", "event larger than 16777216 bytes")
    assert len(r.events) == 1
    assert (r.end_ns - r.scheduled_ns) / 1e9 < 10.0
    assert peak - base < 64 * 1024 * 1024, f"peak RSS grew by {(peak - base) / 2**20:.0f} MiB"
    check_success_untouched(run, [0])


def test_single_64mib_line_aborts_with_bounded_memory_lean(tmp_path: Path) -> None:
    """``test_single_64mib_line_aborts_with_bounded_memory`` with ``--http-client lean`` (loadgen.endpoints.lean_pool)."""
    test_single_64mib_line_aborts_with_bounded_memory(tmp_path, client="lean")


def test_64mib_line_costs_linear_time() -> None:
    """The decoder alone, fed the same line as 16 KiB reads (a slow link): it must reach its
    16 MiB limit in linear time. (Through the client, with the loop shared by 30 concurrent
    requests, the quadratic cost showed as event-loop stalls of 15-150 ms and concurrent
    TTFTs of 100-360 ms instead of 20 ms on a loaded 2-core machine.)"""
    dec = SSEDecoder()
    piece = b"x" * 16384
    budget_s, aborted = 0.5, False
    t = time.process_time()
    try:
        dec.feed(b"data: ")
        for _ in range(64 * 1024 * 1024 // len(piece)):
            dec.feed(piece)
            if time.process_time() - t > budget_s:
                break  # too slow already: stop burning CPU (the assertion fails)
    except ProtocolError as exc:
        aborted = "event larger than" in str(exc)
    spent = time.process_time() - t
    assert aborted and spent < budget_s, f"{spent:.2f} s of CPU, aborted: {aborted}"


# --------------------------------------------------------------------------- client limits


def test_descriptors_exhausted(tmp_path: Path, client: str = "aiohttp") -> None:
    """The open-file soft limit is lowered (in this process, after measure() raised it) to a
    few descriptors above what is open: the requests that find none fail as client_limit,
    the others succeed, and the run is INVALID, limited by the client."""
    slow_ok = dict(OK, first_s=0.3)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)

    def lower(_runner: Any) -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))

    with FaultServer({"mode": "raw", "default": slow_ok}) as srv:
        try:
            run = go(
                run_inprocess(srv.url, load(30, rate=100), tmp_path / "out", runner_hook=lower, http_client=client)
            )
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        n_ok = sum(r.ok for r in run.records)
        check_no_retries(srv, n_ok)
    check_run(run, max_wall_s=6.0)
    kinds = {r.error_kind for r in run.records if not r.ok}
    assert kinds == {"client_limit"}
    assert 0 < n_ok < 30
    bad = [r for r in run.records if not r.ok]
    assert all(r.sent_ns is None and "Too many open files" in r.error_detail for r in bad)
    v = run.result["validity"]
    assert v["valid"] is False and v["limited_by"] == "client"
    assert {c["name"]: c["ok"] for c in v["checks"]}["client_resources"] is False


def test_descriptors_exhausted_lean(tmp_path: Path) -> None:
    """``test_descriptors_exhausted`` with ``--http-client lean`` (loadgen.endpoints.lean_pool)."""
    test_descriptors_exhausted(tmp_path, client="lean")


def test_connection_pool_exhausted(tmp_path: Path, client: str = "aiohttp") -> None:
    """A pool of 4 connections under a load needing ~30: requests wait for a slot (no error), and
    the run says so: every connection held a request in flight at the server, a saturated server
    (a warning, the wait in latency), not a slow client (issue 20 item 14: was INVALID, "limited by client")."""
    slow_ok = dict(OK, first_s=0.2)
    with FaultServer({"mode": "raw", "default": slow_ok}) as srv:
        run = go(run_inprocess(srv.url, load(20, rate=100), tmp_path / "out", pool_limit=4, http_client=client))
        check_no_retries(srv, 20)
    check_run(run, max_wall_s=8.0)
    assert all(r.ok for r in run.records)
    queued = [r for r in run.records if r.pool_queued]
    assert len(queued) >= 10
    assert all(r.throttle_ns > 0 for r in queued)  # the wait, on the record
    v = run.result["validity"]
    checks = {c["name"]: c for c in v["checks"]}
    # the generator is not charged for the wait: what is left of each queued send's lag is the loop's own
    # (a few ms; 150-750 ms of waiting before) - so on a quiet machine the run is VALID
    assert max((r.sent_ns - r.scheduled_ns) - r.throttle_ns for r in queued) < 100_000_000
    assert min(r.throttle_ns for r in queued) > 100_000_000
    assert checks["client_resources"]["ok"]
    assert checks["server_saturated"]["ok"] is False
    assert checks["server_saturated"]["detail"].startswith(f"{len(queued)} of 20 requests waited for a connection")
    # the schedule-lag check judges only what is left after the wait; on a quiet machine that passes and the run
    # is VALID, on a busy one a loop hiccup over 5 ms may fail it - then the check must agree with the records
    residual_ms = [
        max((r.sent_ns - r.scheduled_ns) - r.connect_late_ns - r.throttle_ns, 0) / 1e6
        for r in run.records
        if r.sent_ns is not None
    ]
    residual_p99_ms = float(np.percentile(residual_ms, 99))
    assert checks["schedule_lag_p99"]["ok"] == (residual_p99_ms <= 5.0), (residual_p99_ms, checks["schedule_lag_p99"])
    # the send-rate check likewise (1 % of these 20 sends' 190 ms is 1.9 ms: a hiccup at the first or the last send
    # fails it, CI beside another test): it must agree with the records' generator send instants (scheduled + the
    # residual lag above), and the wait, 150-750 ms a request, is never in them (it would be an error of over 50 %)
    sent = sorted(r.scheduled_ns + round(ms * 1e6) for r, ms in zip([r for r in run.records if r.sent_ns], residual_ms))
    sched = sorted(r.scheduled_ns for r in run.records)
    err = abs(((sched[-1] - sched[0]) / (sent[-1] - sent[0])) - 1)  # the rates' ratio, each (n - 1) / span
    assert err < 0.1, err
    assert checks["send_rate"]["ok"] == (err <= 0.01) or abs(err - 0.01) < 0.002, (err, checks["send_rate"])
    generator_failed = [c["name"] for c in v["checks"] if c["group"] == "generator" and not c["ok"]]
    assert set(generator_failed) <= {"schedule_lag_p99", "send_rate"}, generator_failed
    if not generator_failed:
        assert "remedy" not in v and v["valid"] is True


def test_connection_pool_exhausted_lean(tmp_path: Path) -> None:
    """``test_connection_pool_exhausted`` with ``--http-client lean`` (loadgen.endpoints.lean_pool)."""
    test_connection_pool_exhausted(tmp_path, client="lean")


def test_max_concurrency_full_is_not_the_generator_falling_behind(tmp_path: Path) -> None:
    """50 req/s offered through --max-concurrency 4 to a server taking 0.5 s: the cap holds the dispatcher
    while the server works (issue 20 item 14). Before, that read as "the generator fell behind" (the run
    stopped, the rest unsent, INVALID); now every request is sent when a slot frees, with the wait on its
    record (``throttle_ns``) and in its latency, and the run is not stopped."""
    slow_ok = dict(OK, first_s=0.5)
    n = 24
    with FaultServer({"mode": "raw", "default": slow_ok}) as srv:
        run = go(run_inprocess(srv.url, load(n, rate=50, max_concurrency=4), tmp_path / "out"))
        sent = len(run.records)
        check_no_retries(srv, sent)
    check_run(run, max_wall_s=12.0)
    out = run.outcome
    assert out.unsent == 0 and sent == n
    assert all(r.ok for r in run.records)
    assert out.client.aborted_reason is None
    assert max(r.throttle_ns for r in run.records) > 1_000_000_000  # the last ones waited over a second


def test_generator_stalled_loop(tmp_path: Path) -> None:
    """The client's own event loop is blocked for 1.5 s mid-run (a CPU-starved generator):
    it stops at once, the rest is unsent, nothing is lost or double-counted."""
    n = 40

    def block_later(runner: Any) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(0.5, time.sleep, 1.2)

    with FaultServer({"mode": "raw", "default": OK}) as srv:
        run = go(run_inprocess(srv.url, load(n, rate=40), tmp_path / "out", runner_hook=block_later))
        check_no_retries(srv, len(run.records))
    check_run(run, max_wall_s=6.0)
    assert run.outcome.unsent > 0 and len(run.records) + run.outcome.unsent == n
    assert all(r.ok for r in run.records)
    assert run.result["validity"]["limited_by"] == "client"


# --------------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    d = tmp_path_factory.mktemp("certs")
    return {"ip": make_self_signed(d, "127.0.0.1"), "other": make_self_signed(d, "example.test")}


def test_tls_bad_certificate_in_process(
    certs: dict[str, tuple[str, str]], tmp_path: Path, client: str = "aiohttp"
) -> None:
    cert, key = certs["ip"]
    with FaultServer({"mode": "raw", "default": OK, "tls": {"cert": cert, "key": key}}) as srv:
        bad = go(run_inprocess(srv.url, load(4), tmp_path / "verify", http_client=client))
        assert srv.requests() == []  # nothing was sent over the untrusted connection
        good = go(run_inprocess(srv.url, load(4), tmp_path / "insecure", verify_tls=False, http_client=client))
        check_no_retries(srv, 4)
    check_run(bad, max_wall_s=5.0)
    check_run(good, max_wall_s=5.0)
    assert {(r.error_kind, r.sent_ns) for r in bad.records} == {("connect", None)}
    assert all("CERTIFICATE_VERIFY_FAILED" in r.error_detail for r in bad.records)
    assert all(r.ok for r in good.records)
    assert good.result["conditions"]["endpoint"]["client"]["verify_tls"] is False
    assert bad.result["conditions"]["endpoint"]["client"]["verify_tls"] is True


def test_tls_bad_certificate_in_process_lean(certs: dict[str, tuple[str, str]], tmp_path: Path) -> None:
    """``test_tls_bad_certificate_in_process`` with ``--http-client lean`` (loadgen.endpoints.lean_pool)."""
    test_tls_bad_certificate_in_process(certs, tmp_path, client="lean")


def test_tls_cli_verification_on_by_default_off_only_when_asked(
    certs: dict[str, tuple[str, str]], tmp_path: Path
) -> None:
    cert, key = certs["ip"]
    common = ["--rate", "20", "--requests", "4", "--output-tokens", "4", "--input-tokens", "8", "--model", "m"]
    with FaultServer({"mode": "raw", "default": OK, "tls": {"cert": cert, "key": key}}) as srv:
        p = cli_run("run", "--endpoint", srv.url, *common, out=tmp_path / "verify")
        assert srv.requests() == []
        q = cli_run("run", "--endpoint", srv.url, *common, "--insecure", out=tmp_path / "insecure")
    assert p.returncode == 3, p.stderr
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot reach {srv.url}/v1/completions")
    assert "CERTIFICATE_VERIFY_FAILED" in lines[0]
    assert not (tmp_path / "verify" / "result.json").exists()
    assert q.returncode in (0, 1), q.stderr
    res = json.loads((tmp_path / "insecure" / "result.json").read_text())
    assert res["counts"]["completed"] == 4
    assert res["conditions"]["endpoint"]["client"]["verify_tls"] is False


def test_tls_hostname_mismatch_with_a_trusted_certificate(certs: dict[str, tuple[str, str]], tmp_path: Path) -> None:
    """The certificate is trusted (SSL_CERT_FILE) but names another host: refused, exit 3,
    one line saying so, nothing sent."""
    common = ["--rate", "20", "--requests", "2", "--output-tokens", "4", "--input-tokens", "8", "--model", "m"]
    cert, key = certs["other"]
    with FaultServer({"mode": "raw", "default": OK, "tls": {"cert": cert, "key": key}}) as srv:
        p = cli_run("run", "--endpoint", srv.url, *common, out=tmp_path / "a", env={"SSL_CERT_FILE": cert})
        assert srv.requests() == []
    assert p.returncode == 3, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert "mismatch" in p.stderr and "self-signed" not in p.stderr  # trusted, but not for this name
    assert not (tmp_path / "a" / "result.json").exists()


# --------------------------------------------------------------------------- redirect to another origin


REDIRECTS = [301, 302, 303, 307, 308]


def test_redirect_to_another_origin_forwards_nothing(tmp_path: Path, client: str = "aiohttp") -> None:
    """Each redirect status, pointing at another origin (another port) that records what it
    gets: loadgen does not follow (``http_error`` with the status kept), and the other
    origin sees no connection at all, so no credential can reach it."""
    with FaultServer({"mode": "raw", "default": OK}) as other:
        target = other.url + "/v1/completions"
        by_index = {
            str(2 * k + 1): {"kind": "status", "status": st, "headers": {"Location": target}}
            for k, st in enumerate(REDIRECTS)
        }
        n = 2 * len(REDIRECTS) + 1
        with FaultServer({"mode": "raw", "default": OK, "by_index": by_index}) as srv:
            run = go(run_inprocess(srv.url, load(n, rate=50), tmp_path / "out", api_key="sk-SENTINEL-redirect",
                                  http_client=client))  # fmt: skip
            check_no_retries(srv, n)
            assert all(p["auth"] for p in srv.requests())  # the origin itself got the credentials
        time.sleep(0.1)
        assert other.events() == []  # the other origin saw no connection at all
    check_run(run, max_wall_s=5.0)
    recs = run.by_index()
    for k, st in enumerate(REDIRECTS):
        assert (recs[2 * k + 1].error_kind, recs[2 * k + 1].http_status) == ("http_error", st)
    check_success_untouched(run, list(range(0, n, 2)))


def test_redirect_to_another_origin_forwards_nothing_lean(tmp_path: Path) -> None:
    """``test_redirect_to_another_origin_forwards_nothing`` with ``--http-client lean`` (loadgen.endpoints.lean_pool)."""
    test_redirect_to_another_origin_forwards_nothing(tmp_path, client="lean")


def test_redirect_cli_discovery_and_requests(tmp_path: Path) -> None:
    """Through the CLI: discovery (GET /v1/models), the pre-flight and every request meet a
    307 to another origin; that origin sees nothing, the key stays with the first."""
    with FaultServer({"mode": "raw", "default": OK}) as other:
        redirect = {"kind": "status", "status": 307, "headers": {"Location": other.url + "/v1/completions"}}
        with FaultServer({"mode": "raw", "default": redirect, "redirect_all": True}) as srv:
            p = cli_run(
                "run",
                "--endpoint",
                srv.url,
                "--model",
                "m",
                "--rate",
                "20",
                "--requests",
                "4",
                "--output-tokens",
                "4",
                "--api-key-env",
                "LG_REDIRECT_KEY",
                out=tmp_path / "o",
                env={"LG_REDIRECT_KEY": "sk-SENTINEL-cli-redirect"},
            )
            seen = srv.events("req")
        time.sleep(0.1)
        assert other.events() == []
    assert p.returncode == 6, p.stderr  # every request failed: "nothing was measured" (exit 6)
    assert "all 4 measured requests failed" in p.stderr
    assert "Traceback" not in p.stderr
    assert {e["path"] for e in seen} >= {"/v1/models", "/v1/completions"}
    assert all(e["auth"] for e in seen)
    res = json.loads((tmp_path / "o" / "result.json").read_text())
    assert res["counts"]["errors_by_kind"] == {"http_error": 4}
    assert res["conditions"]["endpoint"]["client"]["redirects"] == "not followed"
    posts = [e for e in seen if e["method"] == "POST" and e["rid"] is not None]
    assert len(posts) == 4  # no retries

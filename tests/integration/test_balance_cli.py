"""``--endpoint`` given several times (issue 19): replicas balanced by the client, as the user types it.

Two fast simulated endpoints and one slow one (``loadgen sim`` on 127.0.0.1, module scoped); each
run sends a few dozen requests. Counts are read from ``requests.jsonl`` (the ``replica`` of each
record) and from ``result.json`` (``conditions.endpoint.balance``). No timing is asserted: the
least-outstanding check needs only that a replica ~40x slower holds more requests in flight.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.sim.launch import SimProcess
from tests.fixtures.cli_proc import cli_run
from tests.fixtures.recording_server import RecordingServer, ok_stream


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, str]]:
    fast = ["--ttft-ms", "5", "--itl-ms", "1"]
    started: list[SimProcess] = []
    try:
        for args in (fast, fast, ["--ttft-ms", "200", "--itl-ms", "20"]):
            started.append(SimProcess(args))
        yield {"a": str(started[0].url), "b": str(started[1].url), "slow": str(started[2].url)}
    finally:
        for s in started:
            s.stop()


def _replicas(out: Path) -> tuple[Counter[int], list[dict]]:
    lines = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x.strip()]
    res = json.loads((out / "result.json").read_text())
    return Counter(int(d["replica"]) for d in lines), res["conditions"]["endpoint"]["balance"]["replicas"]


RUN = ["--rate", "20", "--requests", "40", "--input-tokens", "16", "--output-tokens", "4", "--quiet"]


@pytest.mark.timeout(180)
def test_round_robin_spreads_evenly(sims: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "rr"
    p = cli_run("run", "--endpoint", sims["a"], "--endpoint", sims["b"], *RUN, out=out)
    assert p.returncode in (0, 1, 3), p.stdout[-3000:] + p.stderr[-3000:]  # 1: INVALID on a busy machine
    counts, reps = _replicas(out)
    assert set(counts) == {0, 1} and abs(counts[0] - counts[1]) <= 1 and sum(counts.values()) == 40
    assert [r["requests"] for r in reps] == [counts[0], counts[1]]
    assert [r["url"].split("/v1")[0] for r in reps] == [sims["a"], sims["b"]]
    assert all(r["ok"] + r["failed"] == r["requests"] for r in reps)
    used = (out / "config.used.toml").read_text()
    assert f'endpoint = ["{sims["a"]}", "{sims["b"]}"]' in used  # the re-run loads both replicas


@pytest.mark.timing
@pytest.mark.timeout(180)
def test_least_outstanding_sends_fewer_to_the_slow_replica(sims: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "lo"
    p = cli_run("run", "--endpoint", sims["a"], "--endpoint", sims["slow"], "--balance", "least-outstanding", *RUN,
                out=out)  # fmt: skip
    assert p.returncode in (0, 1, 3), p.stdout[-3000:] + p.stderr[-3000:]
    counts, reps = _replicas(out)
    assert sum(counts.values()) == 40 and counts[1] < counts[0], counts
    assert [r["requests"] for r in reps] == [counts[0], counts[1]]


@pytest.mark.timeout(120)
def test_a_replica_that_fails_preflight_is_named(sims: dict[str, str], tmp_path: Path) -> None:
    with RecordingServer(lambda n, req: ok_stream(), model="another-model") as other:
        p = cli_run("run", "--endpoint", sims["a"], "--endpoint", other.url, *RUN, out=tmp_path / "m")
    assert p.returncode == 2, p.stdout[-3000:] + p.stderr[-3000:]
    assert f"replica 2 of 2 ({other.url}/v1/completions)" in p.stderr and "another-model" in p.stderr
    closed = SimProcess([])
    url = str(closed.url)
    closed.stop()  # nothing listens there now
    p = cli_run("run", "--endpoint", sims["a"], "--endpoint", url, *RUN, out=tmp_path / "u")
    assert p.returncode == 3, p.stdout[-3000:] + p.stderr[-3000:]
    line = next(ln for ln in p.stderr.splitlines() if "replica 2 of 2" in ln)
    assert url in line and "did not pass discovery/pre-flight" in line


@pytest.mark.timeout(120)
def test_each_replica_gets_only_its_own_credentials(tmp_path: Path) -> None:
    with RecordingServer(lambda n, req: ok_stream()) as s1, RecordingServer(lambda n, req: ok_stream()) as s2:
        u1 = s1.url.replace("http://", "http://alice:first-secret-1@")
        u2 = s2.url.replace("http://", "http://bob:second-secret-2@")
        out = tmp_path / "cred"
        p = cli_run("run", "--endpoint", u1, "--endpoint", u2, "--rate", "20", "--requests", "6", "--output-tokens",
                    "3", "--quiet", out=out)  # fmt: skip
        assert p.returncode in (0, 1, 3), p.stdout[-3000:] + p.stderr[-3000:]
        for srv, mine, theirs in ((s1, "alice:first-secret-1", "bob"), (s2, "bob:second-secret-2", "alice")):
            auths = {r["headers"].get("authorization") for r in srv.requests}
            assert auths == {"Basic " + base64.b64encode(mine.encode()).decode()}, (auths, theirs)
    for f in out.iterdir():
        text = f.read_text(errors="replace")
        assert "first-secret-1" not in text and "second-secret-2" not in text, f.name


@pytest.mark.timeout(180)
def test_sweep_balances_every_probe(sims: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    p = cli_run("sweep", "--endpoint", sims["a"], "--endpoint", sims["b"], "--slo", "ttft:p90<=2s", "--concurrency-levels",
                "2", "--probe-duration", "1s", "--input-tokens", "16", "--output-tokens", "2", "--quiet", out=out)  # fmt: skip
    assert (out / "sweep.json").is_file(), p.stdout[-3000:] + p.stderr[-3000:]  # any verdict: a busy machine may lag
    probes = [d for d in out.iterdir() if d.name.startswith("probe-") and (d / "result.json").is_file()]
    assert probes, p.stdout[-3000:]
    for d in probes:
        counts, reps = _replicas(d)
        assert set(counts) == {0, 1} and abs(counts[0] - counts[1]) <= 1, (d.name, counts)
        assert [r["requests"] for r in reps] == [counts[0], counts[1]], d.name  # this probe's, not the sweep's
    sweep = json.loads((out / "sweep.json").read_text())
    assert len(sweep["conditions"]["endpoint"]["balance"]["replicas"]) == 2


@pytest.mark.timeout(120)
def test_a_remote_replica_needs_yes(sims: dict[str, str], tmp_path: Path) -> None:
    # 192.0.2.1 is TEST-NET-1 (never routed): refused before anything is sent to any replica
    p = cli_run("run", "--endpoint", sims["a"], "--endpoint", "http://192.0.2.1:8000", *RUN, out=tmp_path / "r")
    assert p.returncode == 2 and "pass --yes" in p.stderr, p.stdout[-2000:] + p.stderr[-2000:]
    assert (
        "http://192.0.2.1:8000 is not a loopback address" in p.stderr and not (tmp_path / "r" / "result.json").exists()
    )

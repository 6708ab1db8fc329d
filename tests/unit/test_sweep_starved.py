"""The starved-client refusal (issue 30 item 3, ``loadgen/sweep/starved.py``): one rule, its SLO-derived
bound, the words it says, and a wake-up probe that does not count the client's own work as starvation."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from loadgen.core.slo import SLOTarget
from loadgen.report.sweep_report import answer_line
from loadgen.sweep.starved import (
    StarvedCheck,
    Wakeup,
    cause_words,
    measure_wakeup,
    starved_refusal,
    tolerated_lateness_ms,
)

MS = 1_000_000


def ttft(ms: float, p: float = 99.0) -> SLOTarget:
    return SLOTarget("ttft", p, int(ms * MS))


def woke(p99_ms: float, max_ms: float | None = None, **cpu: Any) -> Wakeup:
    return Wakeup("before any load", 250, p99_ms, max_ms if max_ms is not None else p99_ms, 0.5, cpu=cpu)


@pytest.mark.parametrize(
    "slos,bound",
    [
        ([ttft(300)], 30.0),  # 10 % of the threshold
        ([ttft(2000)], 200.0),
        ([ttft(20)], 5.0),  # the 5 ms floor
        ([ttft(300), SLOTarget("e2e", 99.0, 10_000 * MS)], 30.0),  # the tightest threshold
        ([SLOTarget("itl", 99.0, 100 * MS), ttft(1000)], 10.0),  # a late stamp moves an ITL whole
        ([SLOTarget("tpot", 99.0, 50 * MS), ttft(1000)], 100.0),  # TPOT spreads it: not with another target...
        ([SLOTarget("tpot", 99.0, 100 * MS)], 10.0),  # ...only alone
        ([], 5.0),
    ],
)
def test_bound_scales_with_the_tightest_threshold(slos: list[SLOTarget], bound: float) -> None:
    got, rule = tolerated_lateness_ms(slos)
    assert got == pytest.approx(bound)
    assert "5 ms" in rule


def test_refusal_fires_only_above_the_bound() -> None:
    slos = [ttft(300)]  # bound 30 ms
    assert starved_refusal(woke(29.9), slos) is None
    assert starved_refusal(woke(30.0), slos) is None  # at the bound: tolerated
    assert starved_refusal(woke(2.0, max_ms=400.0), slos) is None  # one long hold: the max is not the figure
    line = starved_refusal(woke(31.5, max_ms=90.0), slos)
    assert line is not None
    assert "p99 31.5 ms (max 90.0 ms" in line and "above the 30 ms the SLO tolerates" in line
    assert "ttft:p99<=300ms" in line and "remedy:" in line and "--cpus" in line and "another machine" in line


def test_the_same_lateness_is_refused_under_a_tight_slo_and_tolerated_under_a_loose_one() -> None:
    w = woke(40.0)  # e.g. a vLLM CPU build taking both cores
    assert starved_refusal(w, [ttft(300)]) is not None
    assert starved_refusal(w, [ttft(2000)]) is None  # a 2 s SLO absorbs it (bound 200 ms)


def test_cause_names_what_took_the_cpu() -> None:
    idle = cause_words({"policy": "SCHED_IDLE", "cores": 2, "client_cpus": [0], "client_cpus_busy": 0.98,
                        "client_cores": 0.03, "loadavg_1m": 2.0})  # fmt: skip
    assert "SCHED_IDLE" in idle and "other processes kept the client's CPU 0 0.9 of 1 busy" in idle
    assert "load average 2.0 on 2 cores" in idle
    server = cause_words({"cores": 2, "client_cpus": [0, 1], "server_cores": 1.9, "client_cpus_busy": 1.95,
                          "client_cores": 0.05, "steal_fraction": 0.2})  # fmt: skip
    assert "the server under test used 1.9 of 2 cores" in server and "20% of the CPU (steal)" in server
    assert "no other CPU user was seen" in cause_words({"cores": 2})


def test_a_refusal_is_the_answer_limited_by_the_client() -> None:
    said: list[str] = []
    check = StarvedCheck([ttft(20)], said.append)
    assert check._judge(woke(12.0), last=False)  # bound 5 ms
    res: dict[str, Any] = {"answer": {"limited_by": None}, "slo": [{"target": "ttft:p99<=20ms"}]}
    check.apply(res)
    assert res["answer"]["limited_by"] == "client" and res["client_wakeup"]["starved"] is True
    assert res["client_wakeup"]["bound_ms"] == 5.0 and res["client_wakeup"]["phases"][0]["p99_ms"] == 12.0
    assert said == [res["answer"]["client_starved"]]
    assert answer_line(res) == "no answer: " + said[0]


def test_a_remote_client_is_measured_not_refused() -> None:
    said: list[str] = []
    check = StarvedCheck([ttft(20)], said.append, remote=True)
    assert not check._judge(woke(12.0), last=True)
    res: dict[str, Any] = {"answer": {"limited_by": None}}
    check.apply(res)
    assert res["answer"]["limited_by"] is None and "not judged: --cluster" in res["client_wakeup"]["rule"]
    assert said and said[0].startswith("client wake-up lateness: p99 12.0 ms, max 12.0 ms before any load")


def held_loop_wakeup(monkeypatch: pytest.MonkeyPatch, own_cpu: bool, speed: float = 1.0) -> Wakeup:
    """The wake-up probe while a task holds the loop 30 ms (wall) between sleeps; the loop thread's CPU clock
    made to read the wall clock (``own_cpu``: every hold is the client's own work; ``speed`` 0.5: at half
    speed, as beside a same-priority process on its core) or to stand still (none is)."""
    import loadgen.sweep.starved as starved

    frozen = time.thread_time_ns()
    clock = SimpleNamespace(
        thread_time_ns=(lambda: int(starved.now_ns() * speed)) if own_cpu else (lambda: frozen),
        process_time=time.process_time,
    )
    monkeypatch.setattr(starved, "time", clock)

    async def hold(stop: asyncio.Event) -> None:
        while not stop.is_set():
            t = time.perf_counter() + 0.03
            while time.perf_counter() < t:
                pass
            await asyncio.sleep(0.005)

    async def go() -> Wakeup:
        stop = asyncio.Event()
        task = asyncio.create_task(hold(stop))
        w = await measure_wakeup("during a held loop", duration_s=0.3)
        stop.set()
        await task
        return w

    return asyncio.run(go())


def test_the_clients_own_work_is_not_counted_as_starvation(monkeypatch: pytest.MonkeyPatch) -> None:
    own = held_loop_wakeup(monkeypatch, own_cpu=True)
    assert own.own_work_samples >= 3 and own.p99_ms == 0.0 and own.max_ms == 0.0  # each hold: the client's CPU
    # beside a hog on its core the client's own 30 ms burst takes 60 ms of wall time: still its own work, left
    # out (counted 15 ms late before, on CPU time alone: two such bursts in an unloaded check refused a sweep
    # whose probes then ran at a p99 schedule lag of 4 ms)
    half = held_loop_wakeup(monkeypatch, own_cpu=True, speed=0.5)
    assert half.own_work_samples >= 3 and half.p99_ms < 2.0, half
    assert half.to_json()["own_work_samples"] == half.own_work_samples
    off = held_loop_wakeup(monkeypatch, own_cpu=False)
    assert off.p99_ms >= 25.0  # the same holds off the client's CPU: a 2 ms sleep ended >= 28 ms late

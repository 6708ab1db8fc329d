"""The live view (loadgen.cli.live): figures from the records as they are written, and when it shows."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest
from rich.console import Console

from loadgen.cli.live import LiveView, ViewOptions, live_enabled
from loadgen.core.clock import now_ns
from loadgen.core.schedule import Schedule
from loadgen.core.types import RequestSpec


def rec(i: int, **kw: object) -> str:
    d = {"index": i, "phase": "measure", "status": "ok", "sent_s": 0.0, "ttft_ms": 10.0 * (i + 1),
         "itl_ms": [1.0, 2.0], "output_tokens": 3, "schedule_lag_ms": 0.5}  # fmt: skip
    d.update(kw)
    return json.dumps(d) + "\n"


def test_figures_and_progress_from_a_file_being_written(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    view = LiveView(Console(file=io.StringIO()), enabled=False, run_file=path)
    path.write_text(rec(0) + rec(1) + rec(2, status="error", error_kind="timeout", ttft_ms=None) + '{"index": 3, "pha')
    # a runner seen read-only: 10 sends due every 100 ms from t0, the first 4 due now, 2 in flight (and one
    # prepared send waiting for its time: not in flight)
    unbuilt = cast(Callable[[int], RequestSpec], lambda k: None)  # the view never builds a request
    sched = Schedule(np.arange(10, dtype=np.int64) * 100_000_000, np.zeros(10, dtype=np.bool_), unbuilt)
    sent, prepared = SimpleNamespace(sent_ns=1), SimpleNamespace(sent_ns=None)
    view.attach(SimpleNamespace(plan=SimpleNamespace(schedule=sched), t0_ns=now_ns() - 350_000_000,
                                inflight_records={7: sent, 8: sent, 9: prepared}))  # fmt: skip
    view.tick()
    assert (view.stats.completed, view.stats.failed, dict(view.stats.errors)) == (2, 1, {"timeout": 1})
    assert view.last["finished"] == 3 and view.last["ttft_p50_ms"] == 15.0  # the torn line waits for its end
    assert view.progress() == {"total": 10, "due": 4, "sent": 5, "behind": 0, "inflight": 2, "done": 3}
    with open(path, "a") as fh:
        fh.write('se": "measure", "status": "ok", "sent_s": 0.1, "ttft_ms": 99.0, "output_tokens": 1}\n')
    view.tick()
    assert view.stats.completed == 3 and view.last["finished"] == 1 and view.last["ttft_p99_ms"] == 99.0
    out = Console(file=io.StringIO(), width=160, record=True)
    out.print(view.render())
    text = out.export_text()
    assert "due 4 of 10" in text and "in flight 2" in text and "completed 3  failed 1" in text
    assert "timeout 1" in text and "TTFT p50/p99 ms" in text


def test_shown_on_a_terminal_unless_told_otherwise() -> None:
    tty = Console(file=io.StringIO(), force_terminal=True)
    pipe = Console(file=io.StringIO(), force_terminal=False)
    assert live_enabled(ViewOptions(progress=None, quiet=False), tty)
    assert not live_enabled(ViewOptions(progress=None, quiet=False), pipe)
    assert live_enabled(ViewOptions(progress=True, quiet=False), pipe)
    assert not live_enabled(ViewOptions(progress=False, quiet=False), tty)
    assert not live_enabled(ViewOptions(progress=True, quiet=True), tty)


@pytest.mark.timing
def test_progress_without_a_runner_survives_an_infinite_or_absent_rate(tmp_path: Path) -> None:
    # --rate inf (max-throughput mode) once printed an OverflowError from int(inf * elapsed)
    for rate in (float("inf"), float("nan"), 0.0, -1.0, None):
        view = LiveView(Console(file=io.StringIO()), enabled=False, run_file=tmp_path / "none.jsonl",
                        total=50, rate_rps=rate)  # fmt: skip
        view.tick()
        pr = view.progress()
        assert pr["total"] == 50 and pr["due"] is None and pr["behind"] is None, (rate, pr)
        view.render()
    view = LiveView(Console(file=io.StringIO()), enabled=False, total=50, rate_rps=10.0)
    view._started_ns -= 2_000_000_000  # 2 s in at 10 req/s: 20 due
    assert 19 <= (view.progress()["due"] or 0) <= 21


def test_the_view_process_works_from_the_sending_process_messages(tmp_path: Path) -> None:
    # the view's own process knows the runner only from its messages (loadgen.report.live_view: the protocol)
    from loadgen.report.live_view import LiveFigures

    path = tmp_path / "requests.jsonl"
    path.write_text(rec(0) + rec(1))
    offsets = tmp_path / "offsets.npy"
    np.save(offsets, np.arange(10, dtype=np.int64) * 100_000_000)
    view = LiveFigures(run_file=path)
    assert view.handle({"t0_ns": now_ns() - 350_000_000, "offsets": str(offsets)}) is None
    assert view.handle({"inflight": 1, "cpu_s": 1.0, "wall_s": 10.0}) is None
    assert view.handle({"print": "probe 1 at 5.00 req/s"}) == "probe 1 at 5.00 req/s"
    view.tick()
    view.handle({"inflight": 1, "cpu_s": 1.5, "wall_s": 11.0})
    view.tick()
    assert view.progress() == {"total": 10, "due": 4, "sent": 3, "behind": 1, "inflight": 1, "done": 2}
    assert view.cpu_fraction == 0.5  # the sending process's CPU, not the view's own

"""The live view (loadgen.cli.live): figures from the records as they are written, and when it shows."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from rich.console import Console

from loadgen.cli.live import LiveView, live_enabled
from loadgen.clock import now_ns
from loadgen.schedule import Schedule


def rec(i: int, **kw: object) -> str:
    d = {"index": i, "phase": "measure", "status": "ok", "sent_s": 0.0, "ttft_ms": 10.0 * (i + 1),
         "itl_ms": [1.0, 2.0], "output_tokens": 3, "schedule_lag_ms": 0.5}  # fmt: skip
    d.update(kw)
    return json.dumps(d) + "\n"


def test_figures_and_progress_from_a_file_being_written(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    view = LiveView(Console(file=io.StringIO()), enabled=False, run_file=path)
    path.write_text(rec(0) + rec(1) + rec(2, status="error", error_kind="timeout", ttft_ms=None) + '{"index": 3, "pha')
    # a runner seen read-only: 10 sends due every 100 ms from t0, the first 4 due now, 2 in flight
    sched = Schedule(np.arange(10, dtype=np.int64) * 100_000_000, np.zeros(10, dtype=np.bool_), lambda k: None)
    view.attach(SimpleNamespace(plan=SimpleNamespace(schedule=sched), t0_ns=now_ns() - 350_000_000,
                                inflight_records={7: None, 8: None}))  # fmt: skip
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
    assert live_enabled({"progress": None, "quiet": False}, tty)
    assert not live_enabled({"progress": None, "quiet": False}, pipe)
    assert live_enabled({"progress": True, "quiet": False}, pipe)
    assert not live_enabled({"progress": False, "quiet": False}, tty)
    assert not live_enabled({"progress": True, "quiet": True}, tty)

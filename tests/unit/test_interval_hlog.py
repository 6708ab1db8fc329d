"""``histograms.hlog`` is an interval log (issue 35, item 4): one tagged histogram per metric per
time-series interval, each request's values in the interval where it ended, readable by
HdrHistogram's own decoder; ``histograms_run.hlog`` beside it holds the whole run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

from loadgen.core.histograms import LatencyHistogram
from loadgen.engine.hlog import write_interval_hlog, write_run_hlog
from loadgen.engine.timeseries import series


def _lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for i in range(40):  # 4 requests a second for 10 s, each ending 0.5 s after it was due
        ttft = 10.0 + i  # ms: request i's TTFT is 10 + i
        out.append({"index": i, "phase": "measure", "scheduled_s": i * 0.25, "sent_s": i * 0.25, "status": "ok",
                    "ttft_ms": ttft, "e2e_ms": 500.0, "tpot_ms": 2.0, "itl_ms": [1.0, 3.0], "schedule_lag_ms": 0.1})  # fmt: skip
    path.write_text("".join(json.dumps(d) + "\n" for d in out))
    return out


def _read(path: Path) -> list[tuple[str, float, float, HdrHistogram]]:
    rows = []
    for ln in path.read_text().splitlines():
        if ln.startswith("Tag="):
            tag, start, length, _mx, enc = ln.split(",")
            rows.append((tag[4:], float(start), float(length), HdrHistogram.decode(enc)))
    return rows


def test_each_interval_holds_the_requests_that_ended_in_it(tmp_path: Path) -> None:
    rec = tmp_path / "requests.jsonl"
    lines = _lines(rec)
    ts = series(rec, "scheduled")
    assert ts is not None
    n = write_interval_hlog(tmp_path / "histograms.hlog", rec, "scheduled", 1_800_000_000.0, ts)
    rows = _read(tmp_path / "histograms.hlog")
    assert n == len(rows) and n > 0
    start, width = ts["start_s"], ts["interval_s"]
    ttft = [r for r in rows if r[0] == "ttft"]
    assert len(ttft) == len(ts["intervals"])  # a request ended in every interval
    assert sum(h.get_total_count() for *_, h in ttft) == len(lines)
    for _tag, t, length, h in ttft:
        assert length == round(width, 3)
        i = round((t - start) / width)
        want = [d["ttft_ms"] for d in lines
                if min(int((d["scheduled_s"] + 0.5 - start) / width), len(ts["intervals"]) - 1) == i]  # fmt: skip
        assert h.get_total_count() == len(want)
        assert abs(h.get_max_value() / 1000 - max(want)) <= 0.01 * max(want)  # 3 significant figures
    itl = [r for r in rows if r[0] == "itl"]
    assert sum(h.get_total_count() for *_, h in itl) == 2 * len(lines)  # every per-token gap, with its request


def test_no_time_series_writes_the_header_alone_and_the_run_log_holds_the_whole_run(tmp_path: Path) -> None:
    assert write_interval_hlog(tmp_path / "h.hlog", tmp_path / "none.jsonl", "sent", 0.0, None) == 0
    assert (tmp_path / "h.hlog").read_text().startswith("#[Histogram log format version 1.3]")
    h = LatencyHistogram("ttft")
    for v in (1e6, 2e6, 3e6):
        h.record_ns(v)
    write_run_hlog(tmp_path / "run.hlog", {"ttft": h, "e2e": LatencyHistogram("e2e")}, 0.0, 12.5)
    rows = _read(tmp_path / "run.hlog")
    assert [(r[0], r[1], r[2], r[3].get_total_count()) for r in rows] == [("ttft", 0.0, 12.5, 3)]  # no empty metric

"""One set of counts, one picture (issue 30, item 5): every place that shows a sweep's probe counts the
same requests, says which, never says "met" for an INVALID probe, never draws one at 0 ms; the report
is headed by ``--label`` and the system; output to a pipe or a file keeps whole numbers.

Each test is one fault seen before the change: the console cut numbers to ``2,369.…`` at 80 columns;
the live view's table took its counts from the first segment's ``result.json`` (299 where the probe
judged 598, 13/47 against 15/61) and said "met" for an INVALID probe; the report drew INVALID probes
as points at 0 ms; ``--label`` appeared nowhere in report.html.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from loadgen.core.slo import parse_slo
from loadgen.report.live_view import LiveFigures, probe_message
from loadgen.report.sweep_report import probes_table, render_sweep
from loadgen.report.why import probe_why_lines, why_html

SLO = "ttft:p99<=300ms"
LAG = "p99 schedule lag 378.717 ms (excluding connection set-up after the scheduled time) <= 100 ms"


def probe(i: int, rate: float, verdict: str, text: str, over: int, measured: int, **kw: Any) -> dict[str, Any]:
    """A ``sweep.json`` probe entry (``Probe.to_json()``) with its one count per target."""
    p: dict[str, Any] = {
        "offered_rps": rate, "verdict": verdict, "verdict_text": text, "low_confidence": False,
        "exceedance_fraction": {SLO: over / measured}, "confidence_bounds": {SLO: [0.0, 0.5]}, "censored": 0,
        "duration_s": 12.5, "stopped_early": False, "concurrency": None, "segments": 2,
        "latency_ms": {"ttft": {"p50": 120.0, "p90": 250.0, "p99": 410.0}},
        "achieved_send_rps": rate, "sent_rps": rate, "request_rps": rate * 0.99, "output_tps": rate * 120.0,
        "total_tps": rate * 300.0, "goodput_rps": rate * 0.9, "dir": f"probe-{i:02d}-{rate:.3f}rps",
        "reasons": [f"{SLO}: {over} of {measured} measured requests over ({text}; bounds 0.0000..0.5000)"], "validity_detail": [],
        "targets": [{"target": SLO, "verdict": verdict, "verdict_text": text, "exceedances": over,
                     "requests": measured, "censored": 0, "bounds": [0.0, 0.5]}],
        "judged_requests": measured,
    }  # fmt: skip
    p.update(kw)
    return p


def sweep(*probes: dict[str, Any]) -> dict[str, Any]:
    return {
        "slo": [{"target": SLO, "metric": "ttft", "percentile": 99.0, "threshold_ms": 300.0}],
        "probes": list(probes),
        "answer": {"max_rate_rps": 2369.125, "limited_by": None, "bracket_rps": [2369.125, 4000.0],
                   "output_tps": 284295.0, "total_tps": 710737.5, "goodput_rps": 2132.2125},
        "probe_time_s": 60.0,
        "config": {"label": "h100-vllm-0.6", "model": "llama-8b"},
        "conditions": {"endpoint": {"url": "http://user:s3cret@gpu-box.example:8000/v1/completions?api-key=k3y",
                                    "model": "llama-8b", "server_version": "vllm 0.6.3"}},
    }  # fmt: skip


def invalid(i: int = 1) -> dict[str, Any]:
    return probe(i, 4000.0, "invalid", "INVALID: p99 schedule lag 378.717 ms", 0, 598, validity_detail=[LAG])


def test_output_to_a_pipe_keeps_whole_numbers(capsys: pytest.CaptureFixture[str], monkeypatch: Any) -> None:
    from loadgen.report.console import output_console

    monkeypatch.delenv("COLUMNS", raising=False)
    res = sweep(probe(1, 2369.125, "pass", "PASS", 3, 1299), invalid(2))
    con = output_console()  # stdout is captured here: not a terminal, as for `| cat` or `> file`
    assert not con.is_terminal
    render_sweep(res, con, "/nonexistent")
    out = capsys.readouterr().out
    assert "…" not in out
    for whole in ("2369.12", "2,369.12", "284,295.0", "INVALID: p99 schedule lag 378.717 ms", "3 of 1299"):
        assert whole in out, (whole, out)
    assert "max rate meeting ttft:p99<=300ms: 2,369.12 req/s" in out  # the answer on one line


def table_text(table: Any, width: int = 250) -> str:
    con = Console(record=True, width=width, file=io.StringIO())
    con.print(table)
    return con.export_text()


def test_every_place_counts_the_probe_judged_requests(tmp_path: Path) -> None:
    # the probe judged 15 of 61 over two segments; its first segment's result.json says 299 requests, met,
    # and the attribution gave causes to 13 of 47 (two cancelled in flight after their first token)
    p = probe(1, 12.0, "fail", "FAIL", 15, 61)
    p["why"] = {"targets": [{"target": SLO, "misses": 13, "judged": 47, "censored": 2,
                             "causes": {"queueing": 13}, "time_share": {"queueing": 1.0},
                             "text": f"13 of 47 missed {SLO}: 13 server queueing (inferred) "
                                     "(2 cancelled in flight, not judged)"}]}  # fmt: skip
    res = sweep(p)
    seg = tmp_path / p["dir"]
    seg.mkdir()
    (seg / "result.json").write_text(json.dumps({"config": {"offered_rps": 12.0}, "counts": {"requests": 299},
                                                 "slo": {"met": True}, "latency_ms": {"ttft": {"p99": 410.0}}}))  # fmt: skip
    view = LiveFigures(sweep_dir=tmp_path, targets=[parse_slo(SLO)])
    view.handle(probe_message(1, p))
    view.tick()
    shown = {
        "console table": table_text(probes_table(res)),
        "live view": table_text(view.render()),
        "console why": "\n".join(probe_why_lines(res)),
        "report why": why_html(res),
    }
    for where, text in shown.items():
        assert "15 of 61" in text, (where, text)
        assert "13 of 47" not in text and "299" not in text, (where, text)
    assert "measured" in shown["console table"] and "measured" in shown["live view"]  # says which requests
    said = "15 of 61 measured requests over ttft:p99<=300ms (causes of 13 of them; 2 cancelled in flight"
    assert said in shown["console why"]


@pytest.mark.parametrize(
    ("verdict", "text"),
    [("invalid", "INVALID: p99 schedule lag 378.717 ms"), ("interrupted", "INTERRUPTED: undecided"),
     ("rate_limited", "RATE LIMITED")],
)  # fmt: skip
def test_the_live_table_never_says_met_without_a_pass(tmp_path: Path, verdict: str, text: str) -> None:
    p = probe(1, 4000.0, verdict, text, 0, 598)
    seg = tmp_path / p["dir"]
    seg.mkdir()  # its result.json: the run's own SLO verdict, "met", though the probe has none
    (seg / "result.json").write_text(json.dumps({"config": {"offered_rps": 4000.0}, "counts": {"requests": 299},
                                                 "slo": {"met": True}}))  # fmt: skip
    view = LiveFigures(sweep_dir=tmp_path, targets=[parse_slo(SLO)])
    view.handle(probe_message(1, p))
    view.tick()
    shown = table_text(view.render())
    assert not re.search(r"\bmet\b", shown), shown
    assert text in shown and "0 of 598" in shown, shown
    assert "met" not in table_text(probes_table(sweep(p)))


def test_invalid_probes_are_marked_on_the_load_axis_not_drawn_at_0_ms() -> None:
    from loadgen.report.plotting import pyplot
    from loadgen.report.sweep_plots import latency_figures, probe_titles

    plt = pyplot()
    if plt is None:
        pytest.skip("matplotlib is not installed")
    res = sweep(probe(1, 1000.0, "pass", "PASS", 0, 500), invalid(2))
    [(_, fig)] = latency_figures(plt, res)
    ax = fig.axes[0]
    marks = [ln for ln in ax.lines if str(ln.get_gid() or "").startswith("probe-invalid")]
    assert len(marks) == 1
    # on the load axis (x in data, y in axes fraction), never a point in data coordinates at 0 ms
    assert marks[0].get_transform() == ax.get_xaxis_transform()
    assert list(marks[0].get_xdata()) == [4000.0]
    assert not [ln for ln in ax.lines if ln.get_transform() == ax.transData and 4000.0 in list(ln.get_xdata())]
    assert any(t.get_text() == "INVALID: p99 schedule lag 378.717 ms" for t in ax.texts)
    title = probe_titles(res)["probe-invalid-ttft-2"]
    assert "INVALID: p99 schedule lag 378.717 ms (excluding connection set-up" in title
    assert "no latency drawn" in title and "ms, p99" not in title
    plt.close(fig)


def test_the_report_is_headed_by_the_label_and_the_system(tmp_path: Path) -> None:
    from loadgen.report.plotting import pyplot
    from loadgen.report.sweep_report import write_report

    if pyplot() is None:
        pytest.skip("matplotlib is not installed")
    res = sweep(probe(1, 1000.0, "pass", "PASS", 0, 500), invalid(2))
    path = write_report(res, tmp_path)
    assert path is not None
    page = path.read_text()
    head = page[: page.index("<h2>")]
    assert "<title>h100-vllm-0.6: loadgen sweep" in head
    assert "<h1>h100-vllm-0.6: load sweep" in head
    assert "System: llama-8b on vllm 0.6.3 at gpu-box.example:8000" in head
    assert "s3cret" not in head and "k3y" not in head and "user" not in head  # no credentials in the head
    assert "15 of 61" not in page and "0 of 598" in page  # the probes table's counts are the probe's

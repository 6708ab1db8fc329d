"""report.html and scorecard.html (issue 21, items 9 and 10): what a reader of the pages sees.

The sweep page: a conditions section in words (no raw key dump), linear millisecond axes, PASS /
FAIL / stopped-early probes marked apart (a stopped-early probe is not joined to the lines: its
short window is not a collapse), p50/p90/p99 bands, the bracket shaded, every SLO target drawn,
the stored verdict texts shown (with today's fields as the fallback). The scorecard: rows that
say what each system is, one panel per system on its own load axis with its own SLO lines, and
plain cells without link styling.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest

from loadgen.report.compare import NOT_MEASURED, load_system, scorecard, write_outputs
from loadgen.report.sweep_facts import conditions_rows, probe_state, stopped_on, system_facts, verdict_text
from loadgen.report.sweep_report import write_report
from tests.fixtures.report_data import H200_SERVER, SLO, make_sweep

plt = pytest.importorskip("matplotlib.pyplot")


def test_verdict_text_stored_or_built_from_todays_fields() -> None:
    assert verdict_text({"verdict": "fail", "verdict_text": "FAIL (stopped early)"}) == "FAIL (stopped early)"
    assert verdict_text({"verdict": "fail", "low_confidence": True, "stopped_early": True}) == "FAIL (stopped early)"
    assert verdict_text({"verdict": "pass", "low_confidence": True, "stopped_early": False}) == "PASS (point estimate)"
    assert verdict_text({"verdict": "pass", "low_confidence": False, "stopped_early": False}) == "PASS"
    inv = {"verdict": "invalid", "low_confidence": False, "stopped_early": False, "validity_detail": ["p99 lag 9 ms"]}
    assert verdict_text(inv).startswith("INVALID: p99 lag 9 ms")


def test_probe_states_and_the_target_that_stopped_a_probe() -> None:
    assert probe_state({"verdict": "pass"}) == "pass"
    assert probe_state({"verdict": "fail", "stopped_early": False}) == "fail"
    assert probe_state({"verdict": "fail", "stopped_early": True}) == "stopped_early"
    assert probe_state({"verdict": "invalid"}) == probe_state({"verdict": "rate_limited"}) == "invalid"
    new = {"targets": [{"target": SLO[0]["target"], "verdict_text": "FAIL (stopped early)"},
                       {"target": SLO[1]["target"], "verdict_text": "PASS"}]}  # fmt: skip
    assert stopped_on(new, SLO[0]) and not stopped_on(new, SLO[1])
    # older files: the target whose exceedance fraction is past its allowance (p99: 1 %, p90: 10 %)
    old = {"exceedance_fraction": {SLO[0]["target"]: 0.55, SLO[1]["target"]: 0.05}}
    assert stopped_on(old, SLO[0]) and not stopped_on(old, SLO[1])


def test_conditions_in_words_from_sweep_and_probes(tmp_path: Path) -> None:
    doc = make_sweep(tmp_path, rates=[5.0, 10.0, 20.0, 15.0], fail_from_rps=15.0, stopped_rps=20.0, server=H200_SERVER)
    rows = dict(conditions_rows(doc, tmp_path, "probe-02-10.000rps"))
    assert rows["Date"] == "2026-12-01 17:51 to 17:54 UTC"
    assert rows["Endpoint"] == "http://127.0.0.1:8000/v1/completions (openai-compatible, completions API, streaming)"
    assert rows["Model"] == "llama-3-8b (max length 8,192 tokens)"
    assert rows["Server"] == "vllm 0.11.0 (dtype bfloat16, launched by loadgen)"
    assert rows["Accelerator"] == "2 x NVIDIA H200 (driver 570.1)"
    assert rows["Input lengths"] == "uniform 64 to 256 tokens; counted by tokenizer"
    assert rows["Output lengths"] == "32 tokens (fixed)"
    assert rows["Measured at the answer"].startswith("300 requests: mean 160.0 input tokens per request, 32.0 output")
    assert rows["Prices"] == "$2.50 per hour"
    assert rows["SLO"] == "ttft:p99<=300ms, e2e:p90<=2000ms at 95% confidence"
    assert rows["Evidence rule"].startswith("each probe holds")
    assert rows["loadgen version"] == "0.1.0"
    # no server block (an endpoint loadgen did not launch): what the endpoint said, --accelerators as given
    del doc["conditions"]["server"]
    assert system_facts(doc) == {"model": "llama-3-8b", "server": "vLLM 0.11.0",
                                 "accelerator": "2 (--accelerators; kind not recorded)", "cost_per_hour": "$2.50"}  # fmt: skip


def _page_text(page: str) -> str:
    return re.sub(r"<svg.*?</svg>", "", page, flags=re.S)


@pytest.mark.parametrize("with_texts", [True, False])
def test_report_page_conditions_states_and_every_slo_drawn(tmp_path: Path, with_texts: bool) -> None:
    doc = make_sweep(tmp_path, rates=[5.0, 10.0, 20.0, 15.0, 12.5], fail_from_rps=15.0, stopped_rps=20.0,
                     with_texts=with_texts)  # fmt: skip
    page = (write_report(doc, tmp_path) or Path("-")).read_text()
    text = _page_text(page)
    assert "<h2>Test conditions</h2>" in text and "uniform 64 to 256 tokens" in text
    for raw in ("bracket_rps", "max_rate_rps", "limited_by", "cost_per_million"):  # no raw key dump
        assert raw not in text, raw
    assert "PASS at 12.50 req/s, FAIL at 15.00 req/s" in text and "$0.00004277" in text
    assert "<script" not in page and "<img" not in page and not re.search(r"(src|href)=['\"]https?:", page)
    assert page.count("<svg") == 4  # TTFT, E2E, throughput, distributions at the answer
    for i in range(len(SLO)):
        assert f'id="slo-{i}"' in page
    assert (
        'id="bracket-ttft"' in page
        and 'id="bracket-rate"' in page
        and 'id="band-ttft"' in page
        and 'id="band-e2e"' in page
    )
    assert 'id="probe-pass' in page and 'id="probe-fail' in page and 'id="probe-stopped-early' in page
    assert "<tr class='stopped_early'>" in page and ">FAIL (stopped early)</td>" in page
    assert sorted(p.name for p in tmp_path.glob("plot-*.png")) == [f"plot-{i}.png" for i in range(1, 5)]
    # one page, four SVGs: no id of ours, and no clip path (referenced by id), twice
    ids = re.findall(r' id="((?:probe|slo|bracket|answer|band)-[^"]+)"', page) + re.findall(
        r'<clipPath id="([^"]+)"', page
    )
    assert len(ids) > 20 and len(ids) == len(set(ids))
    # hover text on each probe mark (an SVG <title>: no script needed)
    assert '<g id="probe-stopped-early-ttft-3"><title>probe 3: 20.00 req/s: FAIL (stopped early); TTFT p50' in page


def test_report_page_when_no_rate_met_the_slo(tmp_path: Path) -> None:
    doc = make_sweep(tmp_path, rates=[5.0, 10.0], fail_from_rps=6.0, stopped_rps=10.0)
    doc["probes"][0].update(verdict="fail", verdict_text="FAIL")
    doc["answer"].update(max_rate_rps=None, bracket_rps=[None, 5.0], output_tps=None, goodput_rps=None,
                         request_rps=None, total_tps=None, cost_per_million_output_tokens_usd=None,
                         cost_per_successful_request_usd=None)  # fmt: skip
    page = (write_report(doc, tmp_path) or Path("-")).read_text()
    assert 'class="answer none"' in page and "no rate met ttft:p99<=300ms and e2e:p90<=2000ms" in html.unescape(page)
    assert "no rate passed; FAIL already at 5.00 req/s" in page and "Limited by" not in page
    assert 'id="answer-' not in page and 'id="bracket-' not in page


def test_stopped_early_probe_is_marked_not_joined_and_axes_are_linear_ms(tmp_path: Path) -> None:
    from loadgen.report.sweep_plots import latency_figures, throughput_figure

    doc = make_sweep(tmp_path, rates=[5.0, 10.0, 20.0, 15.0, 12.5], fail_from_rps=15.0, stopped_rps=20.0)
    figs = latency_figures(plt, doc)
    assert [t for t, _ in figs][0].startswith("TTFT") and len(figs) == 2
    ax = figs[0][1].axes[0]
    assert ax.get_yscale() == "linear" and ax.get_xscale() == "linear"
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert list(lines["p99"].get_xdata()) == [5.0, 10.0, 12.5, 15.0]  # 20 req/s stopped early: not on the line
    early = [ln for ln in ax.get_lines() if str(ln.get_gid()).startswith("probe-stopped-early")]
    assert len(early) == 1 and early[0].get_xdata()[0] == 20.0 and early[0].get_ydata()[0] > 300.0
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert "300" in labels and not any("e" in x.lower() for x in labels), labels
    # E2E did not stop the probe: no stopped-early mark above its line
    assert not [ln for ln in figs[1][1].axes[0].get_lines() if str(ln.get_gid()).startswith("probe-stopped-early")]
    _, tfig = throughput_figure(plt, doc) or ("", None)
    assert tfig is not None
    done = next(ln for ln in tfig.axes[0].get_lines() if ln.get_label() == "completed req/s")
    assert 20.0 not in list(done.get_xdata())  # its 1.2 s window's completions are no collapse
    for _, f in figs:
        plt.close(f)
    plt.close(tfig)


def test_a_collapsed_p99_does_not_squash_the_slo_line() -> None:
    from loadgen.report.plotting import ms_ceiling, tick_text

    assert ms_ceiling([300.0], [100.0, 250.0, 30_000.0]) == 900.0  # at most 3x the line
    assert ms_ceiling([300.0], [100.0, 200.0]) == 375.0
    assert [tick_text(v, 500) for v in (0, 1500, 2000)] == ["0", "1,500", "2,000"]
    assert [tick_text(v, 2.5) for v in (0, 2.5, 5)] == ["0.0", "2.5", "5.0"]
    assert tick_text(0.25, 0.05) == "0.25"


def _two_systems(tmp_path: Path) -> tuple[Any, Any]:
    make_sweep(tmp_path / "small", rates=[2.0, 4.0, 8.0, 6.0, 5.0], fail_from_rps=6.0, stopped_rps=8.0,
               cost_per_hour=1.1, server=H200_SERVER | {"accelerator": {"kind": "cpu", "cpu_model": "Xeon", "cpu_count": 16}})  # fmt: skip
    make_sweep(tmp_path / "big", rates=[10.0, 20.0, 40.0, 30.0, 35.0], fail_from_rps=40.0, stopped_rps=None,
               cost_per_hour=8.8, server=H200_SERVER)  # fmt: skip
    return load_system(str(tmp_path / "small"), label="small"), load_system(str(tmp_path / "big"), label="big")


def test_scorecard_rows_describe_each_system(tmp_path: Path) -> None:
    a, b = _two_systems(tmp_path)
    card = scorecard([a, b])
    desc = {r["key"]: r["values"] for r in card["description_rows"]}
    assert desc["model"] == {"small": "llama-3-8b", "big": "llama-3-8b"}
    assert desc["server"]["big"] == "vllm 0.11.0 (dtype bfloat16, launched by loadgen)"
    assert desc["accelerator"] == {"small": "CPU: Xeon (16 cores, no GPU)", "big": "2 x NVIDIA H200 (driver 570.1)"}
    assert desc["cost_per_hour"] == {"small": "$1.10", "big": "$8.80"}
    assert card["systems"][0]["slo_lines"] == [{"target": "ttft:p99<=300ms", "threshold_ms": 300.0}]
    states = [p["state"] for p in card["latency_curves"]["small"]]
    assert states == ["pass", "pass", "stopped_early", "fail", "pass"]
    write_outputs(card, [a, b], tmp_path / "out")
    csv = (tmp_path / "out" / "scorecard.csv").read_text().splitlines()
    assert csv[0] == "metric,small,big,best" and csv[4] == "price per hour (USD),$1.10,$8.80,"
    assert NOT_MEASURED in (tmp_path / "out" / "scorecard.csv").read_text()


def test_scorecard_page_plain_cells_and_one_panel_per_system(tmp_path: Path) -> None:
    from loadgen.report.compare_html import latency_figure

    a, b = _two_systems(tmp_path)
    card = scorecard([a, b])
    write_outputs(card, [a, b], tmp_path / "out")
    page = (tmp_path / "out" / "scorecard.html").read_text()
    rows = re.findall(r"<tr(?: class='(\w+)')?>(.*?)</tr>", _page_text(page), flags=re.S)
    assert rows and all("<a " not in body for cls, body in rows if cls != "files")  # plain cells: no links
    assert "<a " in next(body for cls, body in rows if cls == "files")
    assert ">2 x NVIDIA H200 (driver 570.1)</td>" in page and ">$8.80</td>" in page
    assert 'id="slo-0-0"' in page and 'id="slo-1-0"' in page  # each system's own SLO line
    assert '<g id="probe-stopped-early-0-4"><title>small: 8.00 req/s: FAIL (stopped early)</title>' in page
    fig = latency_figure(plt, card)
    assert fig is not None
    small, big = fig.axes[0], fig.axes[1]
    assert small.get_title() == "small" and big.get_title() == "big"
    assert small.get_xlim()[1] == pytest.approx(8.0 * 1.08) and big.get_xlim()[1] == pytest.approx(40.0 * 1.08)
    assert small.get_yscale() == big.get_yscale() == "linear"
    plt.close(fig)

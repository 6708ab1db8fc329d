"""How sure, how fast per user, how well it scales (issue 19 items 2-4): the interval on the max SLO
load, the regression gate, the Pareto front and scaling efficiency, on exact small cases and on the
checked-in real sweeps (tests/fixtures/capacity)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.capacity import at_target, capacity_interval, load_sweep, pareto_front, regression_gate, scaling_table
from loadgen.capacity.interactivity import InteractivityPoint
from loadgen.capacity.source import ProbeEvidence, SweepCapacity
from loadgen.cli import main
from loadgen.core.slo import judge_counts, parse_slo
from loadgen.core.stats import upper_bound

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "capacity"
P99 = "ttft:p99<=120ms"


def cap(probes: list[tuple[float, int, int]], answer: float | None, confidence: float = 0.95) -> SweepCapacity:
    """A sweep of open-loop probes (rate, k over, n judged) on one p99 target."""
    ev = []
    for r, k, n in probes:  # the sweep's own verdict: bounds at its confidence, else the point estimate
        v, _, _ = judge_counts(k, n, parse_slo(P99), confidence)
        point = "pass" if k / n <= 0.01 else "fail"
        ev.append(
            ProbeEvidence(r, None, point if v == "undecided" else v, v == "undecided", False, {P99: (k, n)}, None)
        )
    return SweepCapacity("s", "s/sweep.json", [parse_slo(P99)], confidence, answer, (answer, None), None, None,
                         None, None, None, None, False, None, ev)  # fmt: skip


def test_interval_ends_are_the_probes_decided_at_the_two_sided_level() -> None:
    # 299 with none over passes one-sided at 95 % (upper 0.00997 <= 0.01) but not at 97.5 %
    assert upper_bound(0, 299, 0.95) <= 0.01 < upper_bound(0, 299, 0.975)
    c = cap([(20, 0, 600), (40, 0, 299), (50, 30, 299), (45, 4, 299)], answer=40)
    ci = capacity_interval(c)  # default: 90 % from the sweep's 95 %
    assert ci.confidence == pytest.approx(0.90)
    assert (ci.lower_rps, ci.upper_rps) == (40, 50)  # 45: 4 of 299 is undecided (lower bound 0.0046 < 0.01)
    ci95 = capacity_interval(c, 0.95)
    assert (ci95.lower_rps, ci95.upper_rps) == (20, 50)  # 40's 0 of 299 no longer passes at 97.5 %
    assert "90 % CI [40.00, 50.00)" in ci.text()


def test_interval_without_a_fail_is_open_above() -> None:
    ci = capacity_interval(cap([(10, 0, 400), (20, 0, 400)], answer=20))
    assert (ci.lower_rps, ci.upper_rps) == (20, None) and "above every rate tried" in ci.text()


def test_gate_fails_only_on_a_significant_regression() -> None:
    base = cap([(40, 0, 600), (50, 40, 400)], answer=40)
    worse = cap([(20, 0, 600), (30, 40, 400)], answer=20)  # U 30 <= 0.95 x 40 = 38: significant
    close = cap([(38, 0, 600), (45, 40, 400)], answer=38)  # point -5 %, but U 45 > 38: not significant
    assert regression_gate(base, worse, 0.05)["regressed"] is True
    g = regression_gate(base, close, 0.05)
    assert g["regressed"] is False and g["point_change"] == pytest.approx(-0.05)
    assert "no significant regression" in g["text"]


def test_gate_from_the_cli_on_real_sweeps(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["capacity", "gate", "--baseline", str(FIX / "sim8"), "--candidate",
                                  str(FIX / "sim4"), "--fail-if-regress", "5%", "--json", str(tmp_path / "g.json")])  # fmt: skip
    assert r.exit_code == 1, r.output  # 4 slots against 8: U 65.59 <= 0.95 x 134.86
    assert json.loads((tmp_path / "g.json").read_text())["regressed"] is True
    same = CliRunner().invoke(
        main, ["capacity", "gate", "--baseline", str(FIX / "sim4"), "--candidate", str(FIX / "sim4")]
    )
    assert same.exit_code == 0 and "no significant regression" in same.output
    ci = CliRunner().invoke(main, ["capacity", "ci", str(FIX / "sim4"), str(FIX / "sim8")], env={"COLUMNS": "200"})
    assert ci.exit_code == 0
    assert "sim4: max SLO load 55.16 req/s, 90 % CI [55.16, 65.59)" in ci.output
    assert "sim8: max SLO load 134.86 req/s, 90 % CI [134.86, 160.38)" in ci.output


def pt(x: float, y: float, w: float | None = None) -> InteractivityPoint:
    return InteractivityPoint("a", f"{x:g}", x, y, w, True)


def test_pareto_front_and_reading_at_a_target() -> None:
    pts = [pt(1000, 10, 500), pt(800, 20, 400), pt(700, 15), pt(400, 40, 300), pt(100, 35)]
    front = pareto_front(pts)
    assert [(p.tps_per_accelerator, p.tps_per_user) for p in front] == [(1000, 10), (800, 20), (400, 40)]
    a = at_target(front, 30, price_per_accelerator_hour=3.6)
    assert a["tps_per_accelerator"] == pytest.approx(600)  # halfway from (800, 20) to (400, 40)
    assert a["cost_per_million_output_tokens_usd"] == pytest.approx(3.6 / (600 * 3600) * 1e6)
    assert a["output_tokens_per_joule"] == pytest.approx(600 / 350)  # power halfway, 400 -> 300 W
    assert at_target(front, 50)["tps_per_accelerator"] is None  # beyond the front: no extrapolation


def test_pareto_from_the_cli_on_real_sweeps(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["capacity", "pareto", str(FIX / "sim4"), str(FIX / "sim8"), "--label", "sim4",
                                  "--label", "sim8", "--target-tps-per-user", "480", "--prices",
                                  str(FIX / "prices.toml"), "--out", str(tmp_path)], env={"COLUMNS": "200"})  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "pareto.json").read_text())
    for s in doc["systems"]:
        assert s["points"] and s["front"]
        ys = [p["tps_per_user"] for p in s["front"]]
        xs = [p["tps_per_accelerator"] for p in s["front"]]
        assert ys == sorted(ys) and xs == sorted(xs, reverse=True)
    assert "<svg" in (tmp_path / "pareto.html").read_text()


def test_scaling_efficiency() -> None:
    one = cap([(40, 0, 600), (50, 40, 400)], answer=40)
    two = cap([(70, 0, 600), (80, 40, 400)], answer=70)
    four = cap([(120, 0, 600), (140, 40, 400)], answer=120)
    rows = scaling_table([(4, four), (1, one), (2, two)])
    assert [r["accelerators"] for r in rows] == [1, 2, 4]
    assert [r["efficiency"] for r in rows] == pytest.approx([1.0, 70 / 80, 120 / 160])
    assert rows[2]["step_efficiency"] == pytest.approx((120 / 70) / 2)
    assert rows[1]["efficiency_ci"] == pytest.approx([70 / (2 * 50), 80 / (2 * 40)])


def test_an_efficiency_from_a_capacity_that_is_only_a_bound_is_not_measurable() -> None:
    """Issue 35 item 4: two sweeps that stopped at --max-rate read "efficiency 50.0 %" before; a capacity that
    is a lower bound (--max-rate, the client, a quota) gives no ratio, with the reason."""
    from dataclasses import replace

    one = cap([(40, 0, 600), (50, 40, 400)], answer=40)
    two = replace(cap([(40, 0, 600)], answer=40), limited_by="max_rate", label="2x")
    four = cap([(120, 0, 600), (140, 40, 400)], answer=120)
    rows = scaling_table([(1, one), (2, two), (4, four)])
    assert rows[0]["efficiency"] == 1.0 and rows[2]["efficiency"] == pytest.approx(120 / 160)
    assert rows[1]["efficiency"] is None and rows[1]["efficiency_ci"] == [None, None]
    assert "not measurable" in rows[1]["note"] and "reached --max-rate" in rows[1]["note"]
    assert rows[1]["step_efficiency"] is None and rows[2]["step_efficiency"] is None  # 4 over 2: 2 is a bound
    base = scaling_table([(1, replace(one, limited_by="client")), (2, cap([(70, 0, 600)], answer=70))])
    assert base[0]["efficiency"] == 1.0 and base[1]["efficiency"] is None and "client" in base[1]["note"]


def test_scaling_from_the_cli(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["capacity", "scaling", f"1={FIX / 'sim4'}", f"2={FIX / 'sim8'}", "--json",
                                  str(tmp_path / "s.json")], env={"COLUMNS": "200"})  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = json.loads((tmp_path / "s.json").read_text())
    assert rows[1]["efficiency"] == pytest.approx(134.86036 / (2 * 55.1571029771876), rel=1e-4)
    bad = CliRunner().invoke(main, ["capacity", "scaling", str(FIX / "sim4")])
    assert bad.exit_code == 2 and "N=SWEEP_DIR" in bad.output


def test_old_sweeps_without_per_target_entries_read_their_reasons(tmp_path: Path) -> None:
    doc = json.loads((FIX / "sim4" / "sweep.json").read_text())
    assert load_sweep(str(FIX / "sim4")).probes[-1].counts[P99] == (14, 598)
    for p in doc["probes"]:
        del p["targets"]  # sweep.json before per-target entries: only the reasons' words
    (tmp_path / "sweep.json").write_text(json.dumps(doc))
    c = load_sweep(str(tmp_path))
    assert c.probes[-1].counts[P99] == (14, 598)
    assert capacity_interval(c).upper_rps == pytest.approx(65.59321930340926)


def test_a_run_directory_is_one_point() -> None:
    from loadgen.capacity import points_of

    (p,) = points_of(str(FIX / "batch16" / "probe-01-c1"), "run")
    res = json.loads((FIX / "batch16" / "probe-01-c1" / "result.json").read_text())
    assert p.tps_per_accelerator == res["throughput"]["output_tps"]
    assert p.tps_per_user == pytest.approx(1000 / res["latency_ms"]["tpot"]["p50"])


def test_replicated_interval_is_min_and_max_of_bracket_midpoints(tmp_path: Path) -> None:
    from loadgen.capacity.confidence import replicated_interval

    reps = []
    for lo, hi in ((32.0, 35.0), (38.0, 42.0), (35.0, 38.0), (36.0, None)):
        c = cap([(lo, 0, 600)], answer=lo)
        c.bracket_rps = (lo, hi)
        reps.append(c)
    ri = replicated_interval(reps)
    mids = sorted([(32 * 35) ** 0.5, (38 * 42) ** 0.5, (35 * 38) ** 0.5, 36.0])
    assert (ri.lower_rps, ri.upper_rps) == pytest.approx((mids[0], mids[-1]))
    assert ri.point_rps == pytest.approx((mids[1] + mids[2]) / 2) and ri.confidence == pytest.approx(0.875)
    r = CliRunner().invoke(main, ["capacity", "ci", "--replicates", str(FIX / "sim4"), str(FIX / "sim4"),
                                  str(FIX / "sim4")], env={"COLUMNS": "200"})  # fmt: skip
    assert r.exit_code == 0 and "75 % interval [60.15, 60.15]" in r.output, r.output


def test_gate_on_replicates_from_the_cli() -> None:
    """Three replicates a side: the replicated intervals [60.15, 60.15] (sim4) and [147.07, 147.07] (sim8)."""
    args = ["capacity", "gate", "--fail-if-regress", "5%"]
    for side, d in (("--baseline", "sim8"), ("--candidate", "sim4")):
        for _ in range(3):
            args += [side, str(FIX / d)]
    r = CliRunner().invoke(main, args, env={"COLUMNS": "200"})
    assert r.exit_code == 1 and "REGRESSED" in r.output, r.output
    assert "75.0% interval [147.07, 147.07]" in r.output and "75.0% interval [60.15, 60.15]" in r.output


def test_a_probe_failed_on_stability_bounds_the_interval_from_above() -> None:
    """A real sweep (seed 9 of scripts/bench_capacity_ci): 41.52 req/s failed as unstable with 3 of 1104
    over (a binomial pass); 38.08 passed on its point estimate (7 of 1104). Before, L was 41.52, above
    the answer."""
    c = cap([(24.69, 0, 368), (49.38, 19, 80), (34.92, 0, 368), (41.52, 3, 1104), (38.08, 7, 1104)], answer=38.08,
            confidence=0.975)  # fmt: skip
    c.probes[3] = dataclasses.replace(c.probes[3], verdict="fail")
    c.probes[4] = dataclasses.replace(c.probes[4], verdict="pass", low_confidence=True)
    ci = capacity_interval(c)
    assert (ci.lower_rps, ci.upper_rps) == (34.92, 41.52)

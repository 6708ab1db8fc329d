"""Max-throughput mode (``--rate inf``): the plan, the sustained window, the verdict lines, the scorecard rows."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.core.errors import ConfigError
from loadgen.core.samples import SampleLog
from loadgen.core.window import TokenBins
from loadgen.engine.runplan import LoadConfig, build_plan
from loadgen.engine.throughput import (
    NOT_APPLICABLE,
    batch_size,
    batch_window,
    energy_per_million_j,
    max_throughput_checks,
)
from loadgen.engine.throughput import (
    scorecard as batch_scorecard,
)
from loadgen.engine.validity import ValidityBounds
from loadgen.report.batch import batch_lines
from loadgen.report.compare import NOT_THROUGHPUT_RUN, load_system, scorecard, write_outputs

MS = 1_000_000


# ---------------------------------------------------------------- the sustained window


def test_capped_batch_window_runs_from_the_bth_send_to_the_first_end_after_the_last_send() -> None:
    # B = 2: sends at 0, 1 ms (full at 1 ms); request 0 ends at 10 ms, request 2 sent then;
    # request 1 ends at 12, request 3 sent at 12 (the last send); first end after it: 20 ms
    sends = [0, 1 * MS, 10 * MS, 12 * MS]
    ends = [10 * MS, 12 * MS, 20 * MS, 25 * MS]
    assert batch_window(sends, ends, 2) == (1 * MS, 20 * MS)


def test_uncapped_burst_window_is_last_send_to_first_end() -> None:
    sends = [0, 2 * MS, 3 * MS]
    ends = [50 * MS, 40 * MS, 60 * MS]
    assert batch_window(sends, ends, 3) == (3 * MS, 40 * MS)


def test_a_batch_never_full_has_no_sustained_window() -> None:
    # the first request ends before the third is sent: three are never in flight at once
    out = batch_window([0, 1 * MS, 5 * MS], [4 * MS, 30 * MS, 40 * MS], 3)
    assert isinstance(out, str) and "never full" in out
    assert isinstance(batch_window([0], [5 * MS], 2), str)


def test_a_slot_reused_at_the_same_instant_keeps_the_batch_full() -> None:
    # request 0 ends at 10 ms and request 2 is sent at that same instant: the batch stays full
    assert batch_window([0, 0, 10 * MS], [10 * MS, 30 * MS, 40 * MS], 2) == (0, 30 * MS)


def test_the_window_starts_after_the_last_warmup_request() -> None:
    assert batch_window([0, 1 * MS, 10 * MS], [10 * MS, 30 * MS, 40 * MS], 2, last_warmup_end_ns=15 * MS) == (
        15 * MS,
        30 * MS,
    )


def test_batch_size_is_the_cap_or_every_request() -> None:
    assert batch_size(16, 200) == 16
    assert batch_size(None, 200) == 200
    assert batch_size(64, 10) == 10
    assert batch_size(8, None) == 8


# ---------------------------------------------------------------- the verdict lines


def _log(values: Sequence[float]) -> SampleLog:
    s = SampleLog(None)
    for v in values:
        s.append(v)
    return s


def test_schedule_checks_say_not_applicable_and_the_send_path_is_judged() -> None:
    lags = _log([1 * MS] * 99 + [3 * MS])
    e2e = _log([300 * MS] * 100)
    checks = {name: (ok, detail) for name, ok, detail in max_throughput_checks(lags, e2e)}
    assert checks["schedule_lag_p99"][0] and checks["schedule_lag_p99"][1].startswith(NOT_APPLICABLE)
    assert checks["send_rate"][1].startswith(NOT_APPLICABLE)
    ok, detail = checks["send_path"]
    assert ok and "slots idle 0.34 %" in detail  # 102 ms / (102 + 30000) ms
    # a client that holds each request 10 ms against a 300 ms E2E costs the batch 3.2 %: INVALID
    slow = {n: ok for n, ok, _ in max_throughput_checks(_log([10 * MS] * 100), e2e)}
    assert slow["send_path"] is False


def test_validity_of_a_max_throughput_run_has_no_schedule_lag_bound_line() -> None:
    from loadgen.engine.runner import ClientStats
    from loadgen.engine.validity import validity

    class Agg:
        generator_lag = _log([20 * MS] * 10)  # 20 ms lags: over the 5 ms schedule-lag bound, fine for 2 s requests
        samples = {"e2e": _log([2000 * MS] * 10)}
        generator_sends = 10
        first_generator_send_ns = 0
        last_generator_send_ns = 0
        errors_by_kind: dict[str, int] = {}
        requests = completed = 10
        pool_queued = failed = length_checked = length_mismatch = buffered = throttled = rate_limited_attempts = 0
        duration_s = 20.0

    client = ClientStats(cpu_s=1.0, wall_s=10.0, loop_lag_ms=[0.5], open_loop=False)
    v = validity(Agg(), client, ValidityBounds(max_throughput=True))  # type: ignore[arg-type]  # a stand-in Aggregator
    names = {c["name"]: c for c in v["checks"]}
    assert v["valid"] is True
    assert names["schedule_lag_p99"]["detail"].startswith("not applicable: max-throughput mode")
    assert names["send_path"]["ok"] is True
    closed = validity(Agg(), client, ValidityBounds())  # type: ignore[arg-type]  # a stand-in Aggregator
    assert "schedule_lag_p99" not in {c["name"] for c in closed["checks"]}  # a closed loop said nothing


# ---------------------------------------------------------------- configuration and plan


def test_rate_inf_is_a_closed_loop_plan_of_batch_users() -> None:
    cfg = LoadConfig(
        rate_rps=math.inf, requests=200, max_concurrency=16, origin="sent", input_tokens=8, output_tokens=4
    )
    plan = build_plan(cfg)
    assert (plan.mode, plan.concurrency, plan.max_requests) == ("closed", 16, 200)
    assert cfg.validity_bounds().max_throughput is True
    assert LoadConfig(rate_rps=5.0, requests=3).validity_bounds().max_throughput is False
    uncapped = build_plan(LoadConfig(rate_rps=math.inf, requests=50, origin="sent", warmup_requests=5))
    assert (uncapped.concurrency, uncapped.max_requests) == (55, 55)


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"duration_s": 10.0}, "give --requests N"),
        ({"requests": 10, "origin": "scheduled"}, "latency counts from the send"),
        ({"requests": 10, "concurrency": 4}, "--concurrency"),
        ({"requests": 10, "cost_per_hour_usd": -1.0}, "--cost-per-hour"),
    ],
)
def test_bad_max_throughput_configs_are_refused(kw: dict, words: str) -> None:
    base = {"rate_rps": math.inf, "origin": "sent"}
    with pytest.raises(ConfigError, match=words):
        LoadConfig(**{**base, **kw}).validate()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--rate", "inf"], "give --requests N"),
        (["--profile", "throughput", "--rate", "5", "--requests", "3"], "clashes with --rate R"),
        (["--rate", "inf", "--requests", "3", "--latency-origin", "scheduled"], "latency counts from the send"),
        (["--rate", "5", "--requests", "3", "--cost-per-hour", "2"], "give --rate inf"),
        (["--rate", "inf", "--requests", "3", "--dry-run"], "--rate inf has none"),
        (["--profile", "throughput", "--concurrency", "4", "--requests", "3"], "clash"),
    ],
)
def test_cli_usage_errors(args: list[str], words: str, tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["run", *args, "--out", str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    assert words in r.output


# ---------------------------------------------------------------- the scorecard


def _result(tmp_path: Path, ends_ms: list[float], batch: int, *, energy_j: float | None = None) -> tuple[dict, Path]:
    """A result body and its requests.jsonl: request k sent at sends[k], ends at ends_ms[k] (origin: sent)."""
    t0 = 10**12
    lines = []
    sends = [0.0] * batch + sorted(ends_ms)[: len(ends_ms) - batch]  # each later request takes a slot as one ends
    for k, (s, e) in enumerate(zip(sends, ends_ms, strict=True)):
        lines.append({"index": k, "phase": "measure", "scheduled_s": s / 1e3, "sent_s": s / 1e3,
                      "status": "ok", "e2e_ms": e - s})  # fmt: skip
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    res: dict = {"conditions": {"t0_monotonic_ns": t0}, "throughput": {"output_tps_incl_drain": 90.0}}
    if energy_j is not None:
        res["energy"] = {"joules": energy_j}
        res["server"] = {"window_s": 10.0}
    return res, path


def test_scorecard_rates_cost_and_energy(tmp_path: Path) -> None:
    # B = 2; ends at 100, 110 (two more sent then), 200, 215 ms; sustained [0, 200 ms]
    res, path = _result(tmp_path, [100, 110, 200, 215], 2, energy_j=3000.0)
    tokens = TokenBins()
    t0 = res["conditions"]["t0_monotonic_ns"]
    for b in range(20):  # one token every 10 ms bin over [0, 200 ms)
        tokens.add(t0 + b * 10 * MS + 1, 1)
    tokens.add(t0 + 205 * MS, 7)  # after the window
    cfg = LoadConfig(rate_rps=math.inf, requests=4, max_concurrency=2, origin="sent", cost_per_hour_usd=3.6)
    card = batch_scorecard(res, tokens, cfg, path)
    assert card["sustained_window"]["start_s"] == 0 and card["sustained_window"]["end_s"] == pytest.approx(0.2)
    assert card["sustained_output_tps"] == pytest.approx(20 / 0.2)
    assert card["sustained_output_tps_per_slot"] == pytest.approx(50.0)
    assert card["sustained_completion_rps"] == pytest.approx(3 / 0.2)  # 100, 110, 200 ms ends inside
    assert card["cost_per_million_output_tokens_usd"] == pytest.approx(3.6 / (100 * 3600) * 1e6)
    assert card["power_w"] == 300.0 and card["power_source"].startswith("energy meter")
    assert card["energy_per_million_output_tokens_j"] == pytest.approx(300 / 100 * 1e6)
    assert card["output_tps_incl_drain"] == 90.0
    text = "\n".join(batch_lines(card))
    assert "sustained output tok/s at batch 2: 100.0" in text and "incl. ramp and drain" in text


def test_without_power_or_price_the_scorecard_says_not_measured(tmp_path: Path) -> None:
    res, path = _result(tmp_path, [100, 110, 200, 215], 2)
    cfg = LoadConfig(rate_rps=math.inf, requests=4, max_concurrency=2, origin="sent")
    card = batch_scorecard(res, TokenBins(), cfg, path)
    assert card["energy_per_million_output_tokens_j"] is None and card["power_source"].startswith("not measured")
    text = "\n".join(batch_lines(card))
    assert "energy per million output tokens: not measured" in text
    assert "cost per million output tokens: not measured (give --cost-per-hour)" in text
    assert energy_per_million_j(250.0, 1000.0) == 250_000.0
    card2 = batch_scorecard(
        res, TokenBins(), LoadConfig(rate_rps=math.inf, requests=4, origin="sent", power_w=250.0), path
    )
    assert card2["power_source"].startswith("--power-w")


def _run_dir(d: Path, *, batch: int | None, tps: float) -> Path:
    d.mkdir(parents=True)
    res = {
        "schema_version": 1,
        "config": {
            "model": "m",
            "api": "completions",
            "input_tokens": "16",
            "output_tokens": "48",
            "arrival": "poisson",
            "latency_origin": "sent" if batch else "scheduled",
        },  # fmt: skip
        "conditions": {"endpoint": {"model": "m", "api": "completions", "stream": True}},
        "counts": {"requests": 10, "failed": 0},
        "throughput": {"output_tps": tps},
        "latency_ms": {},
    }
    if batch:
        res["max_throughput"] = {"batch": batch, "sustained_output_tps": tps, "sustained_output_tps_per_slot": tps / batch,
                                 "sustained_window": {"duration_s": 5.0}, "output_tps_incl_drain": tps * 0.9,
                                 "cost_per_million_output_tokens_usd": 1.0 / tps, "energy_per_million_output_tokens_j": None}  # fmt: skip
    (d / "result.json").write_text(json.dumps(res))
    return d


def test_compare_ranks_max_throughput_runs_only_with_each_other(tmp_path: Path) -> None:
    a = load_system(str(_run_dir(tmp_path / "a", batch=16, tps=1500.0)), "a")
    b = load_system(str(_run_dir(tmp_path / "b", batch=16, tps=1200.0)), "b")
    card = scorecard([a, b])
    rows = {r["key"]: r for r in card["rows"]}
    assert card["comparable"] is True
    assert rows["tp_sustained_output_tps"]["best"] == "a"
    assert rows["tp_cost_per_million_output_tokens_usd"]["best"] == "a"
    assert rows["tp_energy_per_million_output_tokens_j"]["values"]["a"] == "not measured"
    assert card["throughput"]["systems"] == ["a", "b"]
    write_outputs(card, [a, b], tmp_path / "card")
    page = (tmp_path / "card" / "scorecard.html").read_text()
    assert "Max throughput (batch)" in page and "max-throughput: sustained output tok/s" in page
    # an open-loop run is not one of them: not comparable, its throughput cells say why
    c = load_system(str(_run_dir(tmp_path / "c", batch=None, tps=2000.0)), "c")
    mixed = scorecard([a, c])
    assert mixed["comparable"] is False and any(r.startswith("max_throughput differs") for r in mixed["reasons"])
    mrows = {r["key"]: r for r in mixed["rows"]}
    assert mrows["tp_sustained_output_tps"]["values"]["c"] == NOT_THROUGHPUT_RUN
    assert mrows["tp_sustained_output_tps"]["best"] is None
    # another batch is another condition
    d = load_system(str(_run_dir(tmp_path / "d", batch=8, tps=900.0)), "d")
    assert scorecard([a, d])["comparable"] is False
    # no max-throughput run: no such section
    assert not any(r["key"].startswith("tp_") for r in scorecard([c])["rows"])

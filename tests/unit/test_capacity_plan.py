"""``loadgen plan`` (issue 19 item 1) on checked-in real sweeps: every figure recomputed by hand.

The sweeps (tests/fixtures/capacity/sim4, sim8) are real sweeps of the simulated endpoint
(README there); the demand is a made-up day of hourly rates (day.csv) and the prices
prices.toml. The expected numbers below are written out from those inputs, not taken from
the code under test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.capacity import load_prices, load_sweep, read_demand
from loadgen.cli import main
from loadgen.core.errors import InputFileError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "capacity"
DAY = [20, 15, 10, 10, 10, 15, 30, 60, 90, 120, 140, 150, 160, 155, 150, 140, 130, 120, 100, 90, 70, 50, 35, 25]


def plan(tmp_path: Path, *args: str) -> tuple[int, str, dict]:
    r = CliRunner().invoke(main, ["plan", *args, "--out", str(tmp_path / "plan")], env={"COLUMNS": "200"})
    doc = json.loads((tmp_path / "plan" / "plan.json").read_text()) if r.exit_code == 0 else {}
    return r.exit_code, r.output, doc


def test_plan_day_by_hand(tmp_path: Path) -> None:
    code, out, doc = plan(tmp_path, "--capacity", str(FIX / "sim4"), "--capacity", str(FIX / "sim8"),
                          "--demand", str(FIX / "day.csv"), "--prices", str(FIX / "prices.toml"),
                          "--headroom", "10%", "--slo", "ttft:p99<=120ms")  # fmt: skip
    assert code == 0, out
    assert (tmp_path / "plan" / "plan.csv").is_file() and (tmp_path / "plan" / "plan.html").is_file()
    p4, p8 = doc["plans"]
    # sim4's answer: 55.1571029771876 req/s (sweep.json answer.max_rate_rps); usable x 0.9 = 49.641 req/s
    assert p4["capacity_per_replica"] == pytest.approx(55.1571029771876)
    # by hand: 60/49.64 = 1.21 -> 2, 100/49.64 = 2.01 -> 3, 150/49.64 = 3.02 -> 4, 50/49.64 = 1.007 -> 2 ...
    want4 = [1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 4, 4, 3, 3, 3, 3, 2, 2, 2, 1, 1]
    assert [r["replicas"] for r in p4["intervals"]] == want4
    assert [r["demand"] for r in p4["intervals"]] == DAY
    # sim8's answer: 134.86 req/s, usable 121.37: 160/121.37 = 1.32 -> 2, 120/121.37 = 0.99 -> 1
    want8 = [1 if d <= 121.37 else 2 for d in DAY]
    assert [r["replicas"] for r in p8["intervals"]] == want8
    assert "sim4" in out and "cloud_autoscaled" in out and "break-even" in out

    # costs of sim4 over the 24 h, peak 4 replicas of 1 accelerator
    c = p4["costs"]
    assert c["cloud_on_demand"]["total_usd"] == pytest.approx(4 * 4.0 * 24)
    assert c["cloud_reserved"]["total_usd"] == pytest.approx(4 * 2.5 * 24)
    # autoscaled, 60 s scale-up delay: each hour pays max(this hour, next hour)
    scaled = [max(want4[i], want4[i + 1] if i + 1 < 24 else 0) for i in range(24)]
    assert [r["autoscaled_replicas"] for r in p4["intervals"]] == scaled
    assert c["cloud_autoscaled"]["total_usd"] == pytest.approx(sum(scaled) * 4.0)
    fixed_h = 30000 / (4 * 8766) + (2000 + 500) / 8766 + 2 * 12 * 120 / 8766
    kwh = 0.0
    for d, n in zip(DAY, want4, strict=True):
        u = d / (n * 55.1571029771876)
        kwh += (n * (100 + 600 * u) + (4 - n) * 100) / 1000 * 1.3
    assert c["on_prem"]["fixed_usd"] == pytest.approx(4 * fixed_h * 24)
    assert c["on_prem"]["energy_kwh"] == pytest.approx(kwh)
    assert c["on_prem"]["total_usd"] == pytest.approx(4 * fixed_h * 24 + kwh * 0.12)
    # per unit: the day's requests x the sweep's output tokens per request at its answer
    requests = sum(DAY) * 3600
    res = json.loads((FIX / "sim4" / "probe-05-55.157rps" / "result.json").read_text())["throughput"]
    out_tokens = requests * res["output_tps"] / res["request_rps"]
    assert c["cloud_on_demand"]["per_successful_request_usd"] == pytest.approx(384 / requests)
    assert c["cloud_on_demand"]["per_million_output_tokens_usd"] == pytest.approx(384 / out_tokens * 1e6)
    s = p4["summary"]
    assert s["break_even_utilisation"] == pytest.approx((fixed_h + 700 * 1.3 / 1000 * 0.12) / 4.0)
    assert s["fleet_duty"] == pytest.approx(sum(want4) / (4 * 24))
    assert s["peak_replicas"] == 4 and p8["summary"]["peak_replicas"] == 2


def test_plan_on_the_shipped_azure_trace(tmp_path: Path) -> None:
    """The Azure 2023 conversation excerpt binned per minute, x 30: replicas from the rows counted here."""
    code, out, doc = plan(tmp_path, "--capacity", str(FIX / "sim4"), "--demand", "builtin:azure-conv-2023",
                          "--demand-scale", "30", "--interval", "60", "--headroom", "0%")  # fmt: skip
    assert code == 0, out
    import csv
    import datetime as dt

    from loadgen.workload.traces import resolve_trace_path

    with open(resolve_trace_path("builtin:azure-conv-2023")) as fh:
        ts = [dt.datetime.fromisoformat(r["TIMESTAMP"][:26]) for r in csv.DictReader(fh)]
    secs = [(t - ts[0]).total_seconds() for t in ts]
    counts = [0] * (int(secs[-1] // 60) + 1)
    for s in secs:
        counts[int(s // 60)] += 1
    rows = doc["plans"][0]["intervals"]
    assert [r["demand"] for r in rows] == pytest.approx([n / 60 * 30 for n in counts])
    assert [r["replicas"] for r in rows] == [math.ceil(n / 60 * 30 / 55.1571029771876) for n in counts]
    # the trace's requests are ~1,000 tokens in, the sweep's 32: the plan says so
    assert "differs by over 20 %" in out


def test_plan_refuses_another_slo(tmp_path: Path) -> None:
    code, out, _ = plan(tmp_path, "--capacity", str(FIX / "sim4"), "--demand", str(FIX / "day.csv"),
                        "--slo", "ttft:p99<=300ms")  # fmt: skip
    assert code == 2 and "not the SLO" in out
    code, out, _ = plan(tmp_path, "--capacity", str(FIX / "sim4"), "--capacity", str(FIX / "batch16"),
                        "--demand", str(FIX / "day.csv"))  # fmt: skip
    assert code == 2 and "different SLOs" in out


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("[cloud]\non_demand_per_accelerator_hour = -1\n", ":2: field 'cloud.on_demand_per_accelerator_hour'"),
        ("[cloud]\non_demand_per_accelerator_hour = 1\nscale_up_delay = 5\n", ":3: field 'cloud.scale_up_delay'"),
        ("[on_prem]\ncapex_per_accelerator = 1\n\npue = 0.5\n", ":4: field 'on_prem.pue'"),
        ("[on_prem]\ncapex_per_accelerator = 'x'\n", ":2: field 'on_prem.capex_per_accelerator'"),
        ("[cloud]\non_demand_per_accelerator_hour = \n", ":2"),
        ("[on_prem]\nlifetime_years = 4\n", ":1: field 'on_prem'"),
        ("accelerators_per_replica = 1.5\n[cloud]\non_demand_per_accelerator_hour = 1\n",
         ":1: field 'accelerators_per_replica'"),
    ],
)  # fmt: skip
def test_prices_file_errors_name_file_line_field(tmp_path: Path, text: str, where: str) -> None:
    f = tmp_path / "p.toml"
    f.write_text(text)
    with pytest.raises(InputFileError) as e:
        load_prices(str(f))
    assert str(e.value).startswith(str(f) + where)


def test_bad_prices_file_from_the_cli_is_a_usage_error(tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text("[cloud]\non_demand_per_accelerator_hour = 4\nreserved_per_acelerator_hour = 2\n")
    code, out, _ = plan(tmp_path, "--capacity", str(FIX / "sim4"), "--demand", str(FIX / "day.csv"), "--prices", str(f))
    assert code == 2 and "p.toml:3: field 'cloud.reserved_per_acelerator_hour'" in out.replace("\n", "")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("start_s,rate_rps\n0,5\n60,x\n", ":3: field 'rate_rps'"),
        ("start_s,rate_rps\n0,5\n0,6\n", ":3: field 'start_s'"),
        ("start_s,rate_rps\n0,5\n", ":2: field 'duration_s'"),
        ("start_s,rate_rps,output_tps\n0,5,6\n", ":1: field 'output_tps'"),
        ("rate_rps\n5\n", ":1: field 'start_s'"),
    ],
)
def test_demand_csv_errors_name_file_line_field(tmp_path: Path, text: str, where: str) -> None:
    f = tmp_path / "d.csv"
    f.write_text(text)
    with pytest.raises(InputFileError) as e:
        read_demand(str(f))
    assert str(e.value).startswith(str(f) + where)


def test_demand_in_output_tokens_uses_the_answers_output_rate(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    f.write_text("start_s,duration_s,output_tps\n0,600,2000\n600,600,500\n")
    dem = read_demand(str(f))
    assert dem.unit == "output_tps" and [i.duration_s for i in dem.intervals] == [600, 600]
    code, out, doc = plan(tmp_path, "--capacity", str(FIX / "sim4"), "--demand", str(f), "--headroom", "0%")
    assert code == 0, out
    tps = load_sweep(str(FIX / "sim4")).output_tps
    assert tps is not None and 800 < tps < 900  # 878 output tok/s at 55.16 req/s
    assert [r["replicas"] for r in doc["plans"][0]["intervals"]] == [3, 1]  # 2000 / 878 = 2.28 -> 3


def test_on_prem_power_from_the_sweeps_measured_draw(tmp_path: Path) -> None:
    """Without power_w in the prices file, the answer probe's energy / window / accelerators is the draw."""
    import dataclasses

    from loadgen.capacity import make_plan
    from loadgen.capacity.demand import Demand, DemandInterval

    cap = dataclasses.replace(load_sweep(str(FIX / "sim4")), power_w=1400.0, accelerators=2)
    f = tmp_path / "p.toml"
    f.write_text("accelerators_per_replica = 2\n[on_prem]\ncapex_per_accelerator = 0\nelectricity_per_kwh = 0.1\n")
    dem = Demand("d", "rate_csv", "rate_rps", [DemandInterval(0, 3600, 55.1571029771876, None, None, None)])
    p = make_plan(cap, dem, load_prices(str(f)), 0.0)
    op = p.costs["on_prem"]
    assert op["power_w_per_accelerator"] == 700.0 and "measured" in op["power_source"]
    assert op["energy_kwh"] == pytest.approx(2 * 700 / 1000)  # one replica of 2 at full use for 1 h, PUE 1
    assert op["total_usd"] == pytest.approx(2 * 700 / 1000 * 0.1)
    cap_none = dataclasses.replace(cap, power_w=None)
    with pytest.raises(Exception, match="on_prem.power_w is needed"):
        make_plan(cap_none, dem, load_prices(str(f)), 0.0)


def test_a_demand_too_long_is_resampled_and_bad_ones_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35 item 5: 3 million demand rows took 5.26 GB and wrote 2 GB before; a rate of 1e308 and a binary file
    were tracebacks. More rows than MAX_INTERVALS are resampled to --interval (time-weighted means), streamed."""
    from loadgen.capacity import demand as dm

    monkeypatch.setattr(dm, "MAX_INTERVALS", 50)
    f = tmp_path / "long.csv"
    f.write_text("start_s,rate_rps,output_tokens_per_request\n" + "".join(
        f"{i * 10},{10 if (i // 6) % 2 else 20},{100 if (i // 6) % 2 else 300}\n" for i in range(120)))  # fmt: skip
    d = dm.read_demand(str(f), interval_s=60.0)
    assert d.kind == "rate_csv:resampled" and len(d.intervals) == 20  # 1,200 s of 10 s rows in 60 s bins
    assert [iv.rate_rps for iv in d.intervals[:2]] == [20.0, 10.0]
    assert [iv.output_tokens_per_request for iv in d.intervals[:2]] == [300.0, 100.0]
    with pytest.raises(InputFileError, match="give a longer --interval"):
        dm.read_demand(str(f), interval_s=1.0)  # still over the limit resampled: one line
    huge = tmp_path / "huge.csv"
    huge.write_text("start_s,rate_rps\n0,1e308\n60,5\n")
    with pytest.raises(InputFileError, match=r"huge\.csv:2: field 'rate_rps': 1e308 is over the limit"):
        dm.read_demand(str(huge))
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xe2\x28\xa1" * 100)
    with pytest.raises(InputFileError, match="not UTF-8 text"):
        dm.read_demand(str(binary))

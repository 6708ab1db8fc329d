"""loadgen's start-form fields in Locust (``loadgen.locust.form``) and the tab's live series (``loadgen.locust.live``).

Both modules are pure (no Locust, no gevent), so they are tested in-process.
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from loadgen.core.metrics import compute
from loadgen.core.types import RequestRecord, TokenEvent
from loadgen.engine.results import Aggregator
from loadgen.locust import form
from loadgen.locust.live import LiveSeries


class _Parser(argparse.ArgumentParser):
    """Locust's parser takes ``include_in_web_ui``; a plain one does not."""

    def add_argument(self, *args: Any, include_in_web_ui: bool | None = None, **kw: Any) -> Any:
        assert include_in_web_ui or args == ("-h", "--help"), args  # every loadgen field is in the form
        return super().add_argument(*args, **kw)


def _cfg(**over: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "mode": "closed", "rate": None, "arrival": "poisson", "burstiness": 1.0, "slos": [],
        "workload": {"input_tokens": "128", "output_tokens": "64", "trace": None},
        "config_record": {"rate": None, "slos": []},
    }  # fmt: skip
    cfg.update(over)
    return cfg


def test_fields_default_to_the_command_line() -> None:
    p = _Parser()
    form.add_arguments(p, _cfg(rate=2.5, mode="open", slos=["ttft:p99<=300ms"]))
    ns = p.parse_args([])
    assert form.values(ns) == {"loadgen_rate": "2.5", "loadgen_arrival": "poisson", "loadgen_input_tokens": "128",
                               "loadgen_output_tokens": "64", "loadgen_slo": "ttft:p99<=300ms"}  # fmt: skip
    assert form.apply(_cfg(rate=2.5, mode="open"), form.values(ns))["rate"] == 2.5  # untouched: the same load
    worker = _Parser()
    form.add_arguments(worker, None)  # a worker has no configuration: empty fields
    assert form.values(worker.parse_args([]))["loadgen_rate"] == ""


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("loadgen_rate", "fast", "rate 'fast'"),
        ("loadgen_rate", "0", "must be a finite number > 0"),
        ("loadgen_rate", "inf", "must be a finite number > 0"),
        ("loadgen_arrival", "bursty", "arrival 'bursty'"),
        ("loadgen_input_tokens", "uniform:9", "length spec"),
        ("loadgen_output_tokens", "0", "a length must be >= 1"),
        ("loadgen_slo", "ttft<=1s", "invalid SLO"),
    ],
)
def test_a_bad_field_is_one_line(field: str, value: str, message: str) -> None:
    good = {k: "" for k in form.FIELDS} | {"loadgen_input_tokens": "32", "loadgen_output_tokens": "8"}
    assert form.check(good) is None
    problem = form.check({**good, field: value})
    assert problem is not None and problem.startswith("loadgen: ") and message in problem and "\n" not in problem


def test_apply_switches_the_loop_and_records_what_ran() -> None:
    f = {"loadgen_rate": "4", "loadgen_arrival": "constant", "loadgen_input_tokens": "uniform:10,20",
         "loadgen_output_tokens": "6", "loadgen_slo": "ttft:p99<=300ms; tpot:p90<=20ms"}  # fmt: skip
    cfg = form.apply(_cfg(), f)
    assert cfg["mode"] == "open" and cfg["rate"] == 4.0 and cfg["arrival"] == "constant"
    assert cfg["workload"]["input_tokens"] == "uniform:10,20" and cfg["workload"]["output_tokens"] == "6"
    assert cfg["slos"] == ["ttft:p99<=300ms", "tpot:p90<=20ms"]
    rec = cfg["config_record"]
    assert (rec["mode"], rec["rate"], rec["output_tokens"], rec["slos"]) == ("open", 4.0, "6", cfg["slos"])
    closed = form.apply(cfg, {**f, "loadgen_rate": "", "loadgen_output_tokens": ""})
    assert closed["mode"] == "closed" and closed["rate"] is None and closed["workload"]["output_tokens"] is None
    trace_cfg = _cfg(workload={"input_tokens": "128", "output_tokens": "64", "trace": "t.jsonl"})
    assert form.apply(trace_cfg, {**f, "loadgen_rate": ""})["mode"] == "open"  # a trace stays open loop


def _rec(i: int, start_ns: int, ttft_ms: int, tokens: int, itl_ms: int, ok: bool = True) -> RequestRecord:
    first = start_ns + ttft_ms * 1_000_000
    events = [TokenEvent(first + k * itl_ms * 1_000_000, "x", True, None) for k in range(tokens)]
    end = events[-1].t_ns + 1 if events else start_ns + 1_000_000
    return RequestRecord(index=i, phase="measure", scheduled_ns=start_ns, sent_ns=start_ns, end_ns=end,
                         status="ok" if ok else "error", error_kind=None if ok else "http_error",
                         completion_tokens=tokens if ok else None, events=events if ok else [])  # fmt: skip


def test_live_series_bins_by_completion_and_counts_tokens_on_arrival() -> None:
    """Second 0: one request ends (TTFT 100 ms); second 1: one ends, one fails; tokens by arrival second."""
    t0 = 10**12
    agg, series = Aggregator(), LiveSeries(t0)
    recs = [
        _rec(0, t0, 100, 5, 100),  # tokens at 0.1..0.5 s, ends in second 0
        _rec(1, t0 + 800_000_000, 300, 4, 100),  # tokens at 1.1..1.4 s, ends in second 1
        _rec(2, t0 + 1_200_000_000, 0, 0, 0, ok=False),  # fails in second 1
    ]
    for r in recs:
        m = compute(r)
        agg.add(r, m)
        series.add(r, m)
    s = series.to_json(agg, t0 + 2_500_000_000)  # seconds 0 and 1 are complete
    assert s["t_s"] == [1.0, 2.0] and s["bin_s"] == 1.0
    assert s["completed_rps"] == [1.0, 1.0] and s["failed_rps"] == [0.0, 1.0]
    assert s["output_tps"] == [5.0, 4.0]
    assert s["ttft_p50_ms"] == [100.0, 300.0] and s["tpot_p99_ms"] == [100.0, 100.0]
    assert series.to_json(agg, t0 + 500_000_000)["t_s"] == []  # the second still filling is left out

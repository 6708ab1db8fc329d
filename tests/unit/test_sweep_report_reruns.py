"""A probe re-run after a client stall is said in the console and in report.html (issue 15, item 4)."""

from __future__ import annotations

from loadgen.report.sweep_report import rerun_lines


def test_each_rerun_is_one_line_with_its_reason() -> None:
    res = {
        "settings": {"max_reruns": 2},
        "reruns": [
            {
                "offered_rps": 55.5,
                "concurrency": None,
                "invalid_probe": "probe-03-55.500rps",
                "rerun": 1,
                "validity_detail": ["p99 schedule lag 18.3 ms <= 5 ms"],
            }
        ],
    }
    assert rerun_lines(res) == [
        "re-run 1 of 2 at 55.50 req/s: probe-03-55.500rps was INVALID (p99 schedule lag 18.3 ms <= 5 ms); run again"
    ]


def test_no_reruns_no_lines() -> None:
    assert rerun_lines({"reruns": []}) == [] and rerun_lines({}) == []

"""The scorecard's Pareto figure (issue 19, must-show 3): per-accelerator x, one front per system."""

from __future__ import annotations

from typing import Any

from loadgen.report.compare_html import render_html
from loadgen.report.compare_pareto import pareto_figure, points_of_card
from loadgen.report.plotting import pyplot


def _rows(points: list[tuple[int, float, float, bool]], acc: int | None) -> list[dict[str, Any]]:
    return [{"concurrency": c, "output_tps": x, "output_tps_per_accelerator": (x / acc) if acc else None,
             "per_user_output_tps": y, "meets_slo": ok} for c, x, y, ok in points]  # fmt: skip


def test_points_are_per_accelerator_and_the_front_drops_dominated_points() -> None:
    card = {"interactivity": {
        "a": _rows([(1, 100.0, 120.0, True), (4, 380.0, 100.0, True), (8, 300.0, 90.0, True), (16, 900.0, 60.0, False)], 2),
        "b": _rows([(2, 150.0, 80.0, True)], 1),
        "empty": [{"concurrency": 1, "output_tps": None, "per_user_output_tps": None}],
    }}  # fmt: skip
    pts, per_acc = points_of_card(card)
    assert per_acc and set(pts) == {"a", "b"}
    assert [p.tps_per_accelerator for p in pts["a"]] == [50.0, 190.0, 150.0, 450.0]
    plt = pyplot()
    if plt is None:
        return
    svg = pareto_figure(plt, card)
    assert "<svg" in svg and "id='pareto'" in svg and "loadgen capacity pareto --target-tps-per-user" in svg
    card["interactivity"]["b"] = _rows([(2, 150.0, 80.0, True)], None)  # a sweep without --accelerators
    assert points_of_card(card)[1] is False
    assert pareto_figure(plt, {"interactivity": {}}) == ""


def test_the_scorecard_page_draws_it() -> None:
    card = {"systems": [{"label": "a", "source": "a"}], "rows": [], "comparable": True, "reasons": [],
            "ranking": "ranked", "sustained": {"rule": "r"},
            "interactivity": {"a": _rows([(1, 100.0, 120.0, True), (4, 380.0, 100.0, True)], 1)}}  # fmt: skip
    page = render_html(card)
    if pyplot() is not None:
        assert "interactivity: Pareto fronts" in page and "output tok/s per accelerator" in page

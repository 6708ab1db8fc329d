"""Server counters read right across a run: resets and wraps bridged, renamed series found, engines summed.

A counter's increase over a run is taken over every scrape of it, in order (the one before the run, the
samples during it, the one after), per label set, and summed over label sets: several engines or API
servers behind one page (vLLM's ``engine="0"``, ``engine="1"``, ...) each count their own requests.
Between two scrapes of one label set, a value that went down is

* a **wrap** when the earlier value sat in the top quarter below 2**32 or 2**64 (an exporter's 32- or
  64-bit integer rolled over): the increase is ``2**bits - before + after``;
* else a **reset** (the server restarted, or the engine that exported it did): the increase is the value
  after it, counted from 0. What the counter gained between the last scrape before the reset and the
  reset itself is not seen: the increase is then a lower bound, and ``counter_resets`` says so.

Either is flagged in ``result.json`` (``server.metrics.counter_resets`` / ``counter_wraps``: series name ->
how many), never silently dropped (before, a counter that went down gave no figure at all, and the tokens
before it were lost without a word).

**Renamed series** (:data:`RENAMED`): the figure is read from the first name the page has, newest first,
and the name used is kept (``server.metrics.series_names``). See docs/measurement.md for the table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RENAMED", "CounterFigures", "Increase", "counter_figures", "first_present", "increase"]

Labels = tuple[tuple[str, str], ...]
Scrape = dict[str, list[tuple[Labels, float]]]

RENAMED: dict[str, tuple[str, ...]] = {
    # vLLM V1 (0.8-0.10) exported gpu_prefix_cache_*; 0.10 added prefix_cache_* beside them (0.10.2 exports
    # both), later versions only the new names. Tokens, queried and hit.
    "vllm:prefix_cache_queries_total": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "vllm:prefix_cache_hits_total": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    # SGLang 0.4.4 added inter_token_latency_seconds beside time_per_output_token_seconds, 0.4.5 dropped the
    # old name (a histogram: its _count, _sum and _bucket series move together)
    "sglang:inter_token_latency_seconds": (
        "sglang:inter_token_latency_seconds",
        "sglang:time_per_output_token_seconds",
    ),
    # Triton 23.03 (server 2.32, core's TRITONCACHE APIs): the response cache's per-model hit lookup time
    "nv_cache_hit_duration_per_model": ("nv_cache_hit_duration_per_model", "nv_cache_hit_lookup_duration_per_model"),
}
"""A figure's series -> its names, newest first (docs/measurement.md, "Server counters")."""

_WRAP_BITS = (32, 64)


@dataclass
class Increase:
    """A counter's increase over the scrapes, and what had to be bridged to get it."""

    value: float = 0.0
    resets: int = 0
    wraps: int = 0
    by_label: dict[Labels, float] = field(default_factory=dict)


def _match(labels: Labels, where: Mapping[str, str] | None) -> bool:
    if not where:
        return True
    d = dict(labels)
    return all(d.get(k) == v for k, v in where.items())


def first_present(scrapes: Sequence[Scrape], names: Sequence[str]) -> str | None:
    """The first of ``names`` that the last scrape holding any of them has (newest name first); a histogram's
    name is present when its ``_count`` series is."""
    for s in reversed(scrapes):
        for n in names:
            if n in s or n + "_count" in s:
                return n
    return None


def increase(scrapes: Sequence[Scrape], name: str, where: Mapping[str, str] | None = None) -> Increase | None:
    """The increase of counter ``name`` over ``scrapes`` (in time order), resets and wraps bridged per label
    set (module docstring); None when no scrape holds the series. A label set absent from the first scrape
    counts from 0 where it first appears (servers create labelled series at their first use)."""
    last: dict[Labels, float] = {}
    out = Increase()
    seen = False
    for i, s in enumerate(scrapes):
        for labels, v in s.get(name, ()):
            if not _match(labels, where):
                continue
            seen = True
            if labels not in last:  # in the first scrape: the baseline; later: a series created since, from 0
                last[labels] = v
                out.by_label[labels] = v if i else 0.0
                continue
            before = last[labels]
            if v >= before:
                gain = v - before
            else:
                bits = next((b for b in _WRAP_BITS if 0.75 * 2.0**b <= before < 2.0**b), None)
                if bits is not None:
                    gain = 2.0**bits - before + v
                    out.wraps += 1
                else:
                    gain = v
                    out.resets += 1
            out.by_label[labels] = out.by_label.get(labels, 0.0) + gain
            last[labels] = v
    if not seen:
        return None
    out.value = float(sum(out.by_label.values()))
    return out


@dataclass
class CounterFigures:
    """Counters read over a run (:func:`counter_figures`): each figure's increase, and what was bridged."""

    values: dict[str, int] = field(default_factory=dict)
    by_label: dict[str, dict[Labels, float]] = field(default_factory=dict)
    resets: dict[str, int] = field(default_factory=dict)  # series name -> resets bridged (a lower bound)
    wraps: dict[str, int] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # figure -> the older series name the page had

    def flags(self) -> dict[str, dict[str, Any]]:
        """``counter_resets``, ``counter_wraps`` and ``series_names`` where there is something to say."""
        out: dict[str, dict[str, Any]] = {}
        if self.resets:
            out["counter_resets"] = dict(self.resets)  # counted from 0 after each: the figure is a lower bound
        if self.wraps:
            out["counter_wraps"] = dict(self.wraps)
        if self.names:
            out["series_names"] = dict(self.names)
        return out


def counter_figures(
    scrapes: Sequence[Scrape], figures: Sequence[tuple[str, str]], where: Mapping[str, str] | None = None
) -> CounterFigures:
    """Each ``(figure, series)`` counter's increase over ``scrapes`` (its newest name the page has,
    :data:`RENAMED`), resets and wraps bridged; a series no scrape holds is left out."""
    out = CounterFigures()
    for key, name in figures:
        used = first_present(scrapes, RENAMED.get(name, (name,))) or name
        inc = increase(scrapes, used, where)
        if inc is None:
            continue
        out.values[key] = int(inc.value)
        out.by_label[key] = inc.by_label
        if used != name:
            out.names[key] = used
        if inc.resets:
            out.resets[used] = out.resets.get(used, 0) + inc.resets
        if inc.wraps:
            out.wraps[used] = out.wraps.get(used, 0) + inc.wraps
    return out

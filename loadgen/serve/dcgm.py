"""NVIDIA DCGM exporter pages (``dcgm-exporter``'s /metrics): power and energy per physical GPU, MIG handled.

Pure: parsed scrapes in (:func:`loadgen.serve.prom.parse`), figures out. The series read:
``DCGM_FI_DEV_POWER_USAGE`` (W, a gauge), ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ since the driver
loaded, a counter), ``DCGM_FI_DEV_GPU_UTIL`` (%), ``DCGM_FI_DEV_FB_USED`` (MiB). Rows are labelled with the
GPU (``gpu``, ``UUID``, ``modelName``) and, on a MIG-partitioned GPU, with its instance (``GPU_I_ID``,
``GPU_I_PROFILE``): the exporter repeats the *whole GPU's* power and energy on every instance's row, so
summing rows would count one GPU once per instance. Here each figure is taken once per physical GPU
(its ``UUID``, else ``gpu``), and ``mig_instances`` says how many instance rows shared it.

Units are checked, not trusted: the energy counter's increase over the window, read as mJ, is compared with
the mean power times the window; a ratio near 1/1,000 (or 1,000) means the counter is in J (or µJ)
where mJ was expected, and is flagged in ``units``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loadgen.serve.counters import increase

__all__ = ["POWER", "ENERGY", "dcgm_summary"]

Labels = tuple[tuple[str, str], ...]
Scrape = dict[str, list[tuple[Labels, float]]]

POWER = "DCGM_FI_DEV_POWER_USAGE"
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"


def _gpu(labels: Labels) -> str:
    d = dict(labels)
    return d.get("UUID") or d.get("uuid") or d.get("gpu") or "?"


def _one_per_gpu(rows: Sequence[tuple[Labels, float]]) -> dict[str, float]:
    """One value per physical GPU: the MIG instances' rows of one GPU repeat its value (module docstring)."""
    out: dict[str, float] = {}
    for labels, v in rows:
        out.setdefault(_gpu(labels), v)
    return out


def dcgm_summary(scrapes: Sequence[Scrape], window_s: float) -> dict[str, Any]:
    """Per physical GPU and in all: energy (J) over ``scrapes`` (before, samples, after; resets bridged),
    power mean and max (W), utilisation mean (%), MIG instance rows; the units check (module docstring)."""
    gpus: dict[str, dict[str, Any]] = {}
    for s in scrapes:
        for g, v in _one_per_gpu(s.get(POWER, [])).items():
            gpus.setdefault(g, {}).setdefault("power_w", []).append(v)
        for g, v in _one_per_gpu(s.get(UTIL, [])).items():
            gpus.setdefault(g, {}).setdefault("util_pct", []).append(v)
    last = scrapes[-1] if scrapes else {}
    for rows in (last.get(POWER, []), last.get(ENERGY, [])):
        for labels, _ in rows:
            lab = dict(labels)
            f = gpus.setdefault(_gpu(labels), {})
            f.setdefault("model", lab.get("modelName"))
            if "GPU_I_ID" in lab:
                f.setdefault("_mig", set()).add(lab["GPU_I_ID"])
    # energy: one row per GPU (its first), its increase across the scrapes
    for g in list(gpus):
        first_rows: list[Scrape] = []
        for s in scrapes:
            rows = [(lab, v) for lab, v in s.get(ENERGY, []) if _gpu(lab) == g]
            first_rows.append({ENERGY: rows[:1]})
        inc = increase(first_rows, ENERGY)
        if inc is not None:
            gpus[g]["energy_j"] = round(inc.value / 1000.0, 3)
            if inc.resets:
                gpus[g]["energy_counter_resets"] = inc.resets
    out_gpus: dict[str, Any] = {}
    for g, f in sorted(gpus.items()):
        row: dict[str, Any] = {"model": f.get("model")}
        p = f.get("power_w") or []
        if p:
            row["power_w_mean"] = round(sum(p) / len(p), 2)
            row["power_w_max"] = round(max(p), 2)
        u = f.get("util_pct") or []
        if u:
            row["util_pct_mean"] = round(sum(u) / len(u), 1)
        if "energy_j" in f:
            row["energy_j"] = f["energy_j"]
        if f.get("energy_counter_resets"):
            row["energy_counter_resets"] = f["energy_counter_resets"]
        row["mig_instances"] = len(f.get("_mig") or ())
        out_gpus[g] = row
    energy = [r["energy_j"] for r in out_gpus.values() if "energy_j" in r]
    out: dict[str, Any] = {"gpus": out_gpus, "window_s": round(window_s, 3)}
    if energy:
        out["energy_j"] = round(sum(energy), 3)
    means = [r["power_w_mean"] for r in out_gpus.values() if "power_w_mean" in r]
    if means:
        out["power_w_mean"] = round(sum(means), 2)
    if energy and means and window_s > 0:
        ratio = out["energy_j"] / (out["power_w_mean"] * window_s) if out["power_w_mean"] > 0 else None
        out["energy_over_power_x_time"] = None if ratio is None else round(ratio, 3)
        if ratio is not None and not 0.2 <= ratio <= 5.0:
            unit = "µJ" if 200 <= ratio <= 5000 else ("J" if 0.0002 <= ratio <= 0.005 else "an unknown unit")
            out["units"] = (
                f"the energy counter rose {ratio:.3g}x what the mean power over the window gives: it reads as "
                f"{unit}, not mJ; energy_j is not to be trusted"
            )
    return out

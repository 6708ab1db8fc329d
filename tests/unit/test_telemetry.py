"""The live Prometheus exporter (loadgen.telemetry.prom): counts from the records, exact merge, stated precision."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.telemetry.prom import BUCKET_BOUNDS_S, PromExporter


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """Prometheus ``histogram_quantile`` without interpolation: the upper bound of the q-th bucket."""
    total = buckets[-1][1]
    for le, cum in buckets:
        if cum >= q * total:
            return le
    return float("inf")


def scrape(text: str) -> dict[tuple[Any, ...], Any]:
    """Samples of a Prometheus text exposition: {(name, labels...): value} and buckets per histogram."""
    out: dict[tuple[Any, ...], Any] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_bucket"):
                key = (s.name, s.labels.get("phase"))
                out.setdefault(key, []).append((float(s.labels["le"]), s.value))
            else:
                out[(s.name, *sorted(s.labels.items()))] = s.value
    return out


def write_lines(path: Path, ttfts_ms: list[float], start: int = 0) -> None:
    with open(path, "a") as fh:
        for i, v in enumerate(ttfts_ms):
            d = {"index": start + i, "phase": "measure", "status": "ok", "sent_s": 0.0, "ttft_ms": v,
                 "e2e_ms": v + 10, "itl_ms": [2.0, 3.0], "output_tokens": 3, "schedule_lag_ms": 0.1}  # fmt: skip
            fh.write(json.dumps(d) + "\n")
        fh.write(json.dumps({"index": 999 + start, "phase": "measure", "status": "error", "error_kind": "timeout",
                             "sent_s": 0.0, "output_tokens": 0}) + "\n")  # fmt: skip


def exporter_text(path: Path) -> str:
    ex = PromExporter(path, 0)
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(ex)
    ex.refresh()
    return generate_latest(reg).decode()


def test_counts_and_exact_merge_of_two_generators(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    values = list(rng.lognormal(np.log(80.0), 0.8, 2000))
    a, b, both = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "both.jsonl"
    write_lines(a, values[:700])
    write_lines(b, values[700:], start=700)
    write_lines(both, values[:700])
    write_lines(both, values[700:], start=700)
    sa, sb, sboth = (scrape(exporter_text(p)) for p in (a, b, both))
    key = ("loadgen_ttft_seconds_bucket", "measure")
    merged = [(le, ca + cb) for (le, ca), (_, cb) in zip(sa[key], sb[key])]
    assert merged == sboth[key]  # bucket counts add: the merge is exact
    assert sboth[("loadgen_requests_total", ("phase", "measure"), ("status", "ok"))] == 2000
    assert sboth[("loadgen_errors_total", ("kind", "timeout"), ("phase", "measure"))] == 2
    assert sboth[("loadgen_output_tokens_total", ("phase", "measure"))] == 6000
    assert sboth[("loadgen_itl_seconds_count", ("phase", "measure"))] == 4000
    # p99 from the buckets: the exact p99 lies in the bucket found (upper bound / 2**(1/8), upper bound]
    est = histogram_quantile(sboth[key], 0.99)
    exact = float(np.percentile(values, 99)) / 1e3
    assert est / 2 ** (2 / 8) <= exact <= est


def test_bucket_bounds_are_schema_3() -> None:
    ratios = BUCKET_BOUNDS_S[1:] / BUCKET_BOUNDS_S[:-1]
    assert np.allclose(ratios, 2 ** (1 / 8)) and BUCKET_BOUNDS_S[0] < 2e-4 and BUCKET_BOUNDS_S[-1] >= 120


def test_a_value_on_a_bound_counts_in_that_bucket(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    write_lines(p, [float(BUCKET_BOUNDS_S[60]) * 1e3])
    bk = scrape(exporter_text(p))[("loadgen_ttft_seconds_bucket", "measure")]
    assert bk[59][1] == 0 and bk[60][1] == 1  # le is inclusive, as Prometheus defines it


def test_the_grafana_dashboard_asks_only_for_exported_metrics(tmp_path: Path) -> None:
    import re

    dash = json.loads((Path(__file__).resolve().parents[2] / "loadgen/data/grafana_dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    asked = {m for e in exprs for m in re.findall(r"\bloadgen_[a-z0-9_]+", e)}
    p = tmp_path / "r.jsonl"
    write_lines(p, [10.0])
    exported = set(re.findall(r"^(loadgen_[a-z0-9_]+)", exporter_text(p), re.M))
    assert asked and asked <= exported, asked - exported

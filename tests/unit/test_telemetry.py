"""The live Prometheus exporter (loadgen.telemetry.prom): counts from the records, exact merge, stated precision."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from loadgen.telemetry.prom import BUCKET_BOUNDS_S, MIN_EXP, PromExporter
from tests.fixtures.promql import histogram_quantile


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
    ex.refresh()
    return ex.exposition().decode()


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

    def cum_at(buckets: list[tuple[float, float]], x: float) -> float:  # an omitted bucket holds nothing
        return max((c for le, c in buckets if le <= x), default=0.0)

    merged = [(le, cum_at(sa[key], le) + cum_at(sb[key], le)) for le, _ in sboth[key]]
    assert merged == sboth[key]  # bucket counts add: the merge is exact
    assert sboth[("loadgen_requests_total", ("phase", "measure"), ("status", "ok"))] == 2000
    assert sboth[("loadgen_errors_total", ("kind", "timeout"), ("phase", "measure"))] == 2
    assert sboth[("loadgen_output_tokens_total", ("phase", "measure"))] == 6000
    assert sboth[("loadgen_itl_seconds_count", ("phase", "measure"))] == 4000
    # p50 and p99 read back as Grafana does (histogram_quantile): within 1 % of the exact ones (issue 33)
    for q in (0.5, 0.99):
        est = histogram_quantile(sboth[key], q)
        exact = float(np.percentile(values, q * 100)) / 1e3
        assert abs(est / exact - 1) <= 0.01, (q, est, exact)
    assert len(sboth[key]) < 800  # only the buckets around the values are written (of 2,562)


def test_the_genai_client_histograms_count_from_the_send(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    d = {"index": 0, "phase": "measure", "status": "ok", "scheduled_s": 1.0, "sent_s": 1.25, "ttft_ms": 400.0,
         "e2e_ms": 900.0, "itl_ms": [5.0, 5.0], "inter_chunk_ms": [10.0], "output_tokens": 3}  # fmt: skip
    p.write_text(json.dumps(d) + "\n")
    s = scrape(exporter_text(p))

    def at(name: str) -> float:
        return histogram_quantile(s[(name + "_bucket", "measure")], 0.5)

    assert abs(at("loadgen_ttft_seconds") / 0.400 - 1) < 0.006  # from the scheduled send
    assert abs(at("gen_ai_client_operation_time_to_first_chunk_seconds") / 0.150 - 1) < 0.006  # from the send
    assert abs(at("gen_ai_client_operation_duration_seconds") / 0.650 - 1) < 0.006
    assert s[("gen_ai_client_operation_time_per_output_chunk_seconds_count", ("phase", "measure"))] == 1
    assert s[("loadgen_itl_seconds_count", ("phase", "measure"))] == 2


def test_bucket_bounds_are_schema_7() -> None:
    ratios = BUCKET_BOUNDS_S[1:] / BUCKET_BOUNDS_S[:-1]
    assert np.allclose(ratios, 2 ** (1 / 128)) and BUCKET_BOUNDS_S[0] < 2e-4 and BUCKET_BOUNDS_S[-1] >= 120
    assert BUCKET_BOUNDS_S[-MIN_EXP] == 1.0  # 2**0 is a bound: native-histogram boundaries


def test_a_value_on_a_bound_counts_in_that_bucket(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    on = float(BUCKET_BOUNDS_S[2000])
    write_lines(p, [on * 1e3])
    bk = dict(scrape(exporter_text(p))[("loadgen_ttft_seconds_bucket", "measure")])
    assert bk[float(BUCKET_BOUNDS_S[1999])] == 0 and bk[on] == 1  # le is inclusive, as Prometheus defines it
    assert len(bk) == 3  # the held bucket, the one below it, +Inf


def test_the_grafana_dashboard_asks_only_for_exported_metrics(tmp_path: Path) -> None:
    import re

    dash = json.loads((Path(__file__).resolve().parents[2] / "loadgen/data/grafana_dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    asked = {m for e in exprs for m in re.findall(r"\bloadgen_[a-z0-9_]+", e)}
    p = tmp_path / "r.jsonl"
    write_lines(p, [10.0])
    exported = set(re.findall(r"^(loadgen_[a-z0-9_]+)", exporter_text(p), re.M))
    assert asked and asked <= exported, asked - exported


def get(url: str, token: str | None = None) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_scrapes_get_the_kept_page_rendered_at_most_once_a_second(tmp_path: Path) -> None:
    # a flood of scrapes rendered the page each time: 200 scrapes/s took the client from 7 % to 70 % CPU
    p = tmp_path / "r.jsonl"
    write_lines(p, [10.0] * 5)
    with PromExporter(p, 0, refresh_s=0.05) as ex:
        first = get(ex.url)
        write_lines(p, [20.0] * 5, start=5)
        time.sleep(0.3)  # refreshed (every 50 ms) but not rendered again yet (once per second)
        codes_pages = [get(ex.url) for _ in range(50)]
        assert {c for c, _ in codes_pages} == {200} and {b for _, b in codes_pages} == {first[1]}
        deadline = time.monotonic() + 5
        while get(ex.url)[1] == first[1] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert b'loadgen_requests_total{phase="measure",status="ok"} 10' in get(ex.url)[1]
        assert ex._server is not None and ex._server.pid != os.getpid()  # served by a process of its own


def test_a_token_is_required_of_every_scrape_when_set(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    write_lines(p, [10.0])
    with PromExporter(p, 0, token="s3cret-token") as ex:
        assert get(ex.url)[0] == 401 and get(ex.url, "wrong")[0] == 401
        code, body = get(ex.url, "s3cret-token")
        assert code == 200 and b"loadgen_requests_total" in body and b"s3cret" not in body
        assert ex._server is not None
        cmdline = Path(f"/proc/{ex._server.pid}/cmdline").read_bytes()
        assert b"s3cret" not in cmdline  # the token goes on stdin, never in an argv


def test_a_non_loopback_metrics_host_needs_a_token(monkeypatch: Any) -> None:
    import click
    import pytest

    from loadgen.cli.live import metrics_token

    assert metrics_token("127.0.0.1", None) is None
    with pytest.raises(click.UsageError, match="--metrics-token-env"):
        metrics_token("0.0.0.0", None)
    monkeypatch.setenv("LG_METRICS_TOKEN", "abc")
    assert metrics_token("0.0.0.0", "LG_METRICS_TOKEN") == "abc"
    with pytest.raises(click.UsageError, match="not set"):
        metrics_token("0.0.0.0", "LG_UNSET_TOKEN_NAME")

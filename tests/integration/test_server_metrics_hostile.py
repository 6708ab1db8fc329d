"""``loadgen run --server-metrics`` against hostile /metrics pages (issue 33 item 1): the run is whole.

Before loadgen/serve/scrape.py a 0xff byte at the start of the page was a traceback and no load sent,
mid-run it lost result.json; a page that stalled made each scrape wait 10 s. Now each bad page is a
skipped scrape, counted by kind in result.json, and the run writes everything a run without it does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.fixtures.cli_proc import cli_run
from tests.fixtures.hostile_metrics import hostile_metrics_server


@pytest.mark.parametrize("page,kind", [("byte-first", "encoding"), ("byte-mid", "encoding"), ("stall", "timeout"),
                                       ("bomb", "too_large")])  # fmt: skip
def test_a_run_beside_a_hostile_metrics_page_is_whole(tmp_path: Path, sim_url: str, page: str, kind: str) -> None:
    out = tmp_path / "out"
    with hostile_metrics_server() as metrics:
        proc = cli_run("run", "--endpoint", sim_url, "--rate", "20", "--requests", "40", "--output-tokens", "3",
                       "--server-metrics", f"{metrics}/{page}", "--server-metrics-interval", "0.5s",
                       "--out", str(out))  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    res = json.loads((out / "result.json").read_text())
    assert res["counts"]["requests"] == 40
    with (out / "requests.jsonl").open() as fh:
        assert sum(1 for _ in fh) == 40
    srv = res["server"]
    assert srv["scrapes_failed"] >= 2 and srv["scrapes_failed_by_kind"].get(kind, 0) >= 2, srv
    assert srv["metrics"] is None and srv["scrape_errors"]


def test_sweep_reads_the_server_metrics_of_each_probe_and_never_resets_that_server(
    tmp_path: Path, sim_url: str
) -> None:
    """``sweep --server-metrics URL`` (issue 33 item 5): each probe's result.json has the server's section;
    a server loadgen did not start is only read: its prefix cache is never reset (``--serve`` resets its own)."""
    from loadgen.sweep.search import resets_prefix_cache

    out = tmp_path / "sw"
    proc = cli_run("sweep", "--endpoint", sim_url, "--slo", "e2e:p50<=10s", "--start-rate", "20", "--max-rate", "20",
                   "--probe-duration", "2s", "--max-probe-duration", "2s", "--calibration", "1s", "--output-tokens", "3",
                   "--server-metrics", f"{sim_url}/metrics", "--server-metrics-interval", "0.5s",
                   "--out", str(out))  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    probes = sorted(out.glob("probe-*/result.json"))
    assert probes, proc.stderr[-2000:]
    for p in probes:
        srv = json.loads(p.read_text())["server"]
        assert srv["kind"] == "vllm" and srv["metrics"]["requests_finished"] > 0, srv
    assert not resets_prefix_cache(type("Observer", (), {"server": None})())
    assert resets_prefix_cache(type("Observer", (), {"server": object()})())


def test_run_reads_a_dcgm_page_once_per_gpu(tmp_path: Path, sim_url: str) -> None:
    """``run --dcgm-metrics URL`` (issue 33 item 5) against a recorded dcgm-exporter page of one H100 split into
    seven MIG instances, whose rows each repeat the whole GPU's 400 W: result.json's gpu_dcgm reads 400 W, not
    2,800, and the energy counter's rise (mJ) once."""
    from tests.unit.test_serve_dcgm import UUID

    state = {"mj": 1e9}

    def page() -> str:
        state["mj"] += 400e3 * 0.5  # 400 W between scrapes half a second apart, about
        base = f'gpu="0",UUID="{UUID}",modelName="NVIDIA H100 80GB HBM3"'
        rows = [f'{base},GPU_I_ID="{i}",GPU_I_PROFILE="1g.10gb"' for i in range(1, 8)]
        return "".join(f"DCGM_FI_DEV_POWER_USAGE{{{r}}} 400\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{r}}} "
                       f"{state['mj']}\n" for r in rows)  # fmt: skip

    out = tmp_path / "out"
    with _page_server(page) as url:
        proc = cli_run("run", "--endpoint", sim_url, "--rate", "20", "--requests", "40", "--output-tokens", "3",
                       "--dcgm-metrics", url, "--server-metrics-interval", "0.5s", "--out", str(out))  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    g = json.loads((out / "result.json").read_text())["gpu_dcgm"]
    assert g["power_w_mean"] == 400.0 and g["gpus"][UUID]["mig_instances"] == 7, g
    # 200 J a fetch, counted once per GPU (7 x that summed the rows); a fetch cancelled at the end still counted
    assert g["scrapes"] >= 2 and (g["scrapes"] - 1) * 200.0 <= g["energy_j"] <= (g["scrapes"] + 1) * 200.0, g


def test_run_reads_an_sglang_page(tmp_path: Path, sim_url: str) -> None:
    """``run --server-metrics URL`` against an SGLang 0.4.10+ page (tensor parallel 2: each rank repeats its
    engine's gauges): result.json names the server sglang and has its token, request and TTFT figures, its
    running requests counted once per engine. Before, an SGLang page kept only three gauges' peaks."""
    state = {"n": 0}
    model = 'model_name="tiny"'

    def page() -> str:
        state["n"] += 1
        n = state["n"]
        ranks = "".join(f'sglang:num_running_reqs{{engine_type="unified",{model},tp_rank="{r}",pp_rank="0"}} 3\n'
                        for r in ("0", "1"))  # fmt: skip
        return (ranks + f"sglang:prompt_tokens_total{{{model}}} {100 * n}\n"
                f"sglang:generation_tokens_total{{{model}}} {10 * n}\nsglang:num_requests_total{{{model}}} {n}\n"
                f"sglang:time_to_first_token_seconds_sum{{{model}}} {0.05 * n}\n"
                f'sglang:time_to_first_token_seconds_bucket{{le="0.1",{model}}} {n}\n'
                f'sglang:time_to_first_token_seconds_bucket{{le="+Inf",{model}}} {n}\n'
                f"sglang:time_to_first_token_seconds_count{{{model}}} {n}\n")  # fmt: skip

    out = tmp_path / "out"
    with _page_server(page) as url:
        proc = cli_run("run", "--endpoint", sim_url, "--rate", "20", "--requests", "20", "--output-tokens", "3",
                       "--server-metrics", url, "--server-metrics-interval", "0.2s", "--out", str(out))  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    server = json.loads((out / "result.json").read_text())["server"]
    m, scrapes = server["metrics"], server["scrapes"]
    assert server["kind"] == "sglang" and scrapes >= 2, server
    # each fetch adds 100 prompt tokens, 10 generated, 1 request (a fetch that failed is not a counted scrape)
    steps = m["requests_finished"]
    assert steps >= scrapes - 1 and (m["prompt_tokens"], m["generation_tokens"]) == (100 * steps, 10 * steps), m
    assert m["requests_running_peak"] == 3 and server["gauges"]["running"]["max"] == 3, server  # not 6
    assert m["ttft_ms"]["count"] == steps and m["ttft_ms"]["mean"] == 50.0, m


@contextmanager
def _page_server(page: Callable[[], str]) -> Iterator[str]:
    """A /metrics URL on 127.0.0.1 whose every GET answers ``page()`` (a recorded exporter's page, changing)."""
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page().encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            return

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}/metrics"
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_cache_hit_target_beside_a_dcgm_page(tmp_path: Path, sim_url: str) -> None:
    """``--cache-hit-target`` with ``--dcgm-metrics`` and no ``--cache-block-size``: the block size is looked
    for on the server's page (the observer pair's, none here: the DCGM page has no server series), then
    assumed. Before, the pair had no ``scrape`` and the run ended in an AttributeError before any load."""
    out = tmp_path / "out"
    with _page_server(lambda: 'DCGM_FI_DEV_POWER_USAGE{gpu="0"} 300\n') as url:
        proc = cli_run("run", "--endpoint", sim_url, "--rate", "20", "--requests", "10", "--input-tokens", "64",
                       "--output-tokens", "2", "--cache-hit-target", "0.5", "--dcgm-metrics", url,
                       "--out", str(out))  # fmt: skip
    assert "Traceback" not in proc.stderr and "AttributeError" not in proc.stderr, proc.stderr[-2000:]
    doc = json.loads((out / "result.json").read_text())
    assert "assumed" in doc["cache_hit_target"]["block_size_source"], doc["cache_hit_target"]

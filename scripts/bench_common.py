"""Shared helpers of the benchmark scripts: run loadgen against a SimProcess, read files back."""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from loadgen.endpoints.openai import OpenAIConfig, OpenAIEndpoint
from loadgen.engine.runplan import LoadConfig
from loadgen.measurement import MeasuredRun, measure
from loadgen.sim.launch import SimProcess


def run_against(
    url: str, load: LoadConfig, out: Path, *, api: str = "completions", prefix: str = "b", http_client: str = "auto"
) -> MeasuredRun:
    """One in-process run of ``load`` against ``url`` (``http_client``: ``--http-client``), on uvloop where installed."""

    async def go() -> MeasuredRun:
        cfg = OpenAIConfig(base_url=url, api=api, request_id_prefix=prefix, http_client=http_client)  # type: ignore[arg-type]  # api: "completions" or "chat"
        ep = OpenAIEndpoint(cfg)
        await ep.open()
        try:
            return await measure(ep, load, out, install_signal_handlers=False)
        finally:
            await ep.close()

    try:
        import uvloop

        return uvloop.run(go())
    except ImportError:
        return asyncio.run(go())


def cpu_split(workers: int, enabled: bool = True) -> tuple[list[str], list[str]]:
    """``--cpus`` arguments for the simulator (the last CPU) and the client (the others), or two
    empty lists when not ``enabled`` or without a CPU per client worker plus one."""
    import os

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if not enabled or len(cpus) < workers + 1:
        return [], []
    return ["--cpus", str(cpus[-1])], ["--cpus", ",".join(map(str, cpus[:-1]))]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def pct(values: list[float], p: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=float), p)) if values else float("nan")


def median(values: list[float]) -> float:
    return statistics.median(values)


def tmpdir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


__all__ = ["SimProcess", "LoadConfig", "run_against", "read_jsonl", "pct", "median", "tmpdir"]

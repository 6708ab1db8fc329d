"""``loadgen run --cache-hit-target F``: the shared prefix sized from the block size, the cache primed, the
judge's block (:mod:`loadgen.engine.cache_target`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console

    from loadgen.cli.load_options import LoadOptions, RunOptions
    from loadgen.endpoints.base import Endpoint
    from loadgen.engine.runplan import LoadConfig
    from loadgen.serve.observe import ObserverPair, ServerObserver

__all__ = ["parse_share", "plan_cache_target"]


def parse_share(text: str, flag: str) -> float:
    """``0.6`` or ``60%`` -> 0.6 (a share from 0 to 1)."""
    t = text.strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        v = -1.0
    if not 0.0 <= v <= 1.0:
        raise click.UsageError(f"{flag} {text!r}: expected a share from 0 to 1 (0.6) or a percentage (60%)")
    return v


async def plan_cache_target(
    run: RunOptions,
    opts: LoadOptions,
    load: LoadConfig,
    endpoint: Endpoint,
    observer: ServerObserver | ObserverPair | None,  # with --dcgm-metrics a pair (its scrape: the server's page)
    err: Console,
) -> tuple[LoadConfig, dict[str, Any]]:
    """The run's configuration with its shared prefix for ``--cache-hit-target``, after priming the cache;
    and the ``cache_hit_target`` block's callable (given the result, it judges it)."""
    from loadgen.engine.cache_target import (
        DEFAULT_BLOCK,
        TOLERANCE,
        judge,
        prime,
        server_block_size,
        shared_prefix_for,
    )
    from loadgen.engine.runplan import build_workload
    from loadgen.workload.lengths import parse_length_spec
    from loadgen.workload.prompts import new_salt
    from loadgen.workload.spec import WorkloadOptions

    target = parse_share(run.cache_hit_target or "", "--cache-hit-target")
    if opts.shared_prefix_tokens or load.has_trace or (load.workload and load.workload.dataset):
        raise click.UsageError("--cache-hit-target builds its own shared prefixes: it clashes with "
                               "--shared-prefix-tokens, --trace and --dataset")  # fmt: skip
    if load.sessions is not None:
        raise click.UsageError("--cache-hit-target is for request runs (a session's history is its own prefix)")
    block, source = run.cache_block_size, "--cache-block-size"
    if block is None and observer is not None:
        block, source = server_block_size(await observer.scrape()), "the server's /metrics (vllm:cache_config_info)"
    if block is None:
        block, source = DEFAULT_BLOCK, f"assumed {DEFAULT_BLOCK} (give --cache-block-size, or --server-metrics URL)"
    mean_in = parse_length_spec(str(load.input_tokens)).mean
    prefix, planned = shared_prefix_for(target, mean_in, block)
    if prefix >= mean_in:
        raise click.UsageError(f"--cache-hit-target {target:g} with {block}-token blocks needs a shared prefix of "
                               f"{prefix} tokens: longer prompts (--input-tokens over {prefix})")  # fmt: skip
    if abs(planned - target) > TOLERANCE:
        err.print(f"[yellow]warning:[/] --cache-hit-target {target:g}: with {block}-token blocks and {mean_in:g}-token "
                  f"prompts the nearest share whole blocks give is {planned:.3f} (longer prompts come closer)")  # fmt: skip
    wl = replace(load.workload or WorkloadOptions(), shared_prefix_tokens=prefix)
    load = replace(load, workload=wl, salt=load.salt or new_salt())  # one salt: the priming's prefix is the run's
    groups = wl.prefix_groups
    primed = await prime(endpoint, build_workload(load), groups) if prefix else {"requests": 0, "ok": 0}
    err.print(f"--cache-hit-target {target:g}: {prefix}-token shared prefix in {groups} group(s) ({block}-token "
              f"blocks, {source}): {planned:.3f} of a mean {mean_in:g}-token prompt cacheable; primed with "
              f"{primed['ok']} of {primed['requests']} requests", markup=False)  # fmt: skip
    plan = {"block_size": block, "block_size_source": source, "shared_prefix_tokens": prefix,
            "prefix_groups": groups, "planned_share": round(planned, 4), "primed": primed}  # fmt: skip
    return load, {"cache_hit_target": lambda result: judge(target, plan, result)}

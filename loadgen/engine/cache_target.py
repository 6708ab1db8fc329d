"""``--cache-hit-target F``: a workload whose prompts the server's prefix cache can serve at share F, primed,
and a word on whether the target held (issue 32 item 5).

A prefix cache (vLLM's automatic prefix caching, SGLang's radix cache) serves whole KV blocks of a
prompt's leading tokens it has seen: of a prompt of ``L`` tokens whose first ``h + P`` tokens (``h`` the
template's or BOS's leading tokens, ``P`` a prefix shared by the requests of a group) are cached, it serves
``floor((h + P) / B) x B`` tokens (``B``: the block size). For a target share ``F`` of the mean prompt
length ``L``, :func:`shared_prefix_for` takes ``K = round(F x L / B)`` blocks and a shared prefix of
``P = K x B + B / 2`` tokens: mid-way into block ``K + 1``, so ``h`` up to half a block (a chat template's
header, a BOS) still gives ``K`` whole blocks. The achieved share is then ``K x B / L`` (reported beside the
target; a length spread around ``L`` spreads it).

Priming: before the run, one request per prefix group (a part of its own after the group's prefix, never a
measured request's) is sent and awaited (:func:`prime`), outside the run's window and its records, so the
run's first request of each group is not the miss that fills the cache.

Judged (:func:`judge`) against the measured requests: the client's share (Σ cached prompt tokens / Σ
prompt tokens over the requests whose usage reported ``cached_tokens``) and, where the server's counters
were read, theirs (Δhits / Δqueries over the run's window: priming excluded). The target held when each
measured share is within :data:`TOLERANCE` of ``F``; a client and a server share further apart than that
are flagged (traffic from elsewhere, or an engine not counted).
"""

from __future__ import annotations

import math
from typing import Any

from loadgen.core.types import RequestRecord
from loadgen.endpoints.base import Endpoint
from loadgen.workload.spec import Workload

__all__ = ["DEFAULT_BLOCK", "TOLERANCE", "judge", "prime", "server_block_size", "shared_prefix_for"]

TOLERANCE = 0.05
"""A measured hit share within this of the target (absolute: 5 points) meets it."""
DEFAULT_BLOCK = 16
"""The block size assumed when neither ``--cache-block-size`` nor the server says (vLLM's default on GPUs)."""


def shared_prefix_for(target: float, mean_input_tokens: float, block: int) -> tuple[int, float]:
    """(shared prefix tokens ``P``, the share it makes cacheable ``K x B / L``) for ``target`` (module doc)."""
    k = max(0, round(target * mean_input_tokens / block))
    if k == 0:
        return 0, 0.0
    return k * block + block // 2, min(k * block / mean_input_tokens, 1.0)


def server_block_size(scrape: dict[str, Any] | None) -> int | None:
    """The KV block size a vLLM page states (``vllm:cache_config_info{block_size="..."}``); None when not."""
    for labels, _ in (scrape or {}).get("vllm:cache_config_info", []):
        v = dict(labels).get("block_size")
        if v and v.isdigit() and int(v) > 0:
            return int(v)
    return None


async def prime(endpoint: Endpoint, workload: Workload, groups: int) -> dict[str, Any]:
    """One request per prefix group, sent one after the other and awaited (module doc); what came of them."""
    ok = 0
    errors: dict[str, int] = {}
    for g in range(groups):
        spec = workload.prime_spec(g, index=-1 - g)
        rec = RequestRecord(index=spec.index, phase="warmup", scheduled_ns=0)
        try:
            await endpoint.send(spec, rec)
        except Exception as exc:  # a failed priming request is a word in the result, never the run's end
            rec.status, rec.error_kind = "error", rec.error_kind or type(exc).__name__
        if rec.ok:
            ok += 1
        else:
            errors[rec.error_kind or "error"] = errors.get(rec.error_kind or "error", 0) + 1
    return {"requests": groups, "ok": ok, **({"errors": errors} if errors else {})}


def judge(target: float, plan: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """The ``cache_hit_target`` block of ``result.json``: the plan (``plan``: block, prefix, primed) and what the
    measured requests achieved, client and server side, and whether the target held."""
    tok = result.get("tokens") or {}
    client = tok.get("cached_input_rate")
    metrics = ((result.get("server") or {}).get("metrics")) or {}
    server = metrics.get("prefix_cache_hit_rate")
    out: dict[str, Any] = {"target": target, "tolerance": TOLERANCE, **plan, "achieved_client": client}
    if server is not None:
        out["achieved_server"] = server
    shares = [x for x in (client, server) if isinstance(x, int | float)]
    if not shares:
        out["held"] = None
        out["why"] = ("no share measured: the server reported no usage.prompt_tokens_details.cached_tokens and "
                      "its counters were not read (--server-metrics URL)")  # fmt: skip
    else:
        out["held"] = all(abs(x - target) <= TOLERANCE for x in shares)
    if client is not None and server is not None and abs(client - server) > TOLERANCE:
        out["client_server_disagree"] = (
            f"the client's share {client:.3f} and the server counters' {server:.3f} differ by more than "
            f"{TOLERANCE:.2f}: traffic from elsewhere, or an engine the page does not count"
        )
    if not math.isfinite(target):
        out["held"] = None
    return out

"""One run spread over workers, as both ways of spreading it take it: local processes
(:func:`loadgen.spread.workers.run_workers`) and Ray actors (:meth:`loadgen.spread.cluster.Cluster.run`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loadgen.core.redact import Redactor
    from loadgen.engine.results import Aggregator
    from loadgen.engine.runner import RunPlan
    from loadgen.engine.runplan import LoadConfig

__all__ = ["SpreadJob"]


@dataclass(frozen=True)
class SpreadJob:
    """Run ``load`` over ``n`` workers, each building its endpoint from ``ep_cfg`` (picklable:
    ``Endpoint.worker_config``) and its shard of ``plan``; aggregate into ``agg``, write each record's line
    to ``fh`` as it arrives; ``redactor`` scrubs what the workers report. ``on_record`` and ``on_summary``
    see each finished request, as in a run in one process."""

    n: int
    ep_cfg: object
    load: LoadConfig
    plan: RunPlan
    agg: Aggregator
    fh: IO[bytes]
    redactor: Redactor
    on_record: Callable[[Any, Any], None] | None = None
    on_summary: Callable[[Any], None] | None = None

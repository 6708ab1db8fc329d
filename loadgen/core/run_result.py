"""The run result in memory: :class:`RunResult`, one field per top-level block of ``result.json``.

The engine builds the body as a dict (:func:`loadgen.measurement.build_result`, then the blocks the run
adds) and writes ``result.json`` from it; :class:`RunResult` is that same body, converted once and passed
in memory to the sweep, the report and the plan: nothing written by this process is read back. The
fields are the schema's top-level properties (docs/schemas/result.schema.json, version
:data:`loadgen.core.contract.RESULT_SCHEMA_VERSION`; a test holds the two together). A block the run did not
write is :data:`msgspec.UNSET` (left out of :meth:`RunResult.to_dict`), not ``None``: a block written as
``null`` stays ``null``. An unknown top-level key is refused (:class:`msgspec.ValidationError`) rather
than dropped: a new block gets a field and a schema property, with a note in docs/schemas/CHANGES.md.

Inside a block, keys and units are those of the schema (``throughput`` rates over ``window``, ``_ms``
latencies, ...); the blocks themselves stay JSON objects (``dict``), read by the renderers as written.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

Block = dict[str, Any]


class RunResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``result.json`` of one measured run, block by block (their schema: docs/schemas/result.schema.json)."""

    schema_version: int
    loadgen_version: str
    started_at: str  # ISO 8601, UTC, the run's start on the wall clock
    interrupted: bool
    config: Block
    conditions: Block
    duration_s: float | None  # first measured scheduled send to last completion, drain included
    window: Block | None  # the measurement window (loadgen.core.window), seconds from t0
    counts: Block
    tokens: Block
    throughput: Block  # every rate over ``window`` but the ``*_incl_drain`` ones
    latency_ms: Block
    validity: Block
    client: Block
    # written by every run of this version; UNSET in an older version's file (the schema's ``required``)
    records_schema_version: int | UnsetType = UNSET
    server_kept_up: Block | None | UnsetType = UNSET  # None: not judged (sessions)
    latency_error_ms: Block | None | UnsetType = UNSET
    # blocks a run writes only when they apply
    abandon: Block | UnsetType = UNSET
    slo: Block | UnsetType = UNSET
    cost: Block | UnsetType = UNSET
    network_ms: Block | UnsetType = UNSET
    rate_limit: Block | UnsetType = UNSET
    client_rate_cap: Block | UnsetType = UNSET
    server: Block | None | UnsetType = UNSET
    energy: Block | None | UnsetType = UNSET
    gpu_dcgm: Block | None | UnsetType = UNSET
    timeseries: Block | None | UnsetType = UNSET
    why: Block | None | UnsetType = UNSET
    max_throughput: Block | None | UnsetType = UNSET
    sessions: Block | UnsetType = UNSET
    stages: list[Block] | UnsetType = UNSET
    by_model: Block | UnsetType = UNSET
    cache_hit_target: Block | UnsetType = UNSET
    locust: Block | UnsetType = UNSET

    @classmethod
    def from_dict(cls, body: dict[str, Any]) -> RunResult:
        """The result body as the engine built it (and wrote it to ``result.json``)."""
        return msgspec.convert(body, cls, strict=False)

    def to_dict(self) -> dict[str, Any]:
        """The body again, as ``result.json`` holds it (the blocks not written left out)."""
        return {f: v for f in self.__struct_fields__ if (v := getattr(self, f)) is not UNSET}

    @property
    def valid(self) -> bool:
        """``validity.valid``: the VALID/INVALID verdict (loadgen.engine.validity)."""
        return bool(self.validity["valid"])

    @property
    def request_rps(self) -> float | None:
        """``throughput.request_rps``: completed requests a second over ``window``."""
        v = self.throughput.get("request_rps")
        return None if v is None else float(v)

    def block(self, name: str) -> Any:
        """A block by its key, ``None`` where the run did not write it (for code that takes the key as data)."""
        v = getattr(self, name, None)
        return None if v is UNSET else v

"""The result files are a versioned contract: ``result.json``, ``sweep.json`` and ``requests.jsonl``.

Each kind of file has a schema version (an integer), a published JSON Schema
(``docs/schemas/<kind>.schema.json``) and a note per version (``docs/schemas/CHANGES.md``). Any
change to what a file holds bumps its version, with its note; a renamed key is written under both
names for the versions that :data:`DEPRECATED_KEYS` states. ``result.json`` and ``sweep.json`` carry
their ``schema_version``; ``requests.jsonl`` lines carry none (one version a file): its version is
``result.json``'s ``records_schema_version`` (absent before version 2: then 1).

Readers of files written earlier (``loadgen compare``, ``loadgen plan`` / ``capacity``) call
:func:`check_version`: a version this loadgen reads (:data:`READS`) is read; a newer one, or a file
that is not of that kind, is refused in one line naming the file and what would read it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import orjson

from loadgen.core.errors import InputFileError

__all__ = [
    "DEPRECATED_KEYS",
    "PEER_TOOLS",
    "READS",
    "RECORDS_SCHEMA_VERSION",
    "RESULT_SCHEMA_VERSION",
    "SWEEP_SCHEMA_VERSION",
    "check_version",
    "load_versioned",
    "read_json",
    "peer_format",
    "records_version",
]

RESULT_SCHEMA_VERSION = 6
"""``result.json``: 2 adds ``records_schema_version``, ``config.header_timeout`` and, for session runs,
``timeseries`` and ``why``, ``server_kept_up``, the client's ``timing_error_bound_ms``, ``validity.verdict_stands``
and ``latency_error_ms``; 3 the server figures of SGLang and TGI pages, the sessions' tool calls and turn cap,
active sessions over time, the prefix-cache hit share and ``cache_hit_target``; 4 ``client.preparation``;
5 the token-deadline target's ``late_tokens``, ``judged_tokens`` and ``late_token_share``, ``stages`` and ``abandon``;
6 ``counts.lost_with_client`` (docs/schemas/CHANGES.md)."""
SWEEP_SCHEMA_VERSION = 4
"""``sweep.json``: 2 adds each probe's ``tpot_p50_ms``, ``by_turn``, ``prefix_cache_hit_rate`` and ``client_timing``;
3 ``client_selftest`` (``--selftest``); 4 ``resumed`` (``--resume``)."""
RECORDS_SCHEMA_VERSION = 3
"""``requests.jsonl``: 2 adds the error kind ``header_timeout``; 3 the error kind ``abandoned``."""

READS: dict[str, tuple[int, int]] = {"result": (1, 6), "sweep": (1, 4), "records": (1, 3)}
"""The versions of each kind this loadgen reads (lowest, highest)."""

DEPRECATED_KEYS: dict[str, dict[str, str]] = {"result": {}, "sweep": {}, "records": {}}
"""Per kind, an old key -> its new name, written under both names until the version its note names."""

_MARKS = {"result": ("counts", "latency_ms"), "sweep": ("answer", "probes")}


PEER_TOOLS = {"vllm-bench": "vllm bench serve", "guidellm": "GuideLLM", "aiperf": "AIPerf"}
"""The peers' result formats ``loadgen compare`` reads (:mod:`loadgen.report.peers`), by the tool's name."""


def peer_format(doc: object) -> str | None:
    """The peer tool whose result file ``doc`` (parsed JSON) is (a key of :data:`PEER_TOOLS`), or None."""
    if not isinstance(doc, dict):
        return None
    if "aiperf_version" in doc or (isinstance(doc.get("time_to_first_token"), dict) and "request_throughput" in doc):
        return "aiperf"
    meta = doc.get("metadata")
    if isinstance(doc.get("benchmarks"), list) and (
        (isinstance(meta, dict) and "guidellm_version" in meta)
        or any(isinstance(b, dict) and b.get("type_") == "generative_benchmark" for b in doc["benchmarks"])
    ):
        return "guidellm"
    if "backend" in doc and "num_prompts" in doc and any(str(k).endswith("_ttft_ms") for k in doc):
        return "vllm-bench"
    return None


def check_version(doc: Any, kind: str, path: object) -> int:
    """The schema version of ``doc``, a ``kind`` (``"result"`` or ``"sweep"``) file read from ``path``.

    Raises InputFileError, one line naming ``path``: not a JSON object, not a file of that kind (none of
    its marking keys), or a version newer than :data:`READS` allows (written by a newer loadgen).
    A file without ``schema_version`` but with the kind's keys is version 1 (the first files had it
    always; a hand-edited one may not)."""
    lo, hi = READS[kind]
    where = str(path)
    if not isinstance(doc, dict):
        raise InputFileError(where, None, None, f"not a loadgen {kind}.json (not a JSON object)")
    v = doc.get("schema_version")
    if v is None:
        peer = peer_format(doc)
        if peer is not None:
            raise InputFileError(
                where, None, None,
                f"a {PEER_TOOLS[peer]} result file, not a loadgen {kind}.json: `loadgen compare` shows it beside "
                "loadgen's results (its own figures, each definition that differs named)",
            )  # fmt: skip
        if not all(k in doc for k in _MARKS[kind]):
            keys = " or ".join(_MARKS[kind])
            raise InputFileError(where, None, None, f"not a loadgen {kind}.json (no schema_version, no {keys})")
        return 1
    if not isinstance(v, int) or isinstance(v, bool):
        raise InputFileError(where, None, "schema_version", f"{v!r} is not a whole number")
    if v > hi:
        raise InputFileError(
            where, None, "schema_version",
            f"version {v}, written by a newer loadgen; this one reads {kind}.json versions {lo} to {hi} "
            "(upgrade loadgen to read it)",
        )  # fmt: skip
    if v < lo:
        raise InputFileError(
            where, None, "schema_version", f"version {v}, older than this loadgen reads ({lo} to {hi})"
        )
    return v


def records_version(result: dict[str, Any]) -> int:
    """The schema version of the ``requests.jsonl`` beside ``result`` (its ``result.json``)."""
    v = result.get("records_schema_version")
    return v if isinstance(v, int) and not isinstance(v, bool) else 1


def load_versioned(path: Path, kind: str) -> dict[str, Any]:
    """A ``kind`` file (``"result"`` or ``"sweep"``) read from ``path`` and checked (:func:`check_version`).

    Raises InputFileError, one line naming ``path``: missing, not valid JSON, or not such a file."""
    doc = read_json(path)
    check_version(doc, kind, path)
    return cast("dict[str, Any]", doc)  # check_version refused anything but an object


def read_json(path: Path) -> object:
    """The JSON document in ``path``. Raises InputFileError naming ``path``: missing or not valid JSON."""
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise InputFileError(str(path), None, None, "no such file") from None
    except orjson.JSONDecodeError as exc:
        raise InputFileError(str(path), None, None, f"not valid JSON ({exc})") from None

"""Every file a run writes: ``requests.jsonl``, ``requests.csv``, ``result.json``, ``histograms.hlog``, the out dir.

``requests.jsonl``: one line per finished request, written (and flushed) as it finishes.
A crash or Ctrl-C loses nothing already measured. JSON files are written atomically
(``write_json``); the HdrHistogram log after the run (``write_hlog``). Times are seconds from the
run's t0 (``scheduled_s``, ``sent_s``) or milliseconds (``*_ms``).
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

from loadgen.core.metrics import RequestMetrics
from loadgen.core.redact import Redactor
from loadgen.core.types import RequestRecord
from loadgen.engine.summary import network_ns

if TYPE_CHECKING:
    from loadgen.engine.results import Aggregator
    from loadgen.engine.runner import RunOutcome


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v / 1e6, 6)


def record_line(
    rec: RequestRecord,
    m: RequestMetrics,
    t0_ns: int,
    *,
    save_text: bool = False,
    token_lists: bool = True,
) -> dict[str, Any]:
    """The JSON object written for one request (schema in docs/architecture.md)."""
    d: dict[str, Any] = {
        "index": rec.index,
        "phase": rec.phase,
        "scheduled_s": round((rec.scheduled_ns - t0_ns) / 1e9, 9),
        "sent_s": None if rec.sent_ns is None else round((rec.sent_ns - t0_ns) / 1e9, 9),
        "status": rec.status,
        "error_kind": rec.error_kind,
        "error_detail": rec.error_detail,
        "http_status": rec.http_status,
        "retry_after_s": rec.retry_after_s,
        "ttft_ms": _ms(m.ttft_ns),
        "time_to_first_answer_token_ms": _ms(m.time_to_first_answer_token_ns),
        "tpot_ms": _ms(m.tpot_ns),
        "e2e_ms": _ms(m.e2e_ns),
        "error_e2e_ms": _ms(m.error_e2e_ns),
        "schedule_lag_ms": _ms(m.schedule_lag_ns),
        "connect_ms": _ms(rec.connect_ns) if rec.connect_ns else 0.0,
        "requested_input_tokens": rec.requested_input_tokens,
        "requested_output_tokens": rec.requested_output_tokens,
        "input_tokens": rec.prompt_tokens,
        "output_tokens": m.output_tokens,
        "output_tokens_estimated": m.output_tokens_estimated,
        "itl_estimated": m.itl_estimated,
        "finish_reason": rec.finish_reason,
        "chunks": len(rec.events),
    }
    if rec.reasoning_tokens is not None:
        d["reasoning_tokens"] = rec.reasoning_tokens
    _provider_keys(d, rec, t0_ns)
    if rec.prefix_group is not None:
        d["prefix_group"] = rec.prefix_group
    if rec.session_id is not None:
        d["session_id"] = rec.session_id
    if rec.replica is not None:  # --endpoint given several times (loadgen.endpoints.balance)
        d["replica"] = rec.replica
    if rec.model is not None:  # --model a=0.7,b=0.3: the model of the mix it went to
        d["model"] = rec.model
    if token_lists:
        ic = _ms_list(m.inter_chunk_ns)
        d["itl_ms"] = ic if m.itl_ns == m.inter_chunk_ns else _ms_list(m.itl_ns)  # one token a chunk: equal
        d["inter_chunk_ms"] = ic
    if save_text:
        d["output_text"] = rec.text
    return d


def _ms_list(values_ns: list[int] | list[float]) -> list[float]:
    """Per-token values in ms at ns resolution, each as ``round(v / 1e6, 6)``: for a whole number
    of ns (an int below 2**53) ``v / 1e6`` already is the double nearest that 6-decimal value, so
    only the others are rounded (8x cheaper a token: 256 a record)."""
    return [v / 1e6 if type(v) is int else round(v / 1e6, 6) for v in values_ns]


def _s(t_ns: int | None, t0_ns: int) -> float | None:
    return None if t_ns is None else round((t_ns - t0_ns) / 1e9, 9)


def _provider_keys(d: dict[str, Any], rec: RequestRecord, t0_ns: int) -> None:
    """Network, quota and retry facts: present only when observed (keeps lines short).

    ``connection_reused``; ``dns_ms``/``tcp_connect_ms``/``tls_ms`` of a new
    connection; ``time_to_headers_ms`` and ``ttft_from_sent_ms`` (from the last
    attempt's send: without connection set-up); ``buffered``; ``ratelimit`` (the
    response's quota headers); ``throttle_ms`` (waited for the client's cap);
    ``attempts`` (earlier 429 answers, times in s from t0); ``cached_input_tokens``.
    """
    d["connection_reused"] = rec.connection_reused
    dns, tcp, tls, headers, ttft_sent = network_ns(rec)
    for key, v in (
        ("dns_ms", dns),
        ("tcp_connect_ms", tcp),
        ("tls_ms", tls),
        ("time_to_headers_ms", headers),
        ("ttft_from_sent_ms", ttft_sent),
    ):
        if v is not None:
            d[key] = _ms(v)
    if rec.buffered:
        d["buffered"] = True
    if rec.ratelimit:
        d["ratelimit"] = rec.ratelimit
    if rec.throttle_ns:
        d["throttle_ms"] = _ms(rec.throttle_ns)
    if rec.attempts:
        d["attempts"] = [
            {
                "sent_s": _s(a.get("sent_ns"), t0_ns),
                "end_s": _s(a.get("end_ns"), t0_ns),
                "http_status": a.get("http_status"),
                "retry_after_s": a.get("retry_after_s"),
                "waited_s": round(a.get("waited_ns", 0) / 1e9, 6),
                **({"ratelimit": a["ratelimit"]} if a.get("ratelimit") else {}),
            }
            for a in rec.attempts
        ]
    if rec.cached_prompt_tokens is not None:
        d["cached_input_tokens"] = rec.cached_prompt_tokens


@dataclass(eq=False)
class RecordWriter:
    """Appends one JSON line per request to an open binary file (unbuffered: ``open(path, "wb",
    buffering=0)``, so no half line waits in a buffer to fail again at close) and flushes it.

    A failed write (``ENOSPC``, ``EIO``, a removed directory) does not escape: the file is cut back
    to its last whole line, :attr:`error` says what happened, ``on_error`` is called once (the run
    stops sending) and later records are counted in :attr:`lost`, not written.
    """

    fh: IO[bytes]
    t0_ns: int
    _: KW_ONLY
    save_text: bool
    token_lists: bool
    redactor: Redactor
    on_error: Callable[[str], None] | None = None
    lines: int = field(default=0, init=False)
    good_bytes: int = field(default=0, init=False)  # the file's length after its last whole line
    error: str | None = field(default=None, init=False)
    lost: int = field(default=0, init=False)

    def write(self, rec: RequestRecord, m: RequestMetrics, turn: int | None = None) -> None:
        """One request's line (:func:`record_line`; a session's turn adds ``turn``, its 0-based index)."""
        d = record_line(rec, m, self.t0_ns, save_text=self.save_text, token_lists=self.token_lists)
        if turn is not None:
            d["turn"] = turn
        if d["error_detail"] and self.redactor:
            d["error_detail"] = self.redactor(d["error_detail"])
        self.write_line(orjson.dumps(d) + b"\n")

    def write_line(self, line: bytes) -> None:
        """Append one whole line (ending in a newline), or count it lost after a failure."""
        if self.error is not None:
            self.lost += 1
            return
        try:
            view = memoryview(line)
            while view:  # an unbuffered file may take part of a line (a filling disk)
                n = self.fh.write(view)
                view = view[n if n is not None else len(view) :]
            self.fh.flush()
        except OSError as exc:
            self._failed(exc)
            return
        self.good_bytes += len(line)
        self.lines += 1

    def _failed(self, exc: OSError) -> None:
        name = getattr(self.fh, "name", "requests.jsonl")
        self.error = f"writing {name} failed: {exc.strerror or exc}"
        self.lost += 1
        try:  # drop what the failed write left half done; a whole line is never cut
            self.fh.truncate(self.good_bytes)
        except (OSError, ValueError):
            pass
        if self.on_error is not None:
            self.on_error(self.error)


CSV_COLUMNS = (
    "index", "phase", "scheduled_s", "sent_s", "status", "error_kind", "error_detail", "http_status", "retry_after_s",
    "ttft_ms", "time_to_first_answer_token_ms", "tpot_ms", "e2e_ms", "error_e2e_ms", "schedule_lag_ms", "connect_ms",
    "requested_input_tokens", "requested_output_tokens", "input_tokens", "output_tokens", "output_tokens_estimated",
    "itl_estimated", "finish_reason", "chunks", "reasoning_tokens", "cached_input_tokens", "connection_reused",
    "dns_ms", "tcp_connect_ms", "tls_ms", "time_to_headers_ms", "ttft_from_sent_ms", "buffered", "throttle_ms",
    "prefix_group", "session_id", "replica", "attempts", "output_text",
)  # fmt: skip
"""Columns of ``requests.csv``: the scalar fields of a ``requests.jsonl`` line (:func:`record_line`), in its
order; ``attempts`` is the count of earlier 429 answers. The per-token lists (``itl_ms``,
``inter_chunk_ms``) and the ``ratelimit`` headers stay in ``requests.jsonl`` only."""


def write_requests_csv(jsonl: Path, csv_path: Path) -> int:
    """``requests.csv`` beside ``requests.jsonl``: one row per line (columns :data:`CSV_COLUMNS`), read
    and written line by line (bounded memory). An empty cell is a field the line does not have (or null);
    booleans are ``true``/``false``. Returns the rows written; nothing is written without the JSONL."""
    import csv

    if not jsonl.exists():
        return 0
    n = 0
    tmp = csv_path.with_suffix(csv_path.suffix + f".tmp{os.getpid()}")
    with open(jsonl, "rb") as src, open(tmp, "w", newline="", encoding="utf-8") as dst:
        w = csv.writer(dst)
        w.writerow(CSV_COLUMNS)
        for raw in src:
            if not raw.strip():
                continue
            d = orjson.loads(raw)
            if isinstance(d.get("attempts"), list):
                d["attempts"] = len(d["attempts"])
            w.writerow(["" if (v := d.get(c)) is None else ("true" if v is True else "false" if v is False else v)
                        for c in CSV_COLUMNS])  # fmt: skip
            n += 1
    os.replace(tmp, csv_path)
    return n


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (temp file + rename), so a reader never sees half a file."""
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_bytes(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    os.replace(tmp, path)


def write_hlog(
    path: Path,
    agg: Aggregator,
    outcome: RunOutcome,
    records: Path | None = None,
    origin: str = "scheduled",
    timeseries: dict[str, Any] | None = None,
) -> None:
    """The run's HdrHistogram logs (V1.3 text, values in µs; :mod:`loadgen.engine.hlog`): ``path`` the
    interval log of ``records`` (on ``timeseries``' intervals, or the series of ``records`` itself), and
    ``histograms_run.hlog`` beside it, one line per metric for the whole run. Without records,
    ``path`` holds the whole run."""
    from loadgen.engine.hlog import write_interval_hlog, write_run_hlog

    start_s = outcome.t0_wall_ns / 1e9
    span_s = max(outcome.end_ns - outcome.t0_ns, 0) / 1e9
    write_run_hlog(path.with_name("histograms_run.hlog"), agg.hist, start_s, span_s)
    if records is None or not records.exists():
        write_run_hlog(path, agg.hist, start_s, span_s)
        return
    if timeseries is None:
        from loadgen.engine.timeseries import series

        timeseries = series(records, origin)
    write_interval_hlog(path, records, origin, start_s, timeseries)


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def default_out_dir(kind: str = "") -> Path:
    """``results/<UTC time>[-kind]``: where a command writes when ``--out`` is not given."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path("results") / (stamp + (f"-{kind}" if kind else ""))

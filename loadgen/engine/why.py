"""Why requests missed their SLO: each miss attributed to the phase that dominated it.

Built after the run from ``requests.jsonl`` (the per-request records, written as requests
finish: :mod:`loadgen.engine.recordlog`), so it costs the run nothing and needs nothing a real
server does not expose: the client's own timestamps and the stream. Measured requests only.

**Phases of one request** (ms; each from one record line; the latency origin is the scheduled
send, so a request's TTFT is the sum of the first seven; with ``--latency-origin sent`` the
three client phases are outside the value and count as 0):

* ``schedule_lag`` -- the generator was late: ``schedule_lag_ms`` (sent - scheduled) less the
  two client-side phases below (the send loop itself fell behind);
* ``client_cap`` -- waited for the client's own cap (``--max-concurrency``, ``--max-rpm``,
  ``--max-tpm``): ``min(throttle_ms, schedule_lag_ms)``;
* ``connect`` -- connection set-up (DNS, TCP, TLS) after the scheduled time:
  ``min(connect_ms, schedule_lag_ms - client_cap)`` (a new connection opens right before
  the send, so its late part is at most the lag left);
* ``rate_limit`` -- answered HTTP 429 and waited (``--retry-429``): the earlier attempts'
  send-to-answer times plus their advised waits, ``sum(end_s - sent_s + waited_s)``;
* ``queueing`` (**inferred**) -- server queueing: ``max(0, ttft_from_sent_ms - unloaded)``,
  where ``unloaded`` is the unloaded server TTFT (time from the last send to the first token,
  network included): in a sweep the median of its unloaded check's (:func:`unloaded_ttft_ms`),
  else the :data:`UNLOADED_PERCENTILE`-th percentile of the run's own ``ttft_from_sent_ms``
  (warm-up included). Servers such as vLLM and SGLang answer the headers before scheduling a
  request, so the time to the headers cannot show the queue: it is inferred from the TTFT over
  the unloaded TTFT;
* ``prefill`` -- the rest of the server's time to first token, network included:
  ``ttft_from_sent_ms - queueing``; a **buffered** stream (``buffered``: its tokens came in
  one burst) has its excess over the unloaded TTFT as ``buffering`` instead of ``queueing``;
* ``decode_stall`` -- the longest wait between two arrivals of tokens beyond the run's typical
  one: ``max(0, max(inter_chunk_ms) - typical_gap)``, ``typical_gap`` the median of the sent
  requests' median inter-chunk gap (wall-clock gaps: a stall before a chunk of k tokens is not
  divided by k, as per-token ITL is). Without ``inter_chunk_ms`` (``--no-token-lists``) there
  is no stall to see;
* ``decode`` -- the rest of the decode: ``e2e_ms - ttft_ms - decode_stall`` (E2E), or
  ``(n - 1) * max(0, tpot_ms - typical_itl) - decode_stall`` (TPOT, ITL: the excess over a
  typical decode), ``typical_itl`` the median of the sent requests' median ITL; for a stall
  target (the longest gap, :mod:`loadgen.core.slo`) the typical gap, ``min(typical_gap, longest gap)``.

**A miss** of target ``t`` is a request whose :func:`loadgen.core.slo.request_value` exceeds
``t``'s threshold (:func:`loadgen.core.slo.exceeds`; failures count as misses, as in the verdict).
**The cause** of a miss is the phase with the largest share of the missed value: for TTFT
(and time to first answer token, whose part after the first token is ``decode``) the seven
TTFT phases; for E2E those and the two decode phases; for TPOT and ITL the two decode
phases. A failed request's cause is its error: ``rate_limit`` for HTTP 429
(``rate_limited``), else ``error:<kind>``; a request that ended with no output is
``no_output``. Ties go to the earlier phase in :data:`PHASES`. A request cancelled in flight
(a probe's early stop) is a miss only when known to be one, as the probe judge counts it;
its server time so far stands for its server TTFT; otherwise it is ``censored`` (not judged).

Summary per target (``result.json`` ``why``, ``sweep.json`` ``probes[i].why``): misses and
judged requests, misses per cause (most first), each phase's share of the missed requests'
summed phase time, and one sentence ("23 of 765 missed ttft:p99<=300ms: 19 server queueing
(inferred), 3 decode stall, 1 connection set-up").
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from loadgen.core.metrics import RequestMetrics
from loadgen.core.slo import SLOTarget, exceeds, request_value

__all__ = [
    "PHASES",
    "PHASE_WORDS",
    "UNLOADED_PERCENTILE",
    "Baseline",
    "attribute",
    "baseline",
    "sweep_why",
    "unloaded_ttft_ms",
    "why",
    "why_of_dirs",
]

PHASES: tuple[str, ...] = (
    "schedule_lag",
    "client_cap",
    "connect",
    "rate_limit",
    "queueing",
    "buffering",
    "prefill",
    "decode_stall",
    "decode",
)
"""The phases a miss is attributed to, in tie-break order (see the module docstring)."""

PHASE_WORDS: dict[str, str] = {
    "schedule_lag": "generator late (schedule lag)",
    "client_cap": "client cap",
    "connect": "connection set-up",
    "rate_limit": "rate limiting (429)",
    "queueing": "server queueing (inferred)",
    "buffering": "buffering",
    "prefill": "prefill",
    "decode_stall": "decode stall",
    "decode": "decode",
    "no_output": "no output",
}
"""How each cause is written for a reader."""

UNLOADED_PERCENTILE = 1.0
"""Without a measured unloaded TTFT, this percentile of the run's own server TTFT (warm-up
included: its first requests meet an idle server) stands for it."""

_TTFT_PHASES = PHASES[:7]
_DECODE_PHASES = ("decode_stall", "decode")


def _lines(paths: Iterable[Path]) -> Iterator[dict[str, Any]]:
    """The parsed lines of ``paths`` (missing files skipped), handing the interpreter over every 32 lines.

    The live view reads finished probes while the next one sends: it must never hold the
    interpreter long (see :mod:`loadgen.telemetry.tail`).
    """
    for path in paths:
        try:
            fh = open(path, "rb")
        except OSError:
            continue
        with fh:
            for k, raw in enumerate(fh):
                if k % 32 == 31:
                    time.sleep(0)
                if raw.strip():
                    try:
                        yield orjson.loads(raw)
                    except orjson.JSONDecodeError:
                        continue  # a torn last line of an interrupted run


def _f(d: dict[str, Any], key: str) -> float:
    v = d.get(key)
    return float(v) if isinstance(v, int | float) else 0.0


class Baseline:
    """The run's unloaded server TTFT and typical ITL (ms), against which excesses are measured."""

    __slots__ = ("gap_ms", "itl_ms", "source", "ttft_ms")

    def __init__(self, ttft_ms: float, itl_ms: float, source: str, gap_ms: float | None = None) -> None:
        self.ttft_ms = ttft_ms
        self.itl_ms = itl_ms
        self.gap_ms = itl_ms if gap_ms is None else gap_ms
        self.source = source

    def to_json(self) -> dict[str, Any]:
        return {
            "unloaded_ttft_ms": round(self.ttft_ms, 3),
            "typical_itl_ms": round(self.itl_ms, 3),
            "typical_gap_ms": round(self.gap_ms, 3),
            "source": self.source,
        }


def baseline(lines: Sequence[dict[str, Any]], unloaded_ttft_ms: float | None = None) -> Baseline:
    """The :class:`Baseline` of sent request ``lines``, warm-up included (the rule: the module docstring)."""
    ok = [d for d in lines if d.get("status") == "ok"]
    server = [float(d["ttft_from_sent_ms"]) for d in ok if d.get("ttft_from_sent_ms") is not None]
    itl = [float(np.median(d["itl_ms"])) for d in ok if d.get("itl_ms")]
    gap = [float(np.median(d["inter_chunk_ms"])) for d in ok if d.get("inter_chunk_ms")]
    if unloaded_ttft_ms is not None:
        ttft, source = unloaded_ttft_ms, "unloaded check"
    else:
        ttft = float(np.percentile(server, UNLOADED_PERCENTILE)) if server else 0.0
        source = f"p{UNLOADED_PERCENTILE:g} of this run's server TTFT"
    itl_ms = float(np.median(itl)) if itl else 0.0
    return Baseline(ttft, itl_ms, source, float(np.median(gap)) if gap else itl_ms)


def phases(d: dict[str, Any], base: Baseline, origin: str = "scheduled") -> dict[str, float]:
    """One request line's phase times in ms (every key of :data:`PHASES`; see the module docstring)."""
    out = dict.fromkeys(PHASES, 0.0)
    if origin != "sent":
        lag = max(_f(d, "schedule_lag_ms"), 0.0)
        cap = min(_f(d, "throttle_ms"), lag)
        conn = min(_f(d, "connect_ms"), lag - cap)
        out["client_cap"], out["connect"], out["schedule_lag"] = cap, conn, lag - cap - conn
    for a in d.get("attempts") or ():
        sent, end = a.get("sent_s"), a.get("end_s")
        span = (end - sent) if isinstance(sent, int | float) and isinstance(end, int | float) else 0.0
        out["rate_limit"] += max(span, 0.0) * 1e3 + max(float(a.get("waited_s") or 0.0), 0.0) * 1e3
    server = d.get("ttft_from_sent_ms")
    if server is not None:
        excess = max(float(server) - base.ttft_ms, 0.0)
        out["buffering" if d.get("buffered") else "queueing"] = excess
        out["prefill"] = float(server) - excess
    gaps = d.get("inter_chunk_ms") or ()
    if gaps:
        out["decode_stall"] = max(max(gaps) - base.gap_ms, 0.0)
    return out


def _decode_ms(d: dict[str, Any], metric: str, ph: dict[str, float], base: Baseline) -> float:
    """The ``decode`` phase of a miss of ``metric`` (see the module docstring)."""
    if metric == "e2e":
        span = _f(d, "e2e_ms") - _f(d, "ttft_ms")
    elif metric == "time_to_first_answer_token":
        return max(_f(d, "time_to_first_answer_token_ms") - _f(d, "ttft_ms"), 0.0)
    elif metric == "stall":  # the longest gap = a typical gap (decode) + its excess (decode stall)
        gaps = d.get("inter_chunk_ms") or ()
        return min(base.gap_ms, max(gaps)) if gaps else 0.0
    else:  # tpot, itl: the excess over a typical decode
        n = int(d.get("output_tokens") or 0)
        return max((n - 1) * max(_f(d, "tpot_ms") - base.itl_ms, 0.0) - ph["decode_stall"], 0.0)
    return max(span - ph["decode_stall"], 0.0)


def _metrics(d: dict[str, Any]) -> RequestMetrics:
    """The :class:`RequestMetrics` a line records (ns), for :func:`loadgen.core.slo.request_value`."""

    def ns(key: str) -> int | None:
        v = d.get(key)
        return None if v is None else round(float(v) * 1e6)

    tpot = d.get("tpot_ms")
    return RequestMetrics(
        output_tokens=int(d.get("output_tokens") or 0),
        ttft_ns=ns("ttft_ms"),
        time_to_first_answer_token_ns=ns("time_to_first_answer_token_ms"),
        tpot_ns=None if tpot is None else float(tpot) * 1e6,
        e2e_ns=ns("e2e_ms"),
        itl_ns=[float(v) * 1e6 for v in d.get("itl_ms") or ()],
        inter_chunk_ns=[round(float(v) * 1e6) for v in d.get("inter_chunk_ms") or ()],
        # one token a chunk where the counts say so; else token deadlines follow the ITL samples
        tokens_per_chunk=[1] * n if (n := int(d.get("output_tokens") or 0)) == d.get("chunks") else [],
    )


def _cancelled(d: dict[str, Any], t: SLOTarget, base: Baseline, origin: str) -> tuple[str, dict[str, float]]:
    """A request cancelled in flight (a probe's early stop, the drain deadline): a miss or censored.

    As the probe judge counts it (:mod:`loadgen.sweep.probe`): a known miss when it was in
    flight past the threshold without the target's event (TTFT, time to first answer token:
    no token yet; E2E: no end); its server time so far stands for ``ttft_from_sent_ms``
    (all of it queueing or prefill). Anything else is ``censored``: not judged.
    """
    waited = _f(d, "error_e2e_ms")
    no_token = not d.get("chunks")
    if t.metric not in ("ttft", "time_to_first_answer_token", "e2e") or waited * 1e6 <= t.threshold_ns:
        return "censored", {}
    if not no_token and t.metric != "e2e":
        return "censored", {}
    ph = phases(d, base, origin)
    lag = 0.0 if origin == "sent" else max(_f(d, "schedule_lag_ms"), 0.0)
    names: tuple[str, ...] = _TTFT_PHASES
    if no_token:
        server = max(waited - lag - ph["rate_limit"], 0.0)
        ph["queueing"] = max(server - base.ttft_ms, 0.0)
        ph["prefill"] = server - ph["queueing"]
    else:  # E2E, tokens came: the part after the lag and the server's first token is decode
        names += _DECODE_PHASES
        ph["decode"] = max(waited - lag - ph["rate_limit"] - ph["queueing"] - ph["prefill"] - ph["decode_stall"], 0.0)
    weighed = {k: ph[k] for k in names}
    return max(names, key=lambda k: (weighed[k], -names.index(k))), weighed


def attribute(
    d: dict[str, Any], t: SLOTarget, base: Baseline, origin: str = "scheduled"
) -> tuple[str, dict[str, float]] | None:
    """The cause of request line ``d``'s miss of ``t`` and the phases weighed; None if it met ``t``.

    ``("censored", {})`` for a request cancelled in flight whose outcome is unknown (:func:`_cancelled`).
    """
    if d.get("status") != "ok" and d.get("error_kind") == "cancelled":
        return _cancelled(d, t, base, origin)
    if d.get("error_kind") == "abandoned":  # its user walked away (--abandon): not a miss
        return None
    if not exceeds(t, request_value(t, _metrics(d)) if d.get("status") == "ok" else float("inf")):
        return None
    if d.get("status") != "ok":
        kind = d.get("error_kind") or "error"
        return ("rate_limit" if kind == "rate_limited" else f"error:{kind}"), {}
    if not d.get("output_tokens"):
        return "no_output", {}
    ph = phases(d, base, origin)
    if t.metric in ("ttft", "time_to_first_answer_token", "e2e"):
        names: tuple[str, ...] = _TTFT_PHASES
        if t.metric != "ttft":
            names += _DECODE_PHASES
    else:
        names = _DECODE_PHASES
    ph["decode"] = _decode_ms(d, t.metric, ph, base) if "decode" in names else 0.0
    weighed = {k: ph[k] for k in names}
    cause = max(names, key=lambda k: (weighed[k], -names.index(k)))
    return cause, weighed


def _words(cause: str) -> str:
    if cause.startswith("error:"):
        return f"error ({cause[6:]})"
    return PHASE_WORDS.get(cause, cause)


def why(
    lines: Iterable[dict[str, Any]],
    targets: Sequence[SLOTarget],
    *,
    origin: str = "scheduled",
    unloaded_ttft_ms: float | None = None,
    examples: int = 5,
) -> dict[str, Any] | None:
    """The miss attribution of measured request ``lines`` for ``targets`` (``result.json`` ``why``).

    Returns None without targets. Per target: ``misses``, ``judged``, ``causes`` (count per
    cause, most first), ``time_share`` (each phase's fraction of the summed phase time of the
    attributed misses), ``examples`` (the first few request indices per cause) and ``text``.
    """
    if not targets:
        return None
    sent = [d for d in lines if d.get("sent_s") is not None]
    measured = [d for d in sent if d.get("phase", "measure") == "measure"]
    base = baseline(sent, unloaded_ttft_ms)
    out: list[dict[str, Any]] = []
    for t in targets:
        causes: Counter[str] = Counter()
        time_ms: Counter[str] = Counter()
        ex: dict[str, list[int]] = {}
        censored = 0
        mine = [d for d in measured if t.applies(d.get("model"))]  # a target of one model of a mix: its requests
        for d in mine:
            got = attribute(d, t, base, origin)
            if got is None:
                continue
            cause, weighed = got
            if cause == "censored":
                censored += 1
                continue
            causes[cause] += 1
            time_ms.update(weighed)
            if len(ex.setdefault(cause, [])) < examples:
                ex[cause].append(int(d.get("index", -1)))
        total = sum(time_ms.values())
        misses = sum(causes.values())
        ranked = causes.most_common()
        judged = len(mine) - censored
        text = f"{misses} of {judged} missed {t.label}"
        if ranked:
            text += ": " + ", ".join(f"{n} {_words(c)}" for c, n in ranked)
        if causes.keys() & {"queueing", "buffering"}:  # inferred against a reference: say which
            text += f" [over an unloaded TTFT of {base.ttft_ms:.1f} ms: {base.source}]"
        if censored:
            text += f" ({censored} cancelled in flight, not judged)"
        out.append(
            {
                "target": t.label,
                "misses": misses,
                "judged": judged,
                "censored": censored,
                "causes": dict(ranked),
                "time_share": {k: round(v / total, 4) for k, v in time_ms.most_common() if v / total >= 1e-4}
                if total
                else {},
                "examples": ex,
                "text": text,
            }
        )
    return {
        "rule": "each miss goes to the phase with the largest share of its missed value (loadgen/engine/why.py)",
        "baseline": base.to_json(),
        "targets": out,
    }


def why_of_dirs(
    dirs: Iterable[Path],
    targets: Sequence[SLOTarget],
    *,
    origin: str = "scheduled",
    unloaded_ttft_ms: float | None = None,
) -> dict[str, Any] | None:
    """:func:`why` over the ``requests.jsonl`` of each directory in ``dirs`` (a probe's segments)."""
    return why(
        _lines(Path(x) / "requests.jsonl" for x in dirs), targets, origin=origin, unloaded_ttft_ms=unloaded_ttft_ms
    )


def unloaded_ttft_ms(run_dir: Path) -> float | None:
    """The median server TTFT (``ttft_from_sent_ms``) of a run at no load (a sweep's unloaded check)."""
    v = [float(d["ttft_from_sent_ms"]) for d in _lines([run_dir / "requests.jsonl"]) if d.get("ttft_from_sent_ms")]
    return float(np.median(v)) if v else None


def sweep_why(result: dict[str, Any], out_dir: Path, targets: Sequence[SLOTarget], origin: str = "scheduled") -> None:
    """Add ``why`` to each probe of a sweep's ``result`` (``sweep.json``), from its segments' records.

    The unloaded TTFT is that of the sweep's unloaded check (its ``unloaded/`` run) when it ran.
    ``origin``: the latency origin of a probe whose result.json does not state its own (open loop:
    this; closed loop: the send).
    """
    base = unloaded_ttft_ms(out_dir / "unloaded") if (out_dir / "unloaded").is_dir() else None
    for p in result.get("probes") or ():
        pdir = out_dir / str(p.get("dir") or "")
        if not p.get("dir") or not pdir.is_dir():
            continue
        dirs = [pdir, *sorted(pdir.glob("extension-*"))]
        # the probe's own stated origin; else a closed-loop probe counts from the send (a closed-loop
        # session probe does not: its turns count from their due times, and its result.json says so)
        o = _stated_origin(pdir) or ("sent" if p.get("concurrency") else origin)
        p["why"] = why_of_dirs(dirs, targets, origin=o, unloaded_ttft_ms=base)


def _stated_origin(run_dir: Path) -> str | None:
    """``conditions.latency_origin`` of the run in ``run_dir`` (its result.json), or None."""
    try:
        doc = orjson.loads((run_dir / "result.json").read_bytes())
    except (OSError, ValueError):
        return None
    o = (doc.get("conditions") or {}).get("latency_origin") if isinstance(doc, dict) else None
    return o if o in ("scheduled", "sent") else None

"""The master's (or single process's) aggregation of one Locust test: the ``loadgen run`` path.

Records reach the master as plain lists (:func:`pack_record` on a worker,
:func:`unpack_record` here, with the worker's clock mapped onto ours through the
anchors of :func:`clock_anchor`); :class:`LocustCollector` aggregates them exactly
as ``loadgen run`` does and, at the end, writes ``result.json`` (the ``loadgen run``
schema plus a ``locust`` section), ``requests.jsonl``, ``histograms.hlog`` and
``worker_histograms.json``. Not :class:`loadgen.spread.workers.Collector`, which collects
the worker processes of ``loadgen run --workers``. With ``--sessions`` a record carries its
turn index: its line is ``loadgen run --sessions``'s (``session_id``, ``turn``, cached tokens)
and ``result.json`` gets the same ``sessions`` block (:func:`loadgen.sessions.measured.sessions_block`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import gevent
import orjson

from loadgen.core.clock import now_ns, wall_anchor
from loadgen.core.errors import ConfigError
from loadgen.core.histograms import LatencyHistogram
from loadgen.core.metrics import RequestMetrics, compute
from loadgen.core.redact import Redactor
from loadgen.core.slo import parse_slo
from loadgen.core.types import RequestRecord, TokenEvent
from loadgen.engine.recordlog import RecordWriter, record_line, write_hlog, write_json
from loadgen.engine.results import LATENCY_METRICS, Aggregator, summarize_hdr
from loadgen.engine.runner import ClientStats, RunOutcome
from loadgen.engine.runplan import LoadConfig
from loadgen.locust.client import client_settings
from loadgen.locust.live import LiveSeries, summary
from loadgen.locust.openplan import open_offsets, workload_options
from loadgen.locust.session_user import sessions_plan
from loadgen.measurement import build_result, raise_fd_limit
from loadgen.sessions.measured import TurnFacts, sessions_block
from loadgen.sessions.spread import merge_stats
from loadgen.spread.lease import LEASE_AHEAD_NS, split_by_lease
from loadgen.workload.spec import Workload

if TYPE_CHECKING:
    from locust.env import Environment
    from locust.runners import MasterRunner

# --------------------------------------------------------------------------- records on the wire

_FIELDS = [f.name for f in dataclasses.fields(RequestRecord) if f.name != "events"]
_TIMES = ("scheduled_ns", "sent_ns", "end_ns", "response_headers_ns")

log = logging.getLogger("loadgen.locust")


def pack_record(rec: RequestRecord, turn: int | None = None) -> list[Any]:
    """A record as plain lists (msgpack-able), for a worker -> master message; a session turn's
    0-based index (``turn``) third (:func:`packed_turn`)."""
    packed = [
        [getattr(rec, f) for f in _FIELDS],
        [[e.t_ns, e.text, e.answer, e.usage_completion_tokens] for e in rec.events],
    ]
    return packed if turn is None else [*packed, turn]


def packed_turn(obj: list[Any]) -> int | None:
    """The session turn index :func:`pack_record` packed with a record (None: not a session turn)."""
    return obj[2] if len(obj) > 2 else None


def unpack_record(obj: list[Any], shift_ns: int = 0) -> RequestRecord:
    """Inverse of :func:`pack_record`; ``shift_ns`` maps the worker's clock onto the master's."""
    fields, evs = obj[0], obj[1]
    rec = RequestRecord(**dict(zip(_FIELDS, fields)))
    if shift_ns:
        for name in _TIMES:
            v = getattr(rec, name)
            if v is not None:
                setattr(rec, name, v + shift_ns)
        for a in rec.attempts or ():
            for k in ("sent_ns", "end_ns", "response_headers_ns"):
                if a.get(k) is not None:
                    a[k] += shift_ns
    rec.events = [TokenEvent(t + shift_ns, txt, ans, use) for t, txt, ans, use in evs]
    return rec


def clock_anchor() -> dict[str, Any]:
    """This process's monotonic and wall clocks read together: sent with a worker's records (for the record;
    the records are placed on the master's clock by the worker's measured offset, :mod:`loadgen.locust.clocksync`)."""
    mono, wall = wall_anchor()
    return {"mono_ns": mono, "wall_ns": wall}


# --------------------------------------------------------------------------- master side


class LocustCollector:
    """One test's aggregation on the master (or single process): the ``loadgen run`` path.

    Records arrive once each (``add``/``add_packed``); ``finalize`` writes
    ``result.json``, ``requests.jsonl`` (written as records arrive),
    ``histograms.hlog`` and ``worker_histograms.json``.
    """

    def __init__(
        self,
        env: Environment,
        cfg: dict[str, Any],
        plan: dict[str, Any],
        out_dir: Path,
        workers: list[str],
        clocks: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.env, self.cfg, self.plan, self.out_dir = env, cfg, plan, out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        self.started_at = dt.datetime.now(dt.UTC)
        self.t0_ns = plan["t0_mono_ns"]
        self.t0_wall_ns = plan["t0_wall_ns"]
        self.agg = Aggregator([parse_slo(t) for t in cfg.get("slos") or ()])
        # every session turn has a due time: its window and lag are an open-loop send's (as loadgen run --sessions)
        self.open_loop = cfg["mode"] in ("open", "sessions")
        self.agg.open_loop = self.open_loop  # the live window's basis (build_result sets it again)
        self.series = LiveSeries(self.t0_ns)
        self.tokenizer = None
        if cfg["workload"].get("tokenizer"):
            from loadgen.workload.tokenizer import load_tokenizer

            self.tokenizer = load_tokenizer(cfg["workload"]["tokenizer"])
        self.fh = open(out_dir / "requests.jsonl", "wb")
        self.writer = RecordWriter(
            self.fh, self.t0_ns, save_text=cfg["save_text"], token_lists=cfg["token_lists"], redactor=Redactor()
        )
        self.expected = list(workers)  # worker ids that were handed a shard
        # each worker's measured clock (loadgen.locust.clocksync): its records move by offset_ns onto ours
        self.clocks: dict[str, dict[str, Any]] = dict(clocks or {})
        self.finals: dict[str, dict[str, Any]] = {}
        self.received: dict[str, int] = {}
        self.result: dict[str, Any] | None = None
        self.sent_sched: list[int] = []  # [count, first, last] scheduled_ns of sent requests
        self._rows: tuple[int, list[dict[str, Any]]] | None = None
        self._live: tuple[int, bool, dict[str, Any]] | None = None
        self.turns = TurnFacts()  # --sessions: per-turn facts for result.json's sessions block
        # each worker's last lease, offset from t0 (loadgen.spread.lease), renewed while it is connected
        self.leased: dict[str, int] = {w: LEASE_AHEAD_NS for w in workers}
        # --sessions: the source and its plan (read here too, so a bad file fails the test before it sends)
        self.sessions = sessions_plan(cfg, plan["salt"]) if cfg["mode"] == "sessions" else None

    def add(self, rec: RequestRecord, m: RequestMetrics | None = None, turn: int | None = None) -> None:
        if m is None:
            m = compute(rec, self.tokenizer, self.cfg["origin"])
        self.agg.add(rec, m)
        self.series.add(rec, m)
        if turn is None:
            self.writer.write(rec, m)
        else:  # a session turn: the requests.jsonl line of loadgen run --sessions (loadgen.sessions.measured)
            self.turns.add(rec, m, turn)
            d = record_line(rec, m, self.t0_ns, save_text=self.cfg["save_text"], token_lists=self.cfg["token_lists"])
            d["turn"] = turn
            if d["error_detail"]:
                d["error_detail"] = self.writer.redactor(d["error_detail"])
            self.writer.write_line(orjson.dumps(d) + b"\n")
        if rec.sent_ns is not None:
            ss = self.sent_sched
            if not ss:
                ss.extend((0, rec.scheduled_ns, rec.scheduled_ns))
            ss[0] += 1
            ss[1] = min(ss[1], rec.scheduled_ns)
            ss[2] = max(ss[2], rec.scheduled_ns)

    def add_packed(self, worker: str, data: dict[str, Any]) -> None:
        shift = int(self.clocks[worker]["offset_ns"])  # only a worker with a measured clock got a shard
        for obj in data["records"]:
            self.add(unpack_record(obj, shift), turn=packed_turn(obj))
        self.received[worker] = self.received.get(worker, 0) + len(data["records"])
        self.renew_lease(worker)

    def renew_lease(self, worker: str) -> None:
        """The master heard from ``worker`` (a batch of records, sent every ``LEASE_RENEW_S`` even when empty):
        it may send until ``now + LEASE_AHEAD_NS`` (loadgen.spread.lease). A killed worker is heard no more, so
        its lease runs out within ``LEASE_AHEAD_NS`` of its last batch (Locust's own liveness takes seconds)."""
        if self.result is None and worker not in self.finals:
            self.leased[worker] = max(self.leased[worker], max(now_ns() - self.t0_ns, 0) + LEASE_AHEAD_NS)
            assert self.env.runner is not None
            self.env.runner.send_message("loadgen_lease", {"until_ns": self.leased[worker]}, client_id=worker)

    def _split_lost(self, missing: list[str]) -> tuple[int, int]:
        """``(lost with the client, unsent)`` of the workers that sent no final report: open loop, each one's
        shard split by its last lease (:func:`loadgen.spread.lease.split_by_lease`); else nothing known."""
        if not missing or self.cfg["mode"] != "open":
            return 0, 0
        try:  # the workers' own schedule (the master holds the same configuration and salt)
            offs, _ = open_offsets(self.cfg, Workload(workload_options(self.cfg, self.plan["salt"])))
        except (ConfigError, OSError) as exc:  # cannot happen with the master's own files; never lose the result
            log.warning(
                "loadgen: the lost workers' schedule could not be rebuilt (%s): their requests are not split", exc
            )
            return 0, 0
        lost = unsent = 0
        for w in missing:
            k = self.expected.index(w)
            a, b = split_by_lease(offs[k :: len(self.expected)], self.received.get(w, 0), self.leased.get(w))
            lost, unsent = lost + a, unsent + b
        return lost, unsent

    def wait_for_finals(self, timeout_s: float) -> None:
        """Block (cooperatively) until every still-connected worker has sent its final report."""
        runner = cast("MasterRunner", self.env.runner)  # only the master waits for finals
        deadline = now_ns() + int(timeout_s * 1e9)
        while now_ns() < deadline:
            connected = {c.id for c in runner.clients.values() if c.state != "missing"}
            if all(w in self.finals or w not in connected for w in self.expected):
                return
            gevent.sleep(0.05)

    def finalize(self, processes: list[dict[str, Any]], interrupted: bool) -> dict[str, Any]:
        self.fh.close()
        cfg = self.cfg
        open_loop = self.open_loop
        sessions = cfg["mode"] == "sessions"
        missing = [w for w in self.expected if w not in self.finals]
        aborted = [p["aborted_reason"] for p in processes if p.get("aborted_reason")]
        if missing:
            aborted.append(f"{len(missing)} worker(s) sent no final report: their last records may be missing")
        busiest = max(processes, key=lambda p: p["cpu_s"] / max(p["wall_s"], 1e-9), default=None)
        lags = array("f")
        for p in processes:
            lags.frombytes(p["loop_lag_ms"])
        client = ClientStats(
            cpu_s=busiest["cpu_s"] if busiest else 0.0, wall_s=busiest["wall_s"] if busiest else 0.0,
            loop_lag_ms=list(lags), open_loop=open_loop, aborted_reason="; ".join(aborted) or None,
        )  # fmt: skip
        if cfg["mode"] == "open":
            n, first, last = self.sent_sched or (0, 0, 0)
            if n >= 2 and last > first:  # the schedule's own rate over the requests that were sent
                client.schedule_realized_rps = (n - 1) / ((last - first) / 1e9)
        sstats = merge_stats([p["sessions"] for p in processes if p.get("sessions")]) if sessions else None
        unsent = sstats.unsent_turns if sstats is not None else sum(p["unsent"] for p in processes)
        lost, unsent_lost = self._split_lost(missing)  # a killed worker's shard: 115 of 300 unsent read 0 before
        self.agg.unsent, self.agg.lost_with_client = unsent + unsent_lost, lost
        outcome = RunOutcome(
            t0_ns=self.t0_ns, t0_wall_ns=self.t0_wall_ns, interrupted=interrupted, unsent=unsent + unsent_lost,
            unsent_warmup=0, client=client, end_ns=now_ns(), lost_with_client=lost,
        )  # fmt: skip
        assert self.env.runner is not None
        users = max(self.env.runner.target_user_count or 0, 1)
        # sessions: latency from each turn's due time (cfg origin), as loadgen run --sessions counts it
        load = LoadConfig(rate_rps=cfg["rate"], concurrency=None if open_loop else users, origin=cfg["origin"])
        result = build_result(
            self.agg, outcome, load, _Described(cfg), started_at=self.started_at,
            config_record=cfg["config_record"], fd_limit=raise_fd_limit(),
        )  # fmt: skip
        merged = {name: LatencyHistogram(name) for name in LATENCY_METRICS}
        for p in processes:
            for name, st in p["hist"].items():
                merged[name].merge(LatencyHistogram.from_state(st))
        if sstats is not None and self.sessions is not None:  # the sessions block of loadgen run --sessions
            src, plan, facts = self.sessions
            block = sessions_block(LoadConfig(concurrency=users), src, plan, facts, sstats, self.turns)
            cut = sum(p["sessions"].get("ended_by_stop", 0) for p in processes if p.get("sessions"))
            # started = completed + ended_by_failure + ended_by_stop; per-session figures: sessions that ended
            result["sessions"] = {**block, "arrivals": arrivals_text(cfg, users), "ended_by_stop": cut}
        result["locust"] = {
            "mode": {"open": "open loop", "sessions": "sessions"}.get(cfg["mode"], "closed loop"),
            "arrivals": arrivals_text(cfg, self.env.runner.target_user_count),
            "locust_version": __import__("locust").__version__,
            "stop_timeout_s": self.env.stop_timeout,
            "users": self.env.runner.target_user_count,
            "processes": len(processes),
            "workers": [
                {
                    "id": w,
                    "records_received": self.received.get(w, 0),
                    "final_report": w in self.finals,
                    "clock_offset_ms": self.clocks[w]["offset_ns"] / 1e6 if w in self.clocks else None,
                    "clock_uncertainty_ms": self.clocks[w]["half_rtt_ns"] / 1e6 if w in self.clocks else None,
                    "clock_pings": self.clocks[w].get("pings") if w in self.clocks else None,
                    "hist_counts": {k: v["count"] for k, v in self.finals[w]["hist"].items()}
                    if w in self.finals
                    else None,
                }
                for w in self.expected
            ],  # fmt: skip
            "merged_worker_histograms_ms": {k: summarize_hdr(h) for k, h in merged.items()},
            "locust_stats_at_stop": _locust_stats(self.env),
            "note": "Locust's table counts each request once (type E2E, its response time the request's E2E "
            "latency); TTFT, TPOT and ITL are loadgen metrics (the loadgen tab, latency_ms here). latency_ms "
            "comes from loadgen's records; Locust's own table rounds response times (to 10 ms above 100 ms, "
            "to 100 ms above 1 s) and is kept here for comparison only",
        }
        if cfg["mode"] == "open":
            result["locust"]["schedule"] = {
                "rate_rps": cfg["rate"], "arrival": "trace" if cfg["workload"].get("trace") else cfg["arrival"],
                "dispatched": sum(p["dispatched"] for p in processes), "unsent": unsent,
                "not_reached_at_stop": sum(p["not_reached"] for p in processes),
                "max_concurrency_per_process": cfg["max_concurrency"],
                "inflight_cap_waits": sum(p["cap_waits"] for p in processes),
            }  # fmt: skip
        write_json(self.out_dir / "result.json", result)
        write_hlog(self.out_dir / "histograms.hlog", self.agg, outcome, self.out_dir / "requests.jsonl", "sent")
        hists = (
            {w: self.finals[w]["hist"] for w in self.finals}
            if self.finals
            else ({"local": processes[-1]["hist"]} if processes else {})
        )
        write_json(
            self.out_dir / "worker_histograms.json",
            {"unit": "us", "encoding": "HdrHistogram V2 base64", "workers": hists},
        )
        self.result = result
        return result

    def live(self) -> dict[str, Any]:
        """The tab's charts, throughput and SLO verdict (:mod:`loadgen.locust.live`; at most once a second)."""
        now, final = now_ns(), self.result is not None
        if self._live is not None and (self._live[1] or (not final and now - self._live[0] < 1_000_000_000)):
            return self._live[2]
        data = {"series": self.series.to_json(self.agg, now), **summary(self.agg)}
        if self.result is not None:  # the final figures, as result.json has them
            data["throughput"] = {k: self.result["throughput"].get(k) for k in data["throughput"]}
        self._live = (now, final, data)
        return data

    def live_rows(self) -> list[dict[str, Any]]:
        """The web UI's loadgen table (recomputed at most once a second)."""
        now = now_ns()
        if self._rows is not None and now - self._rows[0] < 1_000_000_000:
            return self._rows[1]
        lat = self.agg.latency_ms() if self.result is None else self.result["latency_ms"]
        rows = [_row(label, lat[key]) for key, label in _ROWS]
        c = self.agg.counts()
        kinds = ", ".join(f"{k} {v}" for k, v in c["errors_by_kind"].items())
        rows.append(
            {"metric": f"requests: {c['completed']} ok, {c['failed']} failed" + (f" ({kinds})" if kinds else "")}
        )
        if self.result is not None:
            v = self.result["validity"]
            bad = ", ".join(c["name"] for c in v["checks"] if c["group"] == "generator" and not c["ok"])
            verdict = "VALID" if v["valid"] else f"INVALID ({bad})"
            rows.append({"metric": f"result: {verdict}, written to {self.out_dir / 'result.json'}"})
        self._rows = (now, rows)
        return rows


_ROWS = (("ttft", "TTFT"), ("itl", "ITL (per token, HDR)"), ("inter_chunk", "inter-chunk (HDR)"),
         ("tpot", "TPOT"), ("e2e", "E2E"), ("schedule_lag", "schedule lag"))  # fmt: skip


def _row(label: str, d: dict[str, Any]) -> dict[str, Any]:
    def f(v: float | None) -> str:
        return "" if v is None else f"{v:.2f}"

    return {
        "metric": label,
        "count": d["count"],
        **{k: f(d.get(k)) for k in ("mean", "p50", "p90", "p99", "p999", "max")},
    }


class _Described:
    """The endpoint as ``build_result`` wants it: the pre-flight's description, this client's settings."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.desc = {**cfg["describe"], "client": client_settings(cfg)}

    def describe(self) -> dict[str, Any]:
        return self.desc


def _locust_stats(env: Environment) -> list[dict[str, Any]]:
    assert env.runner is not None
    out = []
    for (name, method), e in sorted(env.runner.stats.entries.items()):
        out.append({
            "type": method, "name": name, "requests": e.num_requests, "failures": e.num_failures,
            "avg_ms": e.avg_response_time, "median_ms": e.median_response_time,
            "p95_ms": e.get_response_time_percentile(0.95), "p99_ms": e.get_response_time_percentile(0.99),
            "max_ms": e.max_response_time,
        })  # fmt: skip
    return out


def arrivals_text(cfg: dict[str, Any], users: int | None) -> str:
    if cfg["mode"] == "sessions":
        return (f"sessions, closed loop: {users if users is not None else 'N'} Locust users, each runs one session at "
                "a time and starts the next when it ends; a turn is due at the previous reply's end + its delay; "
                "latency from the due time")  # fmt: skip
    if cfg["mode"] == "open":
        src = "a trace" if cfg["workload"].get("trace") else f"{cfg['arrival']} arrivals at {cfg['rate']:g} req/s"
        return (f"open loop: {src}, independent of responses; latency from the scheduled time; "
                f"one dispatcher per process, at most {cfg['max_concurrency']} in flight per process; "
                "Locust users idle")  # fmt: skip
    return (f"closed loop: {users if users is not None else 'N'} Locust users, each sends its next request when "
            "the last ends (Locust's default); latency from the send")  # fmt: skip

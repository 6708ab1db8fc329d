"""One measured session run: ``--sessions`` source -> session engine -> records -> result.json.

The session counterpart of :func:`loadgen.measurement.measure` (same files, same ``result.json``
schema, plus a ``sessions`` block). Which sessions run and when they start:

* open loop (``--rate R``: sessions per second, ``--arrival`` poisson | gamma | constant):
  ``--requests N`` sessions (after ``--warmup N`` warm-up sessions), or every session whose start
  falls inside ``--duration``; with neither, every session of the file;
* the trace's own start times when the source has them (TraceLab, loadgen JSONL ``start_s``)
  and no ``--rate`` is given;
* closed loop (``--concurrency N``): N sessions at once, each replaced when it ends, until
  ``--requests`` sessions started or ``--duration`` is over.

File sessions are taken in file order and reused in turn when more are asked for (a reused
session gets the id ``<id>~<round>``, so salting keeps its prefixes apart). The source is read and
checked whole before the first request (a bad value is one error naming file, line and field, never
a failure mid-run), and no wait is longer than its idle cap (one hour by default; longer gaps between
turns or between the source's own session starts are shortened, with a warning line):
:mod:`loadgen.workload.session_checks`.

Measured window (the rule for sessions): every turn of a measured session counts, including
turns due after the last session start (a session is not cut at a time limit: its later turns
carry the deep contexts the test is about). The rates in ``throughput`` are over the window of
the turns' due times (:mod:`loadgen.core.window`, open-loop basis), so the tail of long sessions,
when fewer sessions are still running, is inside it; ``sessions.last_start_s`` and
``sessions.last_due_s`` show how long that tail is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from loadgen.core.errors import ConfigError
from loadgen.core.metrics import RequestMetrics, prefix_cache_hit_rate
from loadgen.core.redact import Redactor
from loadgen.core.types import RequestRecord
from loadgen.endpoints import Endpoint
from loadgen.engine.results import summarize_exact
from loadgen.engine.runplan import LoadConfig
from loadgen.measurement import MeasuredRun, RunFiles, run_here
from loadgen.sessions.planning import plan_sessions
from loadgen.sessions.turns import SessionPlan, SessionRunner, SessionStats
from loadgen.workload.prompts import new_salt
from loadgen.workload.session_sources import SessionSource

if TYPE_CHECKING:
    from loadgen.serve.observe import ObserverPair, ServerObserver
    from loadgen.spread.cluster import Cluster

__all__ = ["TurnFacts", "measure_sessions", "plan_sessions", "sessions_block", "write_session_schedule"]


def write_session_schedule(cfg: LoadConfig, src: SessionSource, path: Path) -> tuple[int, int]:
    """``--dry-run``: the session schedule as JSON lines, one per turn; returns (sessions, turns).

    A first turn has ``start_s`` (seconds from t0; open loop) or ``start: "when a slot frees"``
    (closed loop); a later turn has ``delay_s`` (after the previous reply ends: its send time
    depends on the server, so it is not an absolute time). Lengths are ``new_tokens`` (or
    ``text_chars``) and ``output_tokens``.
    """
    plan, _ = plan_sessions(cfg, src)
    n_turns = 0
    with open(path, "wb") as fh:
        for i, s in enumerate(plan.sessions):
            for k, t in enumerate(s.turns):
                d: dict[str, Any] = {"session_id": s.session_id, "turn": k}
                if k == 0:
                    if plan.mode == "open":
                        d["start_s"] = int(plan.start_offsets_ns[i]) / 1e9
                    else:
                        d["start"] = "when a slot frees"
                    if s.system_tokens:
                        d["system_tokens"] = s.system_tokens
                else:
                    d["delay_s"] = t.delay_s if plan.idle_cap_s is None else min(t.delay_s, plan.idle_cap_s)
                if t.text is not None:
                    d["text_chars"] = len(t.text)
                else:
                    d["new_tokens"] = t.new_tokens
                d["output_tokens"] = t.output_tokens
                if t.reset:
                    d["reset"] = True
                if i < plan.warmup_sessions:
                    d["phase"] = "warmup"
                fh.write(orjson.dumps(d) + b"\n")
                n_turns += 1
    return len(plan.sessions), n_turns


class _Turns:
    """Per-turn facts kept for the ``sessions`` block (measured turns): depth, TTFT, tokens."""

    def __init__(self) -> None:
        self.depth: list[int] = []
        self.ttft_ns: list[float] = []
        self.ok: list[bool] = []
        self.prompt: list[int] = []
        self.cached: list[int] = []  # -1: not reported

    def add(self, rec: RequestRecord, m: RequestMetrics, turn: int) -> None:
        if rec.phase != "measure":
            return
        self.depth.append(turn)
        self.ok.append(rec.ok)
        self.ttft_ns.append(float(m.ttft_ns) if m.ttft_ns is not None else float("nan"))
        self.prompt.append(rec.prompt_tokens if rec.prompt_tokens is not None else -1)
        self.cached.append(rec.cached_prompt_tokens if rec.cached_prompt_tokens is not None else -1)

    def add_line(self, d: dict[str, Any]) -> None:
        """The same facts from a ``requests.jsonl`` line (a worker's record, :mod:`loadgen.sessions.spread`)."""
        if d["phase"] != "measure":
            return
        self.depth.append(d["turn"])
        self.ok.append(d["status"] == "ok")
        self.ttft_ns.append(d["ttft_ms"] * 1e6 if d["ttft_ms"] is not None else float("nan"))
        self.prompt.append(d["input_tokens"] if d["input_tokens"] is not None else -1)
        self.cached.append(d.get("cached_input_tokens", -1))

    def block(self) -> dict[str, Any]:
        depth = np.asarray(self.depth, dtype=np.int64)
        ttft = np.asarray(self.ttft_ns)
        ok = np.asarray(self.ok, dtype=bool)
        prompt = np.asarray(self.prompt, dtype=np.int64)
        cached = np.asarray(self.cached, dtype=np.int64)
        by_depth = []
        for d in sorted(set(self.depth)):
            sel = depth == d
            good = sel & ok
            rep = good & (cached >= 0) & (prompt >= 0)
            t = ttft[good & ~np.isnan(ttft)]
            by_depth.append(
                {
                    "turn": d,
                    "turns": int(sel.sum()),
                    "ok": int(good.sum()),
                    "ttft_ms": {k: v for k, v in summarize_exact(t).items() if k in ("count", "mean", "p50", "p99")},
                    "input_tokens_mean": float(prompt[good & (prompt >= 0)].mean()) if good.any() else None,
                    "cached_tokens_mean": float(cached[rep].mean()) if rep.any() else None,
                    "prefix_cache_hit_rate": prefix_cache_hit_rate(int(cached[rep].sum()), int(prompt[rep].sum())),
                }
            )
        rep = ok & (cached >= 0) & (prompt >= 0)
        return {
            "turns": len(self.depth),
            "turns_reporting_cached_tokens": int(rep.sum()),
            "cached_tokens": int(cached[rep].sum()),
            "prompt_tokens_of_those": int(prompt[rep].sum()),
            "prefix_cache_hit_rate": prefix_cache_hit_rate(int(cached[rep].sum()), int(prompt[rep].sum())),
            "by_turn": by_depth,
        }


async def measure_sessions(
    endpoint: Endpoint,
    cfg: LoadConfig,
    src: SessionSource,
    out_dir: Path,
    *,
    config_record: dict[str, Any] | None = None,
    redactor: Redactor | None = None,
    on_record: Callable[[RequestRecord, RequestMetrics], None] | None = None,
    install_signal_handlers: bool = True,
    server_observer: ServerObserver | ObserverPair | None = None,
    conditions_extra: dict[str, Any] | None = None,
    runner_hook: Callable[[Any], None] | None = None,
    workers: int = 1,
    on_summary: Any = None,
    cluster: Cluster | None = None,
) -> MeasuredRun:
    """Run the sessions of ``src`` as ``cfg`` says against an opened ``endpoint``; write the run's files.

    ``requests.jsonl`` lines carry ``session_id`` and ``turn`` (0-based) besides the usual fields;
    ``result.json`` gets ``sessions`` (counts, per-session durations, waits on the system and on
    tools, per-turn-depth TTFT and prefix-cache hit rate). Raises ConfigError on a bad source.
    ``runner_hook`` gets the :class:`~loadgen.sessions.turns.SessionRunner` before it runs (a sweep
    probe's early-stop watch and interrupts, as :func:`loadgen.measurement.measure`'s hook);
    ``workers`` > 1: whole sessions partitioned over processes (:mod:`loadgen.sessions.spread`),
    records merged exactly; ``on_summary`` gets each turn's summary there (as
    :func:`~loadgen.measurement.measure`'s). ``cluster`` raises ConfigError.
    """
    if cluster is not None:
        raise ConfigError("--sessions runs on this host (not yet with --cluster)")
    if cfg.max_concurrency is not None and workers > cfg.max_concurrency:
        raise ConfigError(
            f"--max-concurrency {cfg.max_concurrency} is split over --workers {workers}: "
            "each needs at least one turn in flight (give a cap of at least the workers, or fewer workers)"
        )
    redactor = redactor or Redactor()
    if cfg.salt is None:
        cfg = replace(cfg, salt=new_salt())
    tokenizer = None
    if cfg.workload is not None and cfg.workload.tokenizer:
        from loadgen.workload.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(cfg.workload.tokenizer)
    plan, facts = plan_sessions(cfg, src, tokenizer)
    files = RunFiles(out_dir, cfg, redactor, server_observer=server_observer)
    await files.open()
    turns = _Turns()
    if workers > 1:
        from loadgen.sessions.spread import run_session_workers

        ep_cfg = endpoint.worker_config(workers)
        if ep_cfg is None:
            raise ConfigError("--workers needs an OpenAI-compatible endpoint")
        with files.requests_file() as fh:
            outcome, st = run_session_workers(workers, ep_cfg, cfg, files.agg, fh, redactor, turns.add_line,
                                              on_record=on_record, on_summary=on_summary)  # fmt: skip
    else:
        runner: SessionRunner | None = None

        def make(sink: Callable[..., None], t0: int | None) -> SessionRunner:
            nonlocal runner
            runner = SessionRunner(endpoint, plan, sink, t0_ns=t0, install_signal_handlers=install_signal_handlers)
            return runner

        outcome = await run_here(files, make, tokenizer, cfg.origin, on_record, runner_hook, on_turn=turns.add)
        assert runner is not None
        st = runner.stats
    workload = {"sessions": src.describe(), **facts, "api": plan.prompter.api,
                "input_tokens_counted_by": "tokenizer" if tokenizer is not None else None}  # fmt: skip
    # latency counts from each turn's due time in closed loop too (cfg.origin; LoadConfig.latency_origin says
    # "sent" for closed-loop users): the recorded origin is the one the turns' metrics used
    return await files.finish(
        outcome, replace(cfg, concurrency=None), endpoint, workload=workload, config_record=config_record,
        workers=workers, conditions_extra=conditions_extra, merge=False,
        blocks={"sessions": sessions_block(cfg, src, plan, facts, st, turns)},
    )  # fmt: skip


TurnFacts = _Turns  # the public name (loadgen.locust.session_user gathers the same per-turn facts)


def sessions_block(
    cfg: LoadConfig, src: SessionSource, plan: SessionPlan, facts: dict[str, Any], st: SessionStats, turns: _Turns
) -> dict[str, Any]:
    """``result.json`` ``sessions``: the session counts of ``st``, the waits, and the per-turn facts of ``turns``
    (also written by ``loadgen locust --sessions``, :mod:`loadgen.locust.session_user`)."""
    starts = [int(x) for x in plan.start_offsets_ns] if plan.mode == "open" else []
    return {
        "mode": plan.mode,
        "arrivals": facts.get("arrivals", "closed loop" if plan.mode == "closed" else cfg.arrival),
        "sessions_rps": cfg.rate_rps,
        "concurrency": cfg.concurrency,  # conversations held open through their think time (closed loop)
        "max_inflight_turns": plan.max_inflight,  # --max-concurrency: turns in flight at most (applied)
        "started": st.started,
        "completed": st.completed,
        "ended_by_failure": st.failed,
        "abandoned": st.abandoned,  # ended by a turn whose user walked away (--abandon)
        "warmup_sessions": plan.warmup_sessions,
        "unsent_turns": st.unsent_turns,
        "history_resets": st.resets,
        # tool calls round-trip (issue 32): replies whose calls went back; replies that should have called a
        # tool and did not (the recorded calls stood in); calls where the session went on with a user turn
        "tool_calls": {
            "replies_with_calls": st.tool_replies,
            "missing": st.tool_calls_missing,
            "unexpected": st.tool_calls_unexpected,
        },  # fmt: skip
        "salted_per_session": src.salt_sessions,
        "last_start_s": (max(starts) / 1e9) if starts else None,
        "duration_s": summarize_exact(st.durations_s, 1.0),
        "system_wait_s": summarize_exact(st.system_wait_s, 1.0),
        "tool_wait_s": summarize_exact(st.tool_wait_s, 1.0),
        **turns.block(),
    }

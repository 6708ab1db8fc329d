"""The file Locust loads (``locust -f .../loadgen/locust/locustfile.py``): the LLM user and the event hooks.

Started by ``loadgen locust``. Locust imports this file by path as a top-level
module, so it holds no state (that is in :mod:`loadgen.locust.state`): only the
user class and the listeners that wire a test's start, stop and the worker <->
master messages to :class:`~loadgen.locust.dispatch.LoadProcess` and
:class:`~loadgen.locust.collect.LocustCollector`. See :mod:`loadgen.locust` for how
loadgen fits Locust's model.
"""

from __future__ import annotations

import logging
from typing import Any

import gevent
from locust import User, constant, events, task
from locust.runners import MasterRunner, WorkerRunner

from loadgen.locust.collect import LocustCollector
from loadgen.locust.dispatch import LoadProcess
from loadgen.locust.state import (
    FINAL_WAIT_EXTRA_S,
    LEAD_IN_NS,
    S,
    config_from_env,
    gc_quiet,
    new_plan,
    out_dir,
    refresh_loop_clock,
    schedule_span,
)
from loadgen.locust.webui import install_web_ui

log = logging.getLogger("loadgen.locust")


class LLMUser(User):
    """Closed loop: one streamed request at a time, the next as soon as the last ends.

    In open-loop mode the schedule sends and users idle (see the module docstring).
    """

    wait_time = constant(0)

    @task
    def generate(self) -> None:
        proc = S.process
        if proc is None or proc.cfg["mode"] == "open":
            gevent.sleep(1.0)
            return
        proc.closed_loop_request()


@events.init.add_listener
def _on_init(environment: Any, **_: Any) -> None:
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        S.role = "worker"
        runner.register_message("loadgen_start", _on_start_message)
        runner.register_message("loadgen_stop", _on_stop_message)
        return
    S.role = "master" if isinstance(runner, MasterRunner) else "local"
    S.config = config_from_env()
    if S.role == "master":
        runner.register_message("loadgen_records", _on_records_message)
        runner.register_message("loadgen_final", _on_final_message)
    if environment.web_ui is not None:
        install_web_ui(environment)
    refresh_loop_clock()


@events.quitting.add_listener
def _on_quitting(environment: Any, **_: Any) -> None:
    S.quitting = True


@events.test_start.add_listener
def _on_test_start(environment: Any, **_: Any) -> None:
    if S.role == "worker":
        return  # the shard came with loadgen_start, just before the spawn message
    gc_quiet(True)
    runner = environment.runner
    lead = LEAD_IN_NS if S.role == "local" else LEAD_IN_NS + 1_000_000_000
    cfg = schedule_span(environment, S.config, lead)  # type: ignore[arg-type]  # S.config is set at test start
    if S.role == "local":
        plan = new_plan(cfg, lead)
        S.collector = LocustCollector(environment, cfg, plan, out_dir(cfg), [])
        S.process = LoadProcess(environment, plan, S.collector.add)
        refresh_loop_clock()
        return
    active = [c.id for c in runner.clients.values() if c.state in ("ready", "running", "spawning")]
    workers = sorted(active, key=runner.get_worker_index)
    plan = new_plan(cfg, lead)
    S.collector = LocustCollector(environment, cfg, plan, out_dir(cfg), workers)
    for k, wid in enumerate(workers):
        runner.send_message("loadgen_start", {**plan, "shard": k, "shards": len(workers)}, client_id=wid)
    refresh_loop_clock()


@events.test_stopping.add_listener
def _on_test_stopping(environment: Any, **_: Any) -> None:
    if S.role == "master":
        if S.collector is not None:
            environment.runner.send_message("loadgen_stop", {})
            S.collector.wait_for_finals((environment.stop_timeout or 0) * 2 + FINAL_WAIT_EXTRA_S)
        return
    if S.process is not None:
        S.process.stop(environment.stop_timeout or 0)


@events.test_stop.add_listener
def _on_test_stop(environment: Any, **_: Any) -> None:
    proc, S.process = S.process, None
    if S.role == "worker":
        if proc is not None:
            proc.stop_event.set()
            proc.ship(final=True)
        gc_quiet(False)
        return
    col = S.collector
    if col is None or col.result is not None:
        return
    if S.role == "local":
        processes = [proc.report()] if proc is not None else []
    else:
        processes = list(col.finals.values())
    result = col.finalize(processes, interrupted=S.quitting)
    gc_quiet(False)
    v = result["validity"]
    log.info("loadgen: %s, result written to %s", "VALID" if v["valid"] else "INVALID", col.out_dir / "result.json")


def _on_start_message(environment: Any, msg: Any, **_: Any) -> None:
    if S.process is not None:
        S.process.stop(0)
    gc_quiet(True)
    S.process = LoadProcess(environment, msg.data, None)
    refresh_loop_clock()


def _on_stop_message(environment: Any, msg: Any, **_: Any) -> None:
    if S.process is not None:
        environment.runner.stop()  # test_stopping -> drain -> users stopped -> test_stop -> final report
    if S.process is not None:  # stop() found nothing running (no users spawned): drain and report anyway
        S.process.stop(environment.stop_timeout or 0)
        _on_test_stop(environment)


def _on_records_message(environment: Any, msg: Any, **_: Any) -> None:
    if S.collector is not None:
        S.collector.add_packed(msg.node_id, msg.data)


def _on_final_message(environment: Any, msg: Any, **_: Any) -> None:
    if S.collector is not None:
        S.collector.finals[msg.node_id] = msg.data

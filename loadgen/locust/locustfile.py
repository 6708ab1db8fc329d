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
import os
from typing import TYPE_CHECKING, Any

import gevent
from locust import User, constant, events, task
from locust.rpc import Message
from locust.runners import MasterRunner, WorkerRunner

from loadgen.core.clock import now_ns
from loadgen.core.errors import ConfigError
from loadgen.locust import channel, form
from loadgen.locust.clocksync import ClockProbe, clock_refusal
from loadgen.locust.collect import LocustCollector
from loadgen.locust.dispatch import LoadProcess
from loadgen.locust.state import (
    FINAL_WAIT_EXTRA_S,
    LEAD_IN_NS,
    S,
    config_from_env,
    gc_quiet,
    new_plan,
    optional_config,
    out_dir,
    refresh_loop_clock,
    schedule_span,
)
from loadgen.locust.webui import install_web_ui

if TYPE_CHECKING:
    from locust.argument_parser import LocustArgumentParser
    from locust.env import Environment

log = logging.getLogger("loadgen.locust")


class LLMUser(User):
    """Closed loop: one streamed request at a time, the next as soon as the last ends.

    With ``--sessions`` a user is a session: one whole session at a time, the next when it ends
    (:mod:`loadgen.locust.session_user`). In open-loop mode the schedule sends and users idle (see
    the module docstring).
    """

    wait_time = constant(0)

    @task
    def generate(self) -> None:
        proc = S.process
        if proc is None or proc.cfg["mode"] == "open":
            gevent.sleep(1.0)
            return
        if proc.cfg["mode"] == "sessions":
            proc.session()
            return
        proc.closed_loop_request()


@events.init_command_line_parser.add_listener
def _on_parser(parser: LocustArgumentParser, **_: object) -> None:
    form.add_arguments(parser, optional_config())  # the start form's loadgen fields, defaulting to the CLI's


@events.init.add_listener
def _on_init(environment: Environment, **_: object) -> None:
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        S.role = "worker"
        runner.register_message("loadgen_start", _on_start_message)
        runner.register_message("loadgen_stop", _on_stop_message)
        runner.register_message("loadgen_challenge", _on_challenge_message)
        runner.register_message("loadgen_refused", _on_refused_message)
        S.probe = ClockProbe(runner)
        runner.register_message("loadgen_pong", _on_pong_message)
        runner.register_message("loadgen_lease", _on_lease_message)
        runner.send_message("loadgen_hello", None)  # handlers ready: a master with a token challenges now
        gevent.spawn(S.probe.run)  # this worker's clock offset to the master (loadgen.locust.clocksync)
        return
    S.role = "master" if isinstance(runner, MasterRunner) else "local"
    S.config = config_from_env()
    if isinstance(runner, MasterRunner):  # S.role == "master"
        runner.register_message("loadgen_records", _on_records_message)
        runner.register_message("loadgen_final", _on_final_message)
        runner.register_message("loadgen_auth", _on_auth_message)
        runner.register_message("loadgen_hello", _on_hello_message)
        runner.register_message("loadgen_ping", _on_ping_message)
        runner.register_message("loadgen_clock", _on_clock_message)
    if environment.web_ui is not None:
        install_web_ui(environment)
    refresh_loop_clock()


@events.quitting.add_listener
def _on_quitting(environment: Environment, **_: object) -> None:
    S.quitting = True


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: object) -> None:
    if S.role == "worker":
        return  # the shard came with loadgen_start, just before the spawn message
    gc_quiet(True)
    runner = environment.runner
    S.draining_since_ns = None
    lead = LEAD_IN_NS if S.role == "local" else LEAD_IN_NS + 1_000_000_000
    base = S.config or {}
    if environment.parsed_options is not None:  # the start form's (or the command line's) loadgen fields
        base = _sessions_stay(base, form.apply(base, form.values(environment.parsed_options)))
    cfg = schedule_span(environment, base, lead)
    if S.role == "local":
        plan = new_plan(cfg, lead)
        S.collector = LocustCollector(environment, cfg, plan, out_dir(cfg), [])
        S.process = LoadProcess(environment, plan, S.collector.add)
        refresh_loop_clock()
        return
    assert isinstance(runner, MasterRunner)  # S.role == "master"
    _settle_challenges(runner)
    active = [c.id for c in runner.clients.values() if c.state in ("ready", "running", "spawning")]
    workers = _with_clocks(runner, sorted((w for w in active if _trusted(w)), key=runner.get_worker_index))
    plan = new_plan(cfg, lead)
    S.collector = LocustCollector(environment, cfg, plan, out_dir(cfg), workers, {w: S.clocks[w] for w in workers})
    public = channel.public_config(plan["config"])  # no secret travels to a worker (loadgen.locust.channel)
    for k, wid in enumerate(workers):
        shard = {**plan, "config": public, "shard": k, "shards": len(workers),
                 "clock_offset_ns": S.clocks[wid]["offset_ns"]}  # fmt: skip
        runner.send_message("loadgen_start", shard, client_id=wid)
    refresh_loop_clock()


def _sessions_stay(base: dict[str, Any], applied: dict[str, Any]) -> dict[str, Any]:
    """``--sessions``: the form's SLO applies; the source sets the lengths and the users the load, so a
    rate typed in the form is ignored (said in the log) and the test stays a session test."""
    if base.get("mode") != "sessions":
        return applied
    if applied["rate"] is not None:
        log.warning("loadgen: --sessions runs one session per Locust user (closed loop): the rate is ignored")
    rec = {**applied["config_record"], "mode": "sessions", "rate": None}
    return {**base, "slos": applied["slos"], "config_record": rec}


@events.test_stopping.add_listener
def _on_test_stopping(environment: Environment, **_: object) -> None:
    if S.role != "worker" and S.collector is not None and S.collector.result is None:
        S.draining_since_ns, S.stop_timeout_s = now_ns(), environment.stop_timeout
    if S.role == "master":
        if S.collector is not None:
            assert environment.runner is not None
            environment.runner.send_message("loadgen_stop", {})
            S.collector.wait_for_finals((environment.stop_timeout or 0) * 2 + FINAL_WAIT_EXTRA_S)
        return
    if S.process is not None:
        S.process.stop(environment.stop_timeout or 0)


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_: object) -> None:
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
    S.draining_since_ns = None
    gc_quiet(False)
    v = result["validity"]
    log.info("loadgen: %s, result written to %s", "VALID" if v["valid"] else "INVALID", col.out_dir / "result.json")


def _on_start_message(environment: Environment, msg: Message, **_: object) -> None:
    if S.process is not None:
        S.process.stop(0)
    try:  # the master sent no secret: this worker's own fill the placeholders
        plan = {**msg.data, "config": channel.worker_config(msg.data["config"], channel.local_secrets())}
    except ConfigError as exc:
        _worker_quits(environment, f"loadgen: this worker cannot take part: {exc}")
        return
    gc_quiet(True)
    try:  # a --sessions file this worker reads (its own copy) is checked whole here: a bad one is said once
        S.process = LoadProcess(environment, plan, None)
    except ConfigError as exc:
        gc_quiet(False)
        _worker_quits(environment, f"loadgen: this worker cannot take part: {exc}")
        return
    refresh_loop_clock()


# -- the shared token (loadgen.locust.channel): the master challenges each connecting worker


@events.worker_connect.add_listener
def _on_worker_connect(client_id: str, **_: object) -> None:
    if os.environ.get(channel.MASTER_TOKEN_ENV) and client_id not in S.trusted:
        S.pending.add(client_id)  # its loadgen_hello asks for the challenge once its handlers are registered


def _on_hello_message(environment: Environment, msg: Message, **_: object) -> None:
    assert isinstance(environment.runner, MasterRunner)  # registered on the master only
    if os.environ.get(channel.MASTER_TOKEN_ENV) and msg.node_id not in S.trusted:
        S.pending.add(msg.node_id)
        S.nonces[msg.node_id] = nonce = os.urandom(16).hex()
        environment.runner.send_message("loadgen_challenge", {"nonce": nonce}, client_id=msg.node_id)


def _trusted(client_id: str) -> bool:
    return not os.environ.get(channel.MASTER_TOKEN_ENV) or client_id in S.trusted


def _settle_challenges(runner: MasterRunner, wait_s: float = 3.0) -> None:
    """Wait (cooperatively) for unanswered challenges, then refuse the workers that did not answer."""
    deadline = now_ns() + int(wait_s * 1e9)
    while any(c in runner.clients for c in S.pending) and now_ns() < deadline:
        gevent.sleep(0.05)
    for cid in list(S.pending):
        _refuse(runner, cid, "it did not answer the token challenge")


def _with_clocks(runner: MasterRunner, workers: list[str], wait_s: float = 5.0) -> list[str]:
    """The workers whose clock offset is measured within the bound (waiting, cooperatively, for those still
    pinging); each other one is refused in one line and gets no shard (loadgen.locust.clocksync)."""
    deadline = now_ns() + int(wait_s * 1e9)
    while any(w not in S.clocks and w in runner.clients for w in workers) and now_ns() < deadline:
        gevent.sleep(0.05)
    kept = []
    for w in workers:
        why = clock_refusal(S.clocks.get(w))
        if why is None:
            kept.append(w)
        else:
            _refuse(runner, w, why)
    return kept


def _on_ping_message(environment: Environment, msg: Message, **_: object) -> None:
    assert isinstance(environment.runner, MasterRunner)  # registered on the master only
    t2 = now_ns()  # the master's clock when the ping arrived
    environment.runner.send_message("loadgen_pong", {"seq": msg.data["seq"], "t2": t2}, client_id=msg.node_id)


def _on_lease_message(environment: Environment, msg: Message, **_: object) -> None:
    proc = S.process  # the master renews this worker's lease (loadgen.spread.lease)
    if proc is not None and proc.lease_ns is not None:
        proc.lease_ns = max(proc.lease_ns, int(msg.data["until_ns"]))


def _on_pong_message(environment: Environment, msg: Message, **_: object) -> None:
    if S.probe is not None:
        S.probe.on_pong(msg.data)


def _on_clock_message(environment: Environment, msg: Message, **_: object) -> None:
    if msg.data is not None:
        S.clocks[msg.node_id] = msg.data
        log.info("loadgen: worker %s clock offset %+.3f ms (within %.3f ms, %d pings)", msg.node_id,
                 msg.data["offset_ns"] / 1e6, msg.data["half_rtt_ns"] / 1e6, msg.data["pings"])  # fmt: skip


def _refuse(runner: MasterRunner, client_id: str, why: str) -> None:
    S.nonces.pop(client_id, None)
    S.pending.discard(client_id)
    log.warning("loadgen: worker %s refused: %s", client_id, why)
    runner.send_message("loadgen_refused", {"reason": why}, client_id=client_id)
    if client_id in runner.clients:  # as if it had stopped: no users, no shard
        runner.handle_message(client_id, Message("client_stopped", None, client_id))


def _on_auth_message(environment: Environment, msg: Message, **_: object) -> None:
    assert isinstance(environment.runner, MasterRunner)  # registered on the master only
    token, nonce = os.environ.get(channel.MASTER_TOKEN_ENV), S.nonces.pop(msg.node_id, None)
    if token and nonce and channel.verify(token, nonce, msg.node_id, (msg.data or {}).get("answer")):
        S.trusted.add(msg.node_id)
        S.pending.discard(msg.node_id)
    elif token:
        _refuse(environment.runner, msg.node_id, "wrong or missing --master-token-env token")


def _on_challenge_message(environment: Environment, msg: Message, **_: object) -> None:
    assert isinstance(environment.runner, WorkerRunner)  # registered on a worker only
    token = os.environ.get(channel.MASTER_TOKEN_ENV)
    runner = environment.runner
    mac = channel.answer(token, str(msg.data["nonce"]), runner.client_id) if token else None
    runner.send_message("loadgen_auth", {"answer": mac})


def _on_refused_message(environment: Environment, msg: Message, **_: object) -> None:
    why = (msg.data or {}).get("reason", "")
    _worker_quits(environment, f"loadgen: the master refused this worker: {why} (give --master-token-env)")


def _worker_quits(environment: Environment, line: str) -> None:
    assert environment.runner is not None
    log.error("%s", line)
    environment.process_exit_code = 2
    gevent.spawn(environment.runner.quit)


def _on_stop_message(environment: Environment, msg: Message, **_: object) -> None:
    assert environment.runner is not None
    if S.process is not None:
        environment.runner.stop()  # test_stopping -> drain -> users stopped -> test_stop -> final report
    if S.process is not None:  # stop() found nothing running (no users spawned): drain and report anyway
        S.process.stop(environment.stop_timeout or 0)
        _on_test_stop(environment)


def _on_records_message(environment: Environment, msg: Message, **_: object) -> None:
    if S.collector is not None and msg.node_id in S.collector.expected:  # only from workers handed a shard
        S.collector.add_packed(msg.node_id, msg.data)


def _on_final_message(environment: Environment, msg: Message, **_: object) -> None:
    if S.collector is not None and msg.node_id in S.collector.expected:
        S.collector.finals[msg.node_id] = msg.data

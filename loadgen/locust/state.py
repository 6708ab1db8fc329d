"""Process-wide state of a Locust process: its role, the configuration, the current test.

Held here, not in the Locust file: Locust loads ``locustfile.py`` by path as a
top-level module of its own, so state kept in that file would be a second copy
for any code that imports it as ``loadgen.locust.locustfile``. The configuration
arrives as JSON in ``LOADGEN_LOCUST_CONFIG`` (master or single process); workers
get it from the master with each test's plan.
"""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent

from loadgen.core.clock import wall_anchor
from loadgen.locust.clocksync import ClockProbe
from loadgen.locust.collect import LocustCollector
from loadgen.locust.dispatch import LoadProcess
from loadgen.workload.prompts import new_salt

if TYPE_CHECKING:
    from locust.env import Environment

CONFIG_ENV = "LOADGEN_LOCUST_CONFIG"
LEAD_IN_NS = 500_000_000  # open loop: t0 this far after the start (1 s more with workers)
FINAL_WAIT_EXTRA_S = 30.0
SCHEDULE_MARGIN_S = 0.25  # a -t schedule ends this long before the stop, so its last send is not cut


class ProcessState:
    """This Locust process: its role (local, master, worker), config, current test, runs so far."""

    role = "local"
    config: dict[str, Any] | None = None
    process: LoadProcess | None = None
    collector: LocustCollector | None = None
    runs = 0
    quitting = False
    draining_since_ns: int | None = None  # set from the stop until the result is written
    stop_timeout_s: float | None = None
    pending: set[str] = set()  # master with a token: workers connected that have not proven it yet
    nonces: dict[str, str] = {}  # master: worker id -> the challenge it has not answered yet
    trusted: set[str] = set()  # master with a token: the workers that answered their challenge
    clocks: dict[str, dict[str, Any]] = {}  # master: worker id -> its measured clock (loadgen.locust.clocksync)
    probe: ClockProbe | None = None  # worker: its pings of the master


S = ProcessState()


def config_from_env() -> dict[str, Any]:
    """The configuration ``loadgen locust`` resolved (master or single process); SystemExit without it."""
    text = os.environ.get(CONFIG_ENV)
    if not text:
        raise SystemExit(f"loadgen's Locust file needs its configuration: start it with `loadgen locust` "
                         f"({CONFIG_ENV} is not set)")  # fmt: skip
    return json.loads(text)


def optional_config() -> dict[str, Any] | None:
    """The configuration when this process has one (master or single process), else None (a worker)."""
    text = os.environ.get(CONFIG_ENV)
    return json.loads(text) if text else None


def new_plan(cfg: dict[str, Any], lead_ns: int) -> dict[str, Any]:
    """One test's plan: the config, a run id, the prompt salt and a common t0 (``lead_ns`` ahead in open loop)."""
    salt = cfg["workload"].get("salt") or new_salt()
    mono, wall = wall_anchor()
    t0 = mono + (lead_ns if cfg["mode"] == "open" else 0)
    return {
        "config": cfg, "run_id": os.urandom(6).hex(), "salt": salt, "shard": 0, "shards": 1,
        "t0_mono_ns": t0, "t0_wall_ns": wall + (t0 - mono),
    }  # fmt: skip


def out_dir(cfg: dict[str, Any]) -> Path:
    """The output directory of the next test: ``out_dir`` for the first, ``out_dir/run-N`` after."""
    base = Path(cfg["out_dir"])
    S.runs += 1
    return base if S.runs == 1 else base / f"run-{S.runs}"


def schedule_span(env: Environment, cfg: dict[str, Any], lead_ns: int) -> dict[str, Any]:
    """Open loop without --requests/--duration: the schedule fills Locust's -t after the lead-in
    (else one hour, ended by the stop button)."""
    if cfg["mode"] == "open" and cfg["requests"] is None and cfg["duration_s"] is None:
        rt = getattr(env.parsed_options, "run_time", None) if env.parsed_options else None
        cfg = {**cfg, "duration_s": max(float(rt) - lead_ns / 1e9 - SCHEDULE_MARGIN_S, 0.001) if rt else 3600.0}
    return cfg


def refresh_loop_clock() -> None:
    """Re-read the gevent loop's cached time after blocking work (imports, set-up).

    libev/libuv time timers from the time cached at the loop's last iteration: after
    seconds of blocking start-up, Locust's ``-t`` timer would otherwise fire early.
    """
    gevent.get_hub().loop.update_now()


_GC: dict[str, Any] = {}


def gc_quiet(on: bool) -> None:
    """Collect and freeze the start-up heap while a test runs, so cyclic GC passes over it do
    not stall the hub for tens of ms (as :mod:`loadgen.engine.runner` does for its event loop)."""
    if on and not _GC:
        _GC["threshold"] = gc.get_threshold()
        gc.collect()
        gc.freeze()
        gc.set_threshold(max(_GC["threshold"][0], 50_000), 50, 1000)
    elif not on and _GC:
        gc.set_threshold(*_GC.pop("threshold"))
        gc.unfreeze()

"""Requests prepared before the clock starts: prompts built before t0, within a memory and time budget.

Building a request's prompt costs CPU: a 32k-token synthetic prompt ~1.3 ms, a 128k one ~5 ms,
and with ``--tokenizer`` (fitted to the exact length by counting it) ~25 ms for 32k. Built inside
the run, that CPU is taken from the stamps and the sends of every other request (issue 31: 26 ms
a request at 32k tokens made loadgen 12x slower than a client that builds first). So before t0
the runner builds the first requests of its plan, in order (the same specs it would build later:
building is seeded), until one of

* the plan's requests are all built (open loop: the schedule's length; closed loop: ``--requests``);
* ``PREPARE_BYTES`` of prompts are held (``spec_bytes``: text, messages and token ids);
* the time budget is spent: ``PREPARE_SHARE`` of the run's planned length (open loop: the
  schedule's; a timed closed loop: its duration), at least ``PREPARE_MIN_S`` and at most
  ``PREPARE_MAX_S`` (a closed loop of ``--requests``, whose length is not known: ``PREPARE_MAX_S``);
  a t0 fixed before preparation ends it ``PREPARE_T0_MARGIN_NS`` before t0.
* a timed closed loop (its count unknown) holds at most ``PREPARE_TURNS`` requests a user;
* past ``PREPARE_CHEAP_AFTER`` requests, building is cheap (under ``PREPARE_CHEAP_NS`` a request on
  average, short prompts): the rest cost the run a few microseconds each, not worth the memory and the
  start-up time of holding them all.

The rest are built inside the run as before (open loop: in the dispatcher's slack, never within
``BUILD_GUARD_NS`` of a send; closed loop: at their user's turn) and counted with the CPU they took
(``built_in_run``, ``built_in_run_cpu_s``): ``client.preparation`` in result.json says which
happened. Preparation happens before the run's CPU and wall clocks start: it is never inside the
window or the client's CPU figure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loadgen.core.clock import now_ns
from loadgen.core.types import RequestSpec

__all__ = [
    "PREPARE_BYTES",
    "PREPARE_CHEAP_AFTER",
    "PREPARE_CHEAP_NS",
    "PREPARE_MAX_S",
    "PREPARE_MIN_S",
    "PREPARE_SHARE",
    "PREPARE_T0_MARGIN_NS",
    "PREPARE_TURNS",
    "Preparation",
    "prepare_specs",
    "spec_bytes",
]

PREPARE_BYTES = 256 * 1024 * 1024  # prompts held before t0 at most (a 32k-token prompt is ~180 KB of text)
PREPARE_SHARE = 0.25  # preparation takes at most this share of the run's planned length...
PREPARE_MIN_S = 2.0  # ...but may always take this long...
PREPARE_MAX_S = 60.0  # ...and never longer than this (a closed loop of --requests: this long)
PREPARE_T0_MARGIN_NS = 20_000_000  # a given t0 (workers): preparation ends this long before it
PREPARE_TURNS = 256  # a timed closed loop (its count unknown): at most this many requests a user
PREPARE_YIELD_NS = 20_000_000  # preparation lets the event loop run (a signal, a stop) this often
PREPARE_NOTICE_NS = 1_000_000_000  # a preparation this long says so once (RunEngine.on_preparing)
PREPARE_CHEAP_NS = 50_000  # past PREPARE_CHEAP_AFTER requests, requests cheaper than this each (mean) are...
PREPARE_CHEAP_AFTER = 256  # ...left to the run: holding thousands of them would cost memory and start-up time for
# a few microseconds a request (a 128-token prompt ~10 us), counted all the same (built_in_run_cpu_s)

_INT_BYTES = 36  # a token id in a tuple: its pointer and (above 256) its int object


def spec_bytes(spec: RequestSpec) -> int:
    """The memory a built spec holds, approximately: its prompt text, message contents and token ids."""
    n = len(spec.prompt)
    if spec.messages:
        for m in spec.messages:
            c = m.get("content")
            if isinstance(c, str) and c is not spec.prompt:
                n += len(c)
    if spec.prompt_token_ids is not None:
        n += _INT_BYTES * len(spec.prompt_token_ids)
    return n + 200


@dataclass
class Preparation:
    """What was built before t0 (``requests`` of ``of``; ``of`` None: a timed closed loop, whose
    count is not known before it runs), what it holds and took, what stopped it, and what the run
    built itself."""

    requests: int = 0
    of: int | None = None
    bytes: int = 0
    seconds: float = 0.0
    stopped_by: str | None = None  # None: all built; "memory", "time", "turns", "cheap", "stop"
    built_in_run: int = 0
    built_in_run_cpu_s: float = 0.0

    def charge(self, cpu0_ns: int) -> None:
        """Count one spec built inside the run, begun at thread CPU time ``cpu0_ns`` (``time.thread_time_ns``)."""
        self.built_in_run += 1
        self.built_in_run_cpu_s += (time.thread_time_ns() - cpu0_ns) / 1e9

    def describe(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "of": self.of,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 4),
            "stopped_by": self.stopped_by,
            "built_in_run": self.built_in_run,
            "built_in_run_cpu_s": round(self.built_in_run_cpu_s, 4),
        }

    def merge(self, other: dict[str, Any]) -> None:
        """Add another process's preparation (``describe()``'s form): counts add, the time is the longest."""
        self.requests += int(other.get("requests") or 0)
        if self.of is not None:
            self.of = None if other.get("of") is None else self.of + int(other["of"])
        self.bytes += int(other.get("bytes") or 0)
        self.seconds = max(self.seconds, float(other.get("seconds") or 0.0))
        self.stopped_by = self.stopped_by or other.get("stopped_by")
        self.built_in_run += int(other.get("built_in_run") or 0)
        self.built_in_run_cpu_s += float(other.get("built_in_run_cpu_s") or 0.0)


def time_budget_ns(planned_s: float | None, t0_ns: int | None) -> int:
    """The deadline (monotonic ns) of preparation for a run of ``planned_s`` seconds (None: a run of a
    known count and unknown length, a closed loop of ``--requests``: ``PREPARE_MAX_S``)."""
    share = PREPARE_MAX_S if planned_s is None else planned_s * PREPARE_SHARE
    end = now_ns() + int(min(max(share, PREPARE_MIN_S), PREPARE_MAX_S) * 1e9)
    if t0_ns is not None:
        end = min(end, t0_ns - PREPARE_T0_MARGIN_NS)
    return end


async def prepare_specs(
    build: Callable[[int], RequestSpec],
    count: int | None,
    *,
    deadline_ns: int,
    budget_bytes: int | None = None,
    stop: Callable[[], bool] = lambda: False,
    notice: Callable[[str], None] | None = None,
) -> tuple[list[RequestSpec], Preparation]:
    """Build ``build(0), build(1), ...`` (``count`` of them, None: until a budget ends it) before t0,
    holding at most ``budget_bytes`` (None: ``PREPARE_BYTES``).

    Returns the specs and the :class:`Preparation` record. The first is always built (a run sends
    at least one request) unless ``count`` is 0 or the run was stopped first. Every
    ``PREPARE_YIELD_NS`` the event loop runs (a signal handler sets ``stop``). A preparation still going
    after ``PREPARE_NOTICE_NS`` says so once through ``notice`` (the CLI prints it: the run has not begun).
    """
    if budget_bytes is None:
        budget_bytes = PREPARE_BYTES
    t = time.perf_counter()
    specs: list[RequestSpec] = []
    prep = Preparation(of=count)
    held = 0
    t_ns = now_ns()
    next_yield = t_ns + PREPARE_YIELD_NS
    while count is None or len(specs) < count:
        if specs:
            if held >= budget_bytes:
                prep.stopped_by = "memory"
                break
            now = now_ns()
            if now >= deadline_ns:
                prep.stopped_by = "time"
                break
            if len(specs) >= PREPARE_CHEAP_AFTER and (now - t_ns) < PREPARE_CHEAP_NS * len(specs):
                prep.stopped_by = "cheap"
                break
            if now >= next_yield:
                if notice is not None and now - t_ns >= PREPARE_NOTICE_NS:
                    of = "" if count is None else f" of {count:,}"
                    notice(f"preparing requests before the clock: {len(specs):,}{of} built in "
                           f"{(now - t_ns) / 1e9:.1f} s (the run starts when they are; Ctrl-C stops)")  # fmt: skip
                    notice = None
                await asyncio.sleep(0)
                next_yield = now_ns() + PREPARE_YIELD_NS
        if stop():
            prep.stopped_by = "stop"
            break
        spec = build(len(specs))
        specs.append(spec)
        held += spec_bytes(spec)
    prep.requests = len(specs)
    prep.bytes = held
    prep.seconds = time.perf_counter() - t
    return specs, prep

"""Leases: what the driver knows a lost worker may have sent, so its losses are counted where they happened.

A worker (a ``--workers`` process or a ``--cluster`` actor) may start a send only before its lease: an
instant, as an offset from the run's t0 (the same instant on every host), that the driver moves to
``now + LEASE_AHEAD_NS`` every :data:`LEASE_RENEW_S` while it hears from the worker (a shared
``int64`` for a local process, each ``take()`` call for an actor). A send due past its lease waits for
the renewal (:meth:`loadgen.engine.lifecycle.RunEngine._await_lease`); a lease not renewed for
``LEASE_LOST_NS`` stops the worker, so an actor cut off from the driver, or back after the run, sends
nothing more.

So when a worker is lost (killed, its node gone, unresponsive), the driver splits what it never delivered
(:func:`split_missing`) by the last lease it granted:

- **lost with the client**: open loop, the entries of its shard due before that lease and never
  delivered: sent (the server may have received and answered them; their records died with the worker), or
  about to be sent in the lease's last :data:`LEASE_AHEAD_NS`, at most. Closed loop: one request in flight
  per user of its shard, at most what its budget had left. A request the server received is never
  "unsent" (issue 34: 19 were, after a killed node).
- **unsent**: the rest, never sent: due after the lease, which no send may pass.

Session runs are leased the same way (each turn's send waits for it); their split counts turns from the
shard's sizes the workers reported, without a schedule: everything missing is unsent there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from loadgen.core.schedule import as_schedule
from loadgen.engine.lifecycle import LEASE_LOST_NS

__all__ = ["LEASE_AHEAD_NS", "LEASE_LOST_NS", "LEASE_RENEW_S", "split_by_lease", "split_missing"]

LEASE_AHEAD_NS = 1_000_000_000
"""How far past the driver's now a lease reaches: the driver may stall this long before a worker waits."""
LEASE_RENEW_S = 0.2
"""How often the driver renews the leases of the workers it hears from (a local process's; an actor's with
each ``take()``, at most ``TAKE_WAIT_S`` apart)."""


def split_missing(plan: Any, w: int, n: int, missing: int, leased_ns: int | None) -> tuple[int, int]:
    """``(lost with the client, unsent)`` of the ``missing`` requests of worker ``w`` of ``n`` (its shard
    less what it delivered), by its last lease ``leased_ns`` (offset from t0; None: it never got "go")."""
    if missing <= 0 or leased_ns is None:
        return 0, max(missing, 0)
    if plan.mode == "open":
        if plan.schedule is None:
            return 0, missing
        shard = as_schedule(plan.schedule).offsets_ns[w::n]
        return split_by_lease(shard, len(shard) - missing, leased_ns)
    if plan.mode != "closed":  # sessions: no schedule the driver knows
        return 0, missing
    users = plan.concurrency // n + (1 if w < plan.concurrency % n else 0)
    lost = min(users, missing)
    return lost, missing - lost


def split_by_lease(shard_offsets_ns: np.ndarray, delivered: int, leased_ns: int | None) -> tuple[int, int]:
    """``(lost with the client, unsent)`` of an open-loop shard (its sorted send offsets from t0) of which
    ``delivered`` requests reached the driver, by the last lease granted (None: it never got "go")."""
    missing = max(len(shard_offsets_ns) - delivered, 0)
    if leased_ns is None:
        return 0, missing
    due_before = int(np.searchsorted(shard_offsets_ns, leased_ns, side="left"))
    lost = min(max(due_before - delivered, 0), missing)
    return lost, missing - lost

"""Client-side load balancing: one endpoint over N replicas (``--endpoint`` given several times).

:class:`BalancedEndpoint` wraps N endpoint instances (each with its own connection pool, its own
URL and credentials: a replica's key or URL userinfo is only ever sent to that replica) and picks
one per request:

* ``round-robin``: request k goes to replica k mod N, in the order requests are started (so the
  counts of any run differ by at most one). Prepared (gated) sends pass through: the pick is made
  when a request is prepared, which for round robin changes nothing.
* ``least-outstanding``: the replica with the fewest requests in flight from this client (ties:
  the next in round-robin order). The pick is made at the scheduled time, so this policy takes
  no prepared sends (:meth:`BalancedEndpoint.accepts_send_gate` is False): a request prepared
  10 ms early would be balanced on stale counts.

**A replica that fails does not take the run** (issue 34): :data:`EJECT_AFTER` consecutive requests that
failed to connect (refused, reset, connect timeout: ``error_kind`` ``connect``) eject a replica for a
back-off of :data:`BACKOFF_MIN_S`, doubling at each ejection up to :data:`BACKOFF_MAX_S`; both policies
skip it meanwhile (before, a dead replica failed fast, so it always looked least loaded: it got 93 of 175
requests, 89 of them failed). When its back-off ends the next request re-probes it: one more connect
failure ejects it again, a success restores it (and its back-off). With every replica ejected the
requests go round-robin over all (a re-probe each, never a stop). ``describe`` gives each replica's
``ejections``.

Each record says which replica served it (``RequestRecord.replica``, the 0-based position of
its ``--endpoint``; ``requests.jsonl`` ``replica``). :meth:`BalancedEndpoint.describe` gives,
per replica, its URL (secrets out) and the counts of the requests it was given since the
previous ``describe()`` (``measure`` describes the endpoint once per run, at its end, so each
``result.json`` holds that run's counts, warm-up apart) and in all.

``open`` opens every replica at once: each passes its own discovery and pre-flight, and all must
serve the same model. A replica that fails is named in one line (:class:`~loadgen.core.errors.ConfigError`
or :class:`~loadgen.core.errors.EndpointUnreachable`, as the replica's own failure): no load is sent
unless every replica is ready.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from loadgen.core.errors import ConfigError, EndpointUnreachable
from loadgen.core.redact import split_url_secrets
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.base import Endpoint, EndpointBase

__all__ = ["BACKOFF_MAX_S", "BACKOFF_MIN_S", "BALANCE_POLICIES", "EJECT_AFTER", "BalancedEndpoint"]

BALANCE_POLICIES = ("round-robin", "least-outstanding")
EJECT_AFTER = 3
"""Consecutive failed connects that eject a replica (module docstring)."""
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 30.0


def _replica_url(ep: Endpoint) -> str:
    """The replica's URL as records show it: no userinfo, credential-like query values as ***."""
    url = getattr(ep, "url_for_record", None) or getattr(ep.config, "base_url", None) or getattr(ep.config, "url", "")
    return split_url_secrets(str(url))[0]


class _Tally:
    """One replica's request counts: given (picked), ok, failed; in all and since the last describe()."""

    __slots__ = ("failed", "given", "ok", "total_given", "warmup")

    def __init__(self) -> None:
        self.given = self.ok = self.failed = self.warmup = self.total_given = 0

    def take(self) -> dict[str, int]:
        out = {"requests": self.given, "ok": self.ok, "failed": self.failed, "warmup": self.warmup,
               "requests_in_all": self.total_given}  # fmt: skip
        self.given = self.ok = self.failed = self.warmup = 0
        return out


class BalancedEndpoint(EndpointBase):
    """N endpoints behind one, a replica picked per request (policies in the module docstring).

    ``replicas``: unopened endpoints (one per ``--endpoint``, in order). ``config`` is the first
    replica's (the model, the API): every replica is built from the same options but its URL.
    Raises :class:`ConfigError` for fewer than two replicas or an unknown policy.
    """

    def __init__(self, replicas: Sequence[Endpoint], policy: str = "round-robin") -> None:
        if len(replicas) < 2:
            raise ConfigError("a balanced endpoint needs at least two replicas (--endpoint given twice or more)")
        if policy not in BALANCE_POLICIES:
            raise ConfigError(f"--balance {policy!r}: expected one of {', '.join(BALANCE_POLICIES)}")
        self.replicas = list(replicas)
        self.policy = policy
        self.config = self.replicas[0].config
        self.urls = [_replica_url(ep) for ep in self.replicas]
        self.outstanding = [0] * len(self.replicas)
        self._next = 0
        self._tally = [_Tally() for _ in self.replicas]
        n = len(self.replicas)
        self._connect_fails = [0] * n  # consecutive failed connects
        self._ejected_until = [0.0] * n  # monotonic s: skipped until then
        self._backoff_s = [BACKOFF_MIN_S] * n
        self.ejections = [0] * n

    # --- lifecycle -----------------------------------------------------------------

    async def open(self) -> None:
        """Open every replica at once (discovery, pre-flight); all must serve one model.

        Raises the failing replica's own error class with its position and URL in front; the
        replicas already open are closed again."""
        results = await asyncio.gather(*(ep.open() for ep in self.replicas), return_exceptions=True)
        for i, res in enumerate(results):
            if isinstance(res, asyncio.CancelledError):
                raise res
            if isinstance(res, BaseException):
                await self.close()
                if isinstance(res, ConfigError | EndpointUnreachable):
                    raise type(res)(
                        f"replica {i + 1} of {len(self.replicas)} ({self.urls[i]}) did not pass discovery/pre-flight: {res}"
                    ) from None
                raise res
        models = [getattr(ep.config, "model", None) for ep in self.replicas]
        odd = next((i for i, m in enumerate(models) if m != models[0]), None)
        if odd is not None:
            await self.close()
            raise ConfigError(
                f"replica {odd + 1} of {len(self.replicas)} ({self.urls[odd]}) serves model {models[odd]!r}, "
                f"replica 1 ({self.urls[0]}) {models[0]!r}: the replicas of one run serve one model (give --model)"
            )
        for i, ep in enumerate(self.replicas):  # a listing that leaves out the model named: not this replica
            listed = getattr(ep, "served_models", None) or []
            if listed and models[0] not in listed:
                await self.close()
                raise ConfigError(
                    f"replica {i + 1} of {len(self.replicas)} ({self.urls[i]}) does not list model {models[0]!r} "
                    f"(it serves {', '.join(map(str, listed[:5]))}): the replicas of one run serve one model"
                )

    async def close(self) -> None:
        for ep in self.replicas:
            try:
                await ep.close()
            except Exception:  # one replica's failed close must not leave the others open
                pass

    # --- requests ------------------------------------------------------------------

    def pick(self) -> int:
        """The replica for the next request (see the module docstring); counts it as outstanding."""
        n = len(self.replicas)
        now = time.monotonic()
        order = [j % n for j in range(self._next, self._next + n)]
        live = [j for j in order if self._ejected_until[j] <= now] or order  # all ejected: re-probe them in turn
        if self.policy == "round-robin":
            i = live[0]
        else:
            low = min(self.outstanding[j] for j in live)
            i = next(j for j in live if self.outstanding[j] == low)
        self._next = (i + 1) % n
        self.outstanding[i] += 1
        return i

    def _settle(self, i: int, record: RequestRecord) -> None:
        """Replica ``i``'s connect failures counted, an ejection or a restoration (module docstring)."""
        if record.ok or record.error_kind != "connect":
            if self._connect_fails[i] or self._backoff_s[i] > BACKOFF_MIN_S:
                self._connect_fails[i], self._backoff_s[i] = 0, BACKOFF_MIN_S
            return
        self._connect_fails[i] += 1
        if self._connect_fails[i] >= EJECT_AFTER:
            self._ejected_until[i] = time.monotonic() + self._backoff_s[i]
            self._backoff_s[i] = min(self._backoff_s[i] * 2, BACKOFF_MAX_S)
            self._connect_fails[i] = EJECT_AFTER - 1  # its re-probe: one more failed connect ejects it again
            self.ejections[i] += 1

    async def send(self, spec: RequestSpec, record: RequestRecord, gate: asyncio.Event | None = None) -> None:
        i = self.pick()
        record.replica = i
        t = self._tally[i]
        t.given += 1
        t.total_given += 1
        try:
            if gate is None:
                await self.replicas[i].send(spec, record)
            else:
                await self.replicas[i].send(spec, record, gate)
        finally:
            self.outstanding[i] -= 1
            self._settle(i, record)
            if record.phase == "warmup":
                t.warmup += 1
            elif record.ok:
                t.ok += 1
            else:
                t.failed += 1

    def accepts_send_gate(self) -> bool:
        """Round robin: when every replica takes prepared sends; least-outstanding: never (the
        pick is made at the scheduled time, on the counts of that moment)."""
        return self.policy == "round-robin" and all(ep.accepts_send_gate() for ep in self.replicas)

    def worker_config(self, workers: int) -> Any | None:
        """None: the balancer's counts live in one process (no ``--workers``)."""
        return None

    def describe(self) -> dict[str, Any]:
        """The first replica's description (model, API, client settings) with ``balance``: the
        policy and, per replica, its URL, served models and the counts since the previous
        describe() (``requests`` = ``ok`` + ``failed`` + ``warmup`` when no request is in flight)."""
        first = self.replicas[0].describe()
        reps = []
        for i, ep in enumerate(self.replicas):
            d = ep.describe() if i else first
            reps.append({"replica": i, "url": self.urls[i], "server_version": d.get("server_version"),
                         "served_models": d.get("served_models"), **self._tally[i].take(),
                         "ejections": self.ejections[i]})  # fmt: skip
        return {**first, "balance": {"policy": self.policy, "replicas": reps}}

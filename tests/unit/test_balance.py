"""The client-side balancer (loadgen.endpoints.balance) over fake replicas: picks, counts, open failures."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from loadgen.core.errors import ConfigError, EndpointUnreachable
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.balance import BalancedEndpoint


@dataclass
class Cfg:
    base_url: str
    model: str | None = None


@dataclass
class Fake:
    config: Cfg
    served: str = "m"
    fail: Exception | None = None
    hold: asyncio.Event | None = None
    sent: list[int] = field(default_factory=list)
    closed: bool = False
    gate_ok: bool = True
    served_models: list[str] = field(default_factory=list)  # what its /v1/models listed

    async def open(self) -> None:
        if self.fail is not None:
            raise self.fail
        self.config.model = self.config.model or self.served

    async def close(self) -> None:
        self.closed = True

    async def send(self, spec: RequestSpec, record: RequestRecord, gate: asyncio.Event | None = None) -> None:
        self.sent.append(spec.index)
        if self.hold is not None:
            await self.hold.wait()
        record.status = "ok"

    def describe(self) -> dict[str, Any]:
        return {"kind": "fake", "url": self.config.base_url, "served_models": [self.served]}

    def accepts_send_gate(self) -> bool:
        return self.gate_ok

    def worker_config(self, workers: int) -> Any:
        return None


def _rec(i: int) -> RequestRecord:
    return RequestRecord(index=i, phase="measure", scheduled_ns=0)


def _spec(i: int) -> RequestSpec:
    return RequestSpec(index=i, prompt="x", requested_output_tokens=1)


def test_round_robin_in_turn_and_counts_per_describe() -> None:
    reps = [Fake(Cfg(f"http://127.0.0.1:{p}")) for p in (1, 2, 3)]
    ep = BalancedEndpoint(reps)

    async def go() -> list[RequestRecord]:
        await ep.open()
        recs = [_rec(i) for i in range(7)]
        for i, r in enumerate(recs):
            await ep.send(_spec(i), r)
        return recs

    recs = asyncio.run(go())
    assert [r.replica for r in recs] == [0, 1, 2, 0, 1, 2, 0]
    assert [f.sent for f in reps] == [[0, 3, 6], [1, 4], [2, 5]]
    d = ep.describe()["balance"]
    assert d["policy"] == "round-robin" and [r["requests"] for r in d["replicas"]] == [3, 2, 2]
    assert [r["ok"] for r in d["replicas"]] == [3, 2, 2]
    again = ep.describe()["balance"]["replicas"]  # counts since the last describe (one run's)
    assert [r["requests"] for r in again] == [0, 0, 0] and [r["requests_in_all"] for r in again] == [3, 2, 2]
    assert ep.accepts_send_gate()


def test_least_outstanding_skips_the_busy_replica() -> None:
    hold = asyncio.Event()
    reps = [Fake(Cfg("http://127.0.0.1:1"), hold=hold), Fake(Cfg("http://127.0.0.1:2"))]
    ep = BalancedEndpoint(reps, "least-outstanding")
    assert not ep.accepts_send_gate()  # picked at the scheduled time, not when prepared

    async def go() -> list[RequestRecord]:
        await ep.open()
        recs = [_rec(i) for i in range(5)]
        stuck = asyncio.create_task(ep.send(_spec(0), recs[0]))  # replica 0 holds it
        await asyncio.sleep(0)
        for i in range(1, 5):  # replica 1 answers at once: always the least outstanding
            await ep.send(_spec(i), recs[i])
        assert ep.outstanding == [1, 0]
        hold.set()
        await stuck
        return recs

    recs = asyncio.run(go())
    assert [r.replica for r in recs] == [0, 1, 1, 1, 1]
    assert ep.outstanding == [0, 0]


def test_open_names_the_failing_replica_and_closes_the_rest() -> None:
    ok = Fake(Cfg("http://127.0.0.1:1"))
    bad = Fake(Cfg("http://user:pw@127.0.0.1:2"), fail=EndpointUnreachable("cannot reach it"))
    ep = BalancedEndpoint([ok, bad])
    with pytest.raises(EndpointUnreachable) as e:
        asyncio.run(ep.open())
    assert str(e.value).startswith("replica 2 of 2 (http://127.0.0.1:2) did not pass discovery/pre-flight")
    assert "pw" not in str(e.value) and ok.closed


def test_replicas_must_serve_one_model() -> None:
    ep = BalancedEndpoint([Fake(Cfg("http://127.0.0.1:1")), Fake(Cfg("http://127.0.0.1:2"), served="other")])
    with pytest.raises(ConfigError, match=r"replica 2 of 2 \(http://127.0.0.1:2\) serves model 'other'"):
        asyncio.run(ep.open())


def test_a_replica_that_does_not_list_the_named_model_is_refused() -> None:
    listed = Fake(Cfg("http://127.0.0.1:1", model="m"), served_models=["m"])
    other = Fake(Cfg("http://127.0.0.1:2", model="m"), served_models=["llama", "qwen"])
    with pytest.raises(ConfigError, match=r"replica 2 of 2 \(http://127.0.0.1:2\) does not list model 'm'"):
        asyncio.run(BalancedEndpoint([listed, other]).open())
    assert listed.closed and other.closed


def test_needs_two_replicas_and_a_known_policy() -> None:
    with pytest.raises(ConfigError):
        BalancedEndpoint([Fake(Cfg("http://127.0.0.1:1"))])
    with pytest.raises(ConfigError, match="--balance"):
        BalancedEndpoint([Fake(Cfg("http://a:1")), Fake(Cfg("http://b:2"))], "random")


def test_cli_replicas_share_the_clients_caps_and_run_in_one_process() -> None:
    import click

    from loadgen.cli.target import balanced_endpoint
    from loadgen.cli.target_options import EndpointOptions
    from loadgen.core.redact import Redactor

    kw = {"api": "completions", "model": "m", "headers": (), "header_envs": (), "api_key_env": None,
          "extra_body": None, "timeout": "600s", "connect_timeout": "10s", "max_rpm": 600.0, "balance": "round-robin"}  # fmt: skip
    ep = balanced_endpoint(EndpointOptions.from_kw(kw), ["http://127.0.0.1:1", "http://127.0.0.1:2?key=k"], Redactor())
    assert isinstance(ep, BalancedEndpoint)
    assert [r.config.max_rpm for r in ep.replicas] == [300.0, 300.0]  # 600 per minute in all
    assert ep.urls == ["http://127.0.0.1:1/v1/completions", "http://127.0.0.1:2/v1/completions?key=***"]
    with pytest.raises(click.UsageError, match="--workers"):
        balanced_endpoint(
            EndpointOptions.from_kw({**kw, "workers": "2"}), ["http://127.0.0.1:1", "http://127.0.0.1:2"], Redactor()
        )


@dataclass
class Dead(Fake):
    """A replica whose connects are refused (killed mid-run), or not (``alive``)."""

    alive: bool = False

    async def send(self, spec: RequestSpec, record: RequestRecord, gate: asyncio.Event | None = None) -> None:
        self.sent.append(spec.index)
        if self.alive:
            record.status = "ok"
        else:
            record.status, record.error_kind = "error", "connect"


@pytest.mark.parametrize("policy", ["round-robin", "least-outstanding"])
def test_a_dead_replica_is_ejected_then_re_probed_and_restored(policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34 item 4: a killed replica fails fast, so least-outstanding sent it most of the load (93 requests,
    89 failed) and round robin half. Three failed connects eject it for a back-off; the next request after the
    back-off re-probes it (one failure ejects it again, for twice as long); a success restores it."""
    from loadgen.endpoints import balance

    now = [1000.0]
    monkeypatch.setattr(balance.time, "monotonic", lambda: now[0])
    live, dead = Fake(Cfg("http://a")), Dead(Cfg("http://b"))
    ep = BalancedEndpoint([live, dead], policy)

    async def go(n: int, first: int) -> None:
        for i in range(first, first + n):
            await ep.send(_spec(i), _rec(i))

    asyncio.run(go(20, 0))
    assert len(dead.sent) == 3 and len(live.sent) == 17 and ep.ejections == [0, 1]  # 3 failed connects, then none
    now[0] += balance.BACKOFF_MIN_S + 0.1
    asyncio.run(go(10, 20))
    assert len(dead.sent) == 4 and ep.ejections == [0, 2]  # one re-probe, ejected again at once
    now[0] += 2 * balance.BACKOFF_MIN_S + 0.1
    dead.alive = True
    asyncio.run(go(10, 30))
    assert len(dead.sent) >= 8  # restored after its re-probe succeeded: it takes its share again
    assert ep.describe()["balance"]["replicas"][1]["ejections"] == 2

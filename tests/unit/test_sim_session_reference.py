"""The virtual-clock session reference: causality, exact TTFTs with the prefix cache, capacity answers."""

from __future__ import annotations

from loadgen.core.slo import parse_slo
from loadgen.sim.model import SimParams
from loadgen.sim.session_reference import session_capacity, simulate_sessions
from loadgen.workload.session_model import Session, Turn

P = SimParams(slots=8, ttft_ms=5.0, prefill_per_token_ms=1.0, itl_ms=2.0)


def _sessions(n: int, turns: int = 5, delay_s: float = 0.5, system: int = 64) -> list[Session]:
    return [
        Session(
            f"s{i}",
            tuple(Turn(4, new_tokens=40, delay_s=delay_s if k else 0.0) for k in range(turns)),
            system_tokens=system,
        )  # fmt: skip
        for i in range(n)
    ]


def test_one_session_turns_are_causal_and_pay_only_uncached_prefill() -> None:
    (res) = simulate_sessions(P, _sessions(1), [0], cache_blocks=10_000, block_tokens=16)
    assert [r.turn for r in res] == list(range(5))
    for prev, cur in zip(res, res[1:]):
        assert cur.due_ns == prev.end_ns + 500_000_000  # the previous reply's end + the delay
        assert cur.prompt_tokens == prev.prompt_tokens + 4 + 40  # history + reply + new message
    # whole 16-token blocks of the previous prompt + reply (108, 152, 196, 240 tokens)
    assert [r.cached_tokens for r in res] == [0, 96, 144, 192, 240]
    for r in res:  # a lone request: TTFT = ttft + prefill per uncached token
        assert r.first_token_ns - r.due_ns == round((5.0 + 1.0 * (r.prompt_tokens - r.cached_tokens)) * 1e6)
    cold = simulate_sessions(P, _sessions(1), [0])
    assert all(r.cached_tokens == 0 for r in cold)
    assert cold[-1].first_token_ns - cold[-1].due_ns > res[-1].first_token_ns - res[-1].due_ns


def test_capacity_rises_with_the_cache_and_without_salting() -> None:
    slo = parse_slo("ttft:p90<=600ms")
    sessions = _sessions(60, turns=4, delay_s=0.2, system=200)
    cold = session_capacity(P, sessions, slo, rel_precision=0.05, warmup_sessions=5)
    warm = session_capacity(P, sessions, slo, cache_blocks=100_000, rel_precision=0.05, warmup_sessions=5)
    shared = session_capacity(P, sessions, slo, cache_blocks=100_000, salted=False, rel_precision=0.05,
                              warmup_sessions=5)  # fmt: skip
    assert 0 < cold < warm <= shared

"""``loadgen trace inspect`` for session files: sessions, turns, history length by depth, delays, reuse.

:func:`session_stats` describes sessions (from :func:`loadgen.workload.session_sources.load_sessions`):
how many, turns per session, the prompt (history) length at each turn depth, the delays between a
reply and the next turn, history resets, and the shared-prefix ratio of consecutive turns (from
the trace's block hash ids where it has them: the leading run of ids a turn shares with the turn
before, over its ids; else from lengths: the history's share of the prompt).

Lengths are in tokens as the file gives them; a text turn counts its words; a turn's prompt
length is the shared system prompt + every earlier new message and reply since the last reset +
its new message (the replies at their output lengths).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from loadgen.workload.session_model import Session

__all__ = ["format_session_stats", "session_stats"]


def _q(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"min": None, "p50": None, "p90": None, "max": None}
    a = np.asarray(values, dtype=np.float64)
    p50, p90 = np.percentile(a, [50, 90])
    return {"min": float(a.min()), "p50": float(p50), "p90": float(p90), "max": float(a.max())}


def session_stats(sessions: list[Session], facts: dict[str, Any] | None = None) -> dict[str, Any]:
    """Statistics of ``sessions`` (module doc) as a JSON-ready dict."""
    by_depth: dict[int, list[int]] = {}
    delays: list[float] = []
    ratios: list[float] = []
    resets = 0
    for s in sessions:
        history = s.system_tokens
        prev_ids: tuple[int, ...] | None = None
        for k, t in enumerate(s.turns):
            new = t.new_tokens if t.new_tokens is not None else len((t.text or "").split())
            if t.reset and k:
                history = s.system_tokens
                resets += 1
            prompt = history + new
            by_depth.setdefault(k, []).append(prompt)
            if k:
                delays.append(t.delay_s)
                if t.hash_ids is not None and prev_ids is not None and t.hash_ids:
                    n = 0
                    for a, b in zip(prev_ids, t.hash_ids):
                        if a != b:
                            break
                        n += 1
                    ratios.append(n / len(t.hash_ids))
                elif prompt:
                    ratios.append(history / prompt)
            prev_ids = t.hash_ids
            history = prompt + t.output_tokens
    turns = [len(s.turns) for s in sessions]
    return {
        **(facts or {}),
        "sessions": len(sessions),
        "turns": int(sum(turns)),
        "turns_per_session": _q([float(x) for x in turns]),
        "history_resets": resets,
        "system_tokens": _q([float(s.system_tokens) for s in sessions]),
        "delay_s": _q(delays),
        "span_s": _q([s.total_delay_s for s in sessions]),
        "shared_prefix_ratio": _q(ratios),
        "prompt_tokens_by_depth": [
            {"turn": k, "sessions": len(v), **_q([float(x) for x in v])} for k, v in sorted(by_depth.items())
        ],
    }


def format_session_stats(st: dict[str, Any], path: str, max_depths: int = 12) -> str:
    """The statistics as text lines for the console."""

    def q(d: dict[str, Any], digits: int = 0) -> str:
        if d["p50"] is None:
            return "-"
        return " / ".join(f"{d[k]:,.{digits}f}" for k in ("min", "p50", "p90", "max")) + "  (min / p50 / p90 / max)"

    lines = [
        f"session file   {path}",
        f"format         {st.get('format')}",
        f"sessions       {st['sessions']:,} with {st['turns']:,} turns; turns per session {q(st['turns_per_session'])}",
        f"system prompt  {q(st['system_tokens'])} tokens (shared across sessions)",
        f"delays         {q(st['delay_s'], 2)} s between a reply and the next turn (think/tool time)",
        f"delay per session {q(st['span_s'], 1)} s in all",
        f"shared prefix  {q(st['shared_prefix_ratio'], 3)} of a turn's prompt shared with the turn before",
        f"resets         {st['history_resets']} turns start a fresh history (the prompt shrank: compaction)",
    ]
    if st.get("skipped_subagents"):
        lines.append(f"sub-agents     {st['skipped_subagents']} sub-agent entries skipped (not replayed yet)")
    lines.append("prompt tokens by turn depth (history + new message):")
    rows = st["prompt_tokens_by_depth"]
    for r in rows[:max_depths]:
        lines.append(
            f"  turn {r['turn']:>3}: {r['sessions']:>5} sessions, p50 {r['p50']:>12,.0f}, max {r['max']:>12,.0f}"
        )
    if len(rows) > max_depths:
        r = rows[-1]
        lines.append(
            f"  ... turn {r['turn']:>3}: {r['sessions']:>5} sessions, p50 {r['p50']:>12,.0f}, max {r['max']:>12,.0f}"
        )
    return "\n".join(lines)

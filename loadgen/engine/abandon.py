"""Users who walk away (``--abandon SHARE,AFTER``): a share of requests cancelled by their user mid-reply.

``--abandon 10%,2s``: one request in ten (chosen by its index and the run's seed: the same ones on a
rerun, spread evenly over the run) is cancelled 2 s after its scheduled time (a closed-loop user's: its
due time) if it has not ended by then; ``--abandon 10%,20tok``: after its 20th output token arrived
(OpenAI-compatible streams: the reader stops there). The connection is dropped, as a browser tab
closed mid-answer drops it: the server should stop generating (vLLM aborts the request; the simulated
endpoint logs ``client_gone`` with the time it stopped in its truth log).

An abandoned request ends as a record of kind ``abandoned`` (:data:`loadgen.core.types.ERROR_KINDS`):
counted apart (``counts.abandoned``), never as a failure, an SLO miss or a measured request's latency
(the user did not want the rest; AIPerf's request cancellation excludes them the same way); its send
counts toward the generator's schedule and send rate (it was sent on time). In a session, an abandoned
turn ends its session, as a user who walks away leaves the conversation.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from loadgen.core.clock import now_ns
from loadgen.core.errors import ConfigError
from loadgen.core.types import RequestRecord
from loadgen.core.units import parse_duration_ns
from loadgen.workload.models import index_unit

__all__ = ["Abandon", "arm", "parse_abandon", "settle"]


@dataclass(frozen=True)
class Abandon:
    """``share`` of the requests walk away ``after_s`` after their scheduled time, or after ``after_tokens``."""

    share: float
    after_s: float | None = None
    after_tokens: int | None = None
    seed: int = 0

    def chosen(self, index: int) -> bool:
        """Whether request ``index`` is one that walks away (a hash of the index and seed below the share)."""
        return index_unit(index, self.seed) < self.share

    @property
    def label(self) -> str:
        after = (
            f"{self.after_s:g} s after its scheduled time"
            if self.after_s is not None
            else (f"after its {self.after_tokens}th output token")
        )
        return f"{self.share * 100:g} % of users walk away {after}"

    def to_json(self) -> dict[str, float | int | None]:
        return {"share": self.share, "after_s": self.after_s, "after_tokens": self.after_tokens}


_SPEC = re.compile(r"\s*([0-9.]+)\s*(%?)\s*,\s*(\S+?)\s*")


def parse_abandon(text: str, seed: int = 0) -> Abandon:
    """``10%,2s`` / ``0.1,2s`` (a time) or ``10%,20tok`` (output tokens) -> :class:`Abandon`; ConfigError."""
    m = _SPEC.fullmatch(text or "")
    if not m:
        raise ConfigError(f"--abandon {text!r}: expected SHARE,AFTER, e.g. 10%,2s or 0.1,20tok")
    try:
        share = float(m.group(1)) / (100 if m.group(2) else 1)
    except ValueError:
        raise ConfigError(f"--abandon {text!r}: the share {m.group(1)!r} is not a number") from None
    if not 0 < share <= 1:
        raise ConfigError(f"--abandon {text!r}: the share must be in (0, 100 %]")
    after = m.group(3)
    tok = re.fullmatch(r"([0-9]+)\s*(tok|tokens?)", after)
    if tok:
        n = int(tok.group(1))
        if n < 1:
            raise ConfigError(f"--abandon {text!r}: after at least 1 token")
        return Abandon(share, after_tokens=n, seed=seed)
    try:
        after_s = parse_duration_ns(after, what="--abandon time") / 1e9
    except ConfigError:
        raise ConfigError(f"--abandon {text!r}: AFTER is a time (2s, 500ms) or a token count (20tok)") from None
    if not after_s > 0:
        raise ConfigError(f"--abandon {text!r}: the time must be > 0")
    return Abandon(share, after_s=after_s, seed=seed)


def _walk_away(rec: RequestRecord, task: asyncio.Task[object]) -> None:
    if rec.end_ns is None and rec.abandoned_ns is None:  # not ended meanwhile
        rec.abandoned_ns = now_ns()
        task.cancel()


def arm(ab: Abandon | None, rec: RequestRecord, index: int, scheduled_ns: int) -> asyncio.TimerHandle | None:
    """Make request ``rec`` (``index``) walk away if it is one of the share: a timer that cancels the
    running task at its time, or the token count its reader stops at. Call from the request's own task."""
    if ab is None or not ab.chosen(index):
        return None
    if ab.after_tokens is not None:
        rec.abandon_after_tokens = ab.after_tokens
        return None
    assert ab.after_s is not None
    task = asyncio.current_task()
    assert task is not None
    delay_s = max(scheduled_ns + round(ab.after_s * 1e9) - now_ns(), 0) / 1e9
    return asyncio.get_running_loop().call_later(delay_s, _walk_away, rec, task)


def settle(ab: Abandon | None, rec: RequestRecord) -> bool:
    """A request that walked away ends as kind ``abandoned`` at the time it did; True when it did."""
    if rec.abandoned_ns is None or ab is None:
        return False
    rec.status = "error"
    rec.error_kind = "abandoned"
    rec.error_detail = f"its user walked away ({ab.label})"
    rec.end_ns = rec.abandoned_ns
    return True

"""``--abandon SHARE,AFTER`` (loadgen.engine.abandon): parsing, the share chosen, a walked-away record's end."""

from __future__ import annotations

import pytest

from loadgen.core.errors import Abandoned, ConfigError
from loadgen.core.metrics import compute
from loadgen.core.types import RequestRecord, TokenEvent
from loadgen.engine.abandon import Abandon, parse_abandon, settle
from loadgen.engine.results import Aggregator
from loadgen.engine.summary import summarize


def test_parse() -> None:
    assert parse_abandon("10%,2s") == Abandon(0.1, after_s=2.0)
    assert parse_abandon("0.25,500ms", seed=7) == Abandon(0.25, after_s=0.5, seed=7)
    assert parse_abandon("5%,20tok") == Abandon(0.05, after_tokens=20)
    for bad, says in (("10%", "SHARE,AFTER"), ("0%,2s", r"share must be in"), ("150%,2s", "share must be in"),
                      ("10%,abc", "a time .* or a token count"), ("10%,0tok", "at least 1 token")):  # fmt: skip
        with pytest.raises(ConfigError, match=says):
            parse_abandon(bad)


def test_the_share_is_chosen_evenly_and_by_seed() -> None:
    ab = Abandon(0.2, after_s=1.0, seed=3)
    chosen = [i for i in range(10_000) if ab.chosen(i)]
    assert 1_850 <= len(chosen) <= 2_150  # 20 %
    assert 400 <= sum(1 for i in chosen if i < 2_500) <= 600  # spread over the run, not bunched
    assert chosen == [i for i in range(10_000) if Abandon(0.2, after_s=1.0, seed=3).chosen(i)]  # the same on a rerun
    assert chosen != [i for i in range(10_000) if Abandon(0.2, after_s=1.0, seed=4).chosen(i)]


def test_a_reader_stops_at_the_token_count_and_the_record_is_counted_apart() -> None:
    rec = RequestRecord(index=1, phase="measure", scheduled_ns=0, sent_ns=10)
    rec.abandon_after_tokens = 3
    for t in (100, 200):
        rec.events.append(TokenEvent(t, "x"))
        rec.check_abandon(t)
    rec.events.append(TokenEvent(300, "x"))
    with pytest.raises(Abandoned):
        rec.check_abandon(300)
    assert rec.abandoned_ns == 300
    assert settle(Abandon(0.5, after_tokens=3), rec) and rec.error_kind == "abandoned" and rec.end_ns == 300
    agg = Aggregator([])
    agg.add(rec, compute(rec))
    assert agg.abandoned == 1 and agg.requests == 0 and agg.failed == 0 and agg.sent == 1
    assert agg.counts()["abandoned"] == 1 and summarize(rec, compute(rec), []).error_kind == "abandoned"

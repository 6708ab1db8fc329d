"""``loadgen selftest``'s ladder and certificate (issue 31 item 5), with the runs faked: each ladder
stops after two dishonest levels in a row, the certificate names the highest honest level of each
kind, and the command's bad values are one usage line."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.sim import selftest as st


def _level(kind: str, level: int, honest: bool) -> st.Level:
    return st.Level(kind=kind, level=level, output_tps=1000.0 * level, client_cores=0.5, tps_per_core=2000.0 * level,
                    ttft_p50_err_ms=0.1, ttft_p99_err_ms=0.2 if honest else 9.0, itl_p99_err_ms=0.3,
                    schedule_lag_p99_ms=0.5 if kind == "open" else None, rss_mib=80.0, valid=honest,
                    honest=honest)  # fmt: skip


def test_ladders_stop_after_two_dishonest_levels_and_the_certificate_names_the_highest_honest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    honest = {("closed", 8): True, ("closed", 16): False, ("closed", 32): True, ("closed", 64): False,
              ("closed", 128): False, ("open", 100): True, ("open", 200): False, ("open", 400): False,
              ("open", 800): True}  # fmt: skip
    ran: list[tuple[str, int]] = []

    def fake(kind: str, level: int, work: Path, duration_s: float, pin: bool = True) -> st.Level:
        ran.append((kind, level))
        return _level(kind, level, honest[(kind, level)])

    monkeypatch.setattr(st, "run_level", fake)
    cert = st.run_selftest(tmp_path, duration_s=1.0)
    # closed: 8 ok, 16 bad, 32 ok (resets), 64 bad, 128 bad -> all five ran; open: 200, 400 bad -> 800 never runs
    assert ran == [("closed", 8), ("closed", 16), ("closed", 32), ("closed", 64), ("closed", 128),
                   ("open", 100), ("open", 200), ("open", 400)]  # fmt: skip
    assert cert["highest_honest_closed"]["level"] == 32
    assert cert["highest_honest_open"]["level"] == 100
    assert cert["honest_within_ms"] == st.HONEST_MS and cert["command"] == "loadgen selftest"
    assert len(cert["levels"]) == 8


def test_no_honest_level_is_said(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(st, "run_level", lambda kind, level, work, d, pin=True: _level(kind, level, False))
    cert = st.run_selftest(tmp_path, closed=(8, 16, 32), rates=(100,), duration_s=1.0)
    assert cert["highest_honest_closed"] is None and cert["highest_honest_open"] is None
    assert len(cert["levels"]) == 3  # closed stopped after two; open's one level


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--users", "8,x"], "--users: whole numbers"),
        (["--rates", "0"], "--rates: every value must be >= 1"),
        (["--duration", "0s"], "--duration must be > 0"),
    ],  # fmt: skip
)
def test_bad_values_are_one_usage_line(args: list[str], needle: str, tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["selftest", "--out", str(tmp_path / "o"), *args])
    assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output

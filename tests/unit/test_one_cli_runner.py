"""One way for a test to start the CLI (issue 29 item 5): ``tests/fixtures/cli_proc.py``.

A test that builds ``[sys.executable, "-m", "loadgen.cli", ...]`` itself takes the caller's environment
(API keys, CA settings, the terminal's width) and its own cwd; through the fixture every CLI process gets
the same one. Any test file other than the fixture that spells the command line fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
FIXTURE = TESTS / "fixtures" / "cli_proc.py"
SELF = Path(__file__).resolve()  # its planted examples below
SPELLED = re.compile(r"""["']-m["']\s*,\s*["']loadgen\.cli["']""")  # on one line or split over two


def test_only_the_fixture_spells_the_cli_command_line() -> None:
    found = [
        str(p.relative_to(TESTS))
        for p in sorted(TESTS.rglob("*.py"))
        if p not in (FIXTURE, SELF) and SPELLED.search(p.read_text())
    ]
    assert found == [], f"start the CLI with tests/fixtures/cli_proc.py (cli_run, cli_popen, cli_argv): {found}"
    assert SPELLED.search(FIXTURE.read_text())  # the check reads what the fixture writes


def test_the_check_finds_both_spellings() -> None:
    assert SPELLED.search('[sys.executable, "-m", "loadgen.cli", "run"]')
    assert SPELLED.search('cmd = [\n    sys.executable,\n    "-m",\n    "loadgen.cli",\n]')
    assert not SPELLED.search('[sys.executable, "-m", "loadgen.sim"]')

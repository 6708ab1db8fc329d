"""A path a command cannot use is one line naming it, exit 2, never a traceback (issue 29).

``stat()`` and ``open()`` raise ``PermissionError`` wherever a command meets such a path: an input named on
the command line (``compare``, ``capacity``, ``export``, ``--trace``), a file inside a directory it names
(``--tokenizer DIR``), a directory it cannot traverse; a name too long (``ENAMETOOLONG``) is the same
kind of fault. Before, each of these ended in a traceback. A
command that fails so leaves no empty ``results/<time>`` directory behind (nor a sweep's lone
``config.used.toml``).

As root (CI) the child drops ``CAP_DAC_OVERRIDE`` and ``CAP_DAC_READ_SEARCH`` from its bounding set
before it starts (root's inheritable set is empty), so file modes hold for it as for any user.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.cli_proc import cli_run

PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2


def _as_a_user() -> None:
    """In the child, before exec: root without the two capabilities that ignore file modes."""
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
            if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.fixture
def paths(tmp_path: Path) -> Iterator[dict[str, Path]]:
    locked = tmp_path / "locked"  # a directory no one may list or enter
    locked.mkdir()
    unreadable = tmp_path / "data.jsonl"  # a file no one may read
    unreadable.write_text('{"timestamp": 0, "input_tokens": 8, "output_tokens": 4}\n')
    locked.chmod(0)
    unreadable.chmod(0)
    long = tmp_path / ("x" * 300)  # a name over the file system's 255 bytes
    yield {"locked": locked, "file": unreadable, "tmp": tmp_path, "long": long}
    locked.chmod(0o700)


@pytest.mark.parametrize(
    ("args", "named", "why"),
    [
        pytest.param(["compare", "{file}"], "{file}", "permission denied", id="compare-file"),
        pytest.param(["capacity", "ci", "{locked}"], "{locked}/sweep.json", "permission denied", id="capacity-dir"),
        pytest.param(
            ["export", "--format", "llmd-br", "{locked}"], "{locked}/sweep.json", "permission denied", id="export-dir"
        ),
        pytest.param(
            ["run", "--rate", "5", "--requests", "2", "--trace", "{file}", "--out", "{tmp}/run"],
            "{file}",
            "permission denied",
            id="run-trace",
        ),
        pytest.param(
            ["run", "--rate", "5", "--requests", "2", "--tokenizer", "{locked}"],
            "{locked}/tokenizer",
            "permission denied",
            id="run-tokenizer",
        ),
        pytest.param(
            ["run", "--rate", "5", "--requests", "2", "--dataset", "{long}"],
            "{long}",
            "file name too long",
            id="run-dataset-long",
        ),
        pytest.param(["capacity", "ci", "{long}"], "{long}", "file name too long", id="capacity-long"),
        pytest.param(
            ["sweep", "--slo-p99", "1s", "--trace", "{file}", "--out", "{tmp}/sweep"],
            "{file}",
            "permission denied",
            id="sweep-trace",
        ),
    ],
)
def test_an_unreadable_input_is_one_line_naming_it(
    args: list[str], named: str, why: str, paths: dict[str, Path]
) -> None:
    fill = {k: str(v) for k, v in paths.items()}
    argv = [a.format(**fill) for a in args]
    p = cli_run(*argv, timeout=60, preexec_fn=_as_a_user, cwd=paths["tmp"])
    text = p.stdout + p.stderr
    assert p.returncode == 2, text
    assert "Traceback" not in text, text
    errors = [line for line in text.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, text
    assert named.format(**fill) in errors[0] and why in errors[0], errors
    # nothing left behind that a later look could take for a run: no --out made, no results/<time>
    assert not (paths["tmp"] / "run").exists() and not (paths["tmp"] / "sweep").exists()
    assert not any((paths["tmp"] / "results").glob("*")), list((paths["tmp"] / "results").glob("*"))

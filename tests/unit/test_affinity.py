"""--cpus: parsing, errors that name the option, pinning a process and recording it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from loadgen.affinity import check_cpus, format_cpus, parse_cpus
from loadgen.conditions import client_conditions
from loadgen.errors import ConfigError

needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")


@pytest.mark.parametrize(("text", "want"), [("0", {0}), ("0-3", {0, 1, 2, 3}), ("0,2,4-5", {0, 2, 4, 5}), (" 1 , 3 ", {1, 3})])
def test_parse(text: str, want: set[int]) -> None:
    assert parse_cpus(text) == want


@pytest.mark.parametrize("text", ["", "x", "0-", "3-1", "-1", "0,,1", "1.5"])
def test_parse_errors_name_the_option(text: str) -> None:
    with pytest.raises(ConfigError, match=r"--cpus"):
        parse_cpus(text)


def test_format_roundtrip() -> None:
    assert format_cpus({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert parse_cpus(format_cpus({0, 1, 2, 5, 7, 8})) == {0, 1, 2, 5, 7, 8}


@needs_affinity
def test_unavailable_cpu_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"CPU 4096 is not available"):
        check_cpus({4096})


@needs_affinity
def test_pinned_child_records_its_cpus() -> None:
    cpu = min(os.sched_getaffinity(0))
    code = (
        "from loadgen.affinity import pin_process; from loadgen.conditions import client_conditions; "
        f"pin_process({{{cpu}}}); print(client_conditions()['cpu_affinity'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == f"[{cpu}]"
    assert client_conditions()["cpu_affinity"] == sorted(os.sched_getaffinity(0))  # this process: unchanged


def test_cli_reports_bad_cpus_without_traceback() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "run", "--endpoint", "http://127.0.0.1:9", "--rate", "1",
         "--requests", "1", "--cpus", "0-x"],
        capture_output=True, text=True, timeout=60,
    )
    assert p.returncode == 2
    assert "--cpus '0-x'" in p.stderr and "Traceback" not in p.stderr

"""--cpus: parsing, errors that name the option, pinning a process and recording it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from loadgen.core.affinity import check_cpus, format_cpus, parse_cpus
from loadgen.core.conditions import client_conditions
from loadgen.core.errors import ConfigError
from tests.fixtures.cli_proc import cli_run

needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")


@pytest.mark.parametrize(
    ("text", "want"), [("0", {0}), ("0-3", {0, 1, 2, 3}), ("0,2,4-5", {0, 2, 4, 5}), (" 1 , 3 ", {1, 3})]
)
def test_parse(text: str, want: set[int]) -> None:
    assert parse_cpus(text) == want


@pytest.mark.parametrize("text", ["", " ", "x", "0-", "3-1", "-1", "0,,1", "1.5", "1_0", "0,", "+1", "0-99999999999"])
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


def test_a_huge_range_is_refused_before_it_is_built() -> None:
    with pytest.raises(ConfigError, match=r"beyond any machine"):
        parse_cpus("0-99999999999")  # would be a set of 10^11 ints


@needs_affinity
def test_pinned_child_records_its_cpus_and_pins_every_thread() -> None:
    cpu = min(os.sched_getaffinity(0))
    code = (
        "import os, threading, time\n"
        "ev = threading.Event()\n"
        "t = threading.Thread(target=ev.wait, daemon=True); t.start()  # a thread from before the pin\n"
        "from loadgen.core.affinity import pin_process; from loadgen.core.conditions import client_conditions\n"
        f"pin_process({{{cpu}}})\n"
        "masks = {tid: sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir('/proc/self/task')}\n"
        "print(client_conditions()['cpu_affinity'], len(masks), sorted({str(m) for m in masks.values()}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    rec, n_threads, masks = out.strip().split(" ", 2)
    assert rec == f"[{cpu}]" and int(n_threads) >= 2
    assert masks == f"['[{cpu}]']", masks  # every thread, the early one too
    assert client_conditions()["cpu_affinity"] == sorted(os.sched_getaffinity(0))  # this process: unchanged


@pytest.mark.parametrize("value", ["0-x", ""])
@pytest.mark.parametrize(
    "command", [["run", "--endpoint", "http://127.0.0.1:9", "--rate", "1", "--requests", "1"], ["sim", "--port", "9"]]
)
def test_cli_reports_bad_cpus_without_traceback(command: list[str], value: str) -> None:
    p = cli_run(*command, "--cpus", value, timeout=60)
    assert p.returncode == 2, p.stderr
    assert f"--cpus {value!r}" in p.stderr and "Traceback" not in p.stderr

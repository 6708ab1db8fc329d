"""``loadgen locust`` option handling, in-process: this never imports Locust (a leaf)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.cli.locust import LOCUSTFILE, locust_cmdline, web_args

REPO_ROOT = Path(__file__).resolve().parents[2]
HAVE_LOCUST = importlib.util.find_spec("locust") is not None


def test_web_ui_binds_loopback_by_default() -> None:
    assert web_args(["-u", "3"], None) == ["--web-host", "127.0.0.1", "-u", "3"]
    assert web_args(["--web-host", "::1"], None) == ["--web-host", "::1"]
    assert web_args(["--web-host=localhost"], None) == ["--web-host=localhost"]


@pytest.mark.parametrize("args", [["--web-host", "0.0.0.0"], ["--web-host=10.1.2.3"], ["--web-host", ""]])
def test_other_interface_needs_a_token(args: list[str]) -> None:
    with pytest.raises(click.UsageError, match="--web-token-env"):
        web_args(args, None)
    assert web_args(args, "LG_TOKEN") == args


def test_locust_command_line_defaults() -> None:
    cmd = locust_cmdline(["--headless", "-t", "5s"], "http://h:1")
    assert cmd[1:5] == ["-m", "locust", "-f", str(LOCUSTFILE)]
    assert cmd[cmd.index("-H") + 1] == "http://h:1"
    assert cmd[cmd.index("--stop-timeout") + 1] == "30"  # in-flight requests get 30 s at a stop
    mine = locust_cmdline(["--stop-timeout", "5", "-H", "http://x"], "http://h:1")
    assert mine.count("--stop-timeout") == 1 and mine.count("-H") == 1
    worker = locust_cmdline(["--worker"], None)
    assert "--stop-timeout" not in worker and "-H" not in worker  # the master sends both


@pytest.mark.parametrize(
    "args, message",
    [
        (["--requests", "10"], "open-loop schedule"),
        (["--duration", "10s"], "open-loop schedule"),
        (["--max-concurrency", "5"], "open-loop schedule"),
        (["--rate", "0"], "--rate must be > 0"),
        (["--rate", "5", "--requests", "3", "--duration", "2s"], "clash"),
        (["--rate", "5", "--burstiness", "2"], "--burstiness needs --arrival gamma"),
        (["--web-host", "0.0.0.0", "--rate", "5"], "--web-token-env"),
        (["--web-login"], "--web-token-env"),
        (["--master", "--master-bind-host", "0.0.0.0"], "--allow-remote-workers and --master-token-env"),
        (["--master", "--master-bind-host", "*", "--allow-remote-workers"], "--master-token-env"),
        (["--master", "--master-token-env", "LG_SURELY_UNSET_VAR"], "that environment variable is not set"),
        (["--input-tokens", "bogus:1"], "bogus"),
        (["--slo", "ttft<=1s"], "invalid SLO"),
    ],
)
def test_usage_errors_before_anything_starts(args: list[str], message: str) -> None:
    if not HAVE_LOCUST:
        pytest.skip("Locust not installed: the command stops earlier with an install hint")
    res = CliRunner().invoke(main, ["locust", "--endpoint", "http://127.0.0.1:9", *args, "--headless"])
    assert res.exit_code == 2, res.output
    assert message in res.output


def test_locust_missing_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "locust" else real(name, *a))
    res = CliRunner().invoke(main, ["locust", "--headless"])
    assert res.exit_code == 1 and "pip install 'loadgen[locust]'" in res.output


def test_cli_never_imports_locust_or_gevent() -> None:
    """The CLI (which registers ``locust``) stays free of Locust's monkey-patching."""
    code = (
        "import sys, loadgen.cli, loadgen.cli.locust; "
        "bad = [m for m in ('locust', 'gevent', 'loadgen.locust') if m in sys.modules]; "
        "assert 'locust' in loadgen.cli.main.commands, 'not registered'; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT, timeout=60)


def test_only_the_leaf_imports_locust() -> None:
    pattern = re.compile(r"^\s*(import locust|from locust\b|import gevent|from gevent\b)", re.M)
    offenders = [
        str(p.relative_to(REPO_ROOT))
        for p in (REPO_ROOT / "loadgen").rglob("*.py")
        if p.parent != REPO_ROOT / "loadgen" / "locust" and pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []

"""Every command of README.md's code blocks (and of ``--help`` epilogs) runs for real, shortened.

Each command is one test (``test_readme_command[L57-loadgen-run]``: the README line and the
program). Its shortened form is printed with one line per rewrite (``-rA`` shows them):
durations become 3 s, request counts a few seconds' worth, sweeps get 2 s probes; every
``--endpoint`` becomes a server on 127.0.0.1 started here: a fast simulated endpoint, a
small one for sweeps (so a sweep ends at the server's limit, not the client's), the fake
Azure and Anthropic platforms (tests/fixtures/fake_platforms.py), the real Triton
(PyTriton) that ``scripts/setup_servers`` installs; ``--serve vllm`` launches the real
vLLM with the tiny test model. Validity bounds are relaxed to 200 ms (a shared CI machine).
Nothing is ever sent anywhere but 127.0.0.1 (checked on every command before it runs;
``--yes`` is never added, so loadgen itself would refuse a remote host).

A command passes when it exits 0, or with an exit code the README promises for a client
that could not keep its schedule (``run`` 1 when INVALID, ``sweep`` 5: a lower bound), said
in its output. A README command this test cannot run carries a mark in the README itself:
``# not run in CI: REASON`` or ``# CI runs this itself`` (then ``.ci/run`` must run it); the
test checks the mark. A command with neither a mark nor a rule here fails: a new README
command needs a rule or a mark.

Commands run concurrently (the sweeps one after another against their own simulated
endpoint), once per module, in a temporary directory holding the files the README names
(``./tok``, ``./model``, the trace files).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from loadgen.cli import main as cli_main
from loadgen.sim.launch import SimProcess
from tests.fixtures.cli_proc import cli_argv
from tests.readme_commands import ShellCommand, help_examples, readme_commands

pytestmark = [pytest.mark.slow, pytest.mark.timing]

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "loadgen" / "data"
COMMANDS = readme_commands((REPO / "README.md").read_text(encoding="utf-8"))
HELP_EXAMPLES = help_examples(cli_main)
LOOPBACK = {"127.0.0.1", "localhost", "::1"}

FAST_SIM = ["--slots", "64", "--ttft-ms", "5", "--itl-ms", "1", "--tokens-per-chunk", "4"]
# four slots of ~140 ms requests: ~30 req/s, a limit a busy client reaches with room to spare
SWEEP_SIM = ["--slots", "4", "--ttft-ms", "5", "--itl-ms", "1", "--tokens-per-chunk", "4"]
SWEEP_SHORT = ["--probe-duration", "2s", "--max-probe-duration", "4s", "--calibration", "2s", "--precision", "50%",
               "--confidence", "50%"]  # fmt: skip
RELAX = ["--max-schedule-lag", "200ms", "--max-loop-lag", "200ms"]
CPU_VLLM_ARGS = "--max-model-len 1024 --enforce-eager"  # no KV-cache size, no dtype: loadgen's CPU defaults
# files the README names, made from the shipped excerpts
NAMED_FILES = {
    "AzureLLMInferenceTrace_code.csv": DATA / "azure_code_2023_head2000.csv",
    "trace.jsonl": DATA / "mooncake_conversation_head400.jsonl",
    # peers' result files (loadgen.report.peers): the real ones kept as test fixtures
    "vllm_bench.json": REPO / "tests" / "fixtures" / "peers" / "vllm_bench_serve_0.33.0_c16.json",
    "benchmarks.json": REPO / "tests" / "fixtures" / "peers" / "guidellm_0.8.1_c16.json",
    "profile_export_aiperf.json": REPO
    / "tests"
    / "fixtures"
    / "peers"
    / "aiperf_0.13.0_c16_profile_export_aiperf.json",
}
PER_COMMAND_TIMEOUT_S = 240.0
FREE_PORT = "FREE_PORT"  # replaced by a free port on 127.0.0.1 just before the command starts


class NoRule(Exception):
    """A README command with neither a shortening rule here nor a CI mark in the README."""


@dataclass
class Plan:
    """How one README command is run here: its shortened words, each rewrite said, what passes."""

    cmd: ShellCommand
    argv: list[str]
    rewrites: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    # parallel | sweeps (one after another) | after (once the others are done) | early (started
    # first: a real server whose start outlasts the others)
    group: str = "parallel"
    server: bool = False  # a server: started, asked once, stopped with SIGINT
    tolerated: dict[int, str] = field(default_factory=dict)  # exit code -> text its output must hold
    skip: str | None = None
    links: dict[str, str] = field(default_factory=dict)  # path the README names -> an earlier output
    expect: list[str] = field(default_factory=list)  # files the command must have written (relative to cwd)


@dataclass
class Outcome:
    rc: int | None
    seconds: float
    output: str
    note: str = ""

    @property
    def missing(self) -> bool:
        return "; missing: " in self.note


@dataclass
class Context:
    """The servers on 127.0.0.1 that commands are pointed at, and where they run."""

    cwd: Path
    sim_url: str
    sweep_sim_url: str
    azure_url: str
    anthropic_url: str
    triton: dict[str, str] | None
    triton_skip: str
    vllm_python: str | None
    sweep_outs: list[str] = field(default_factory=list)
    check_outs: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ option editing


def opt(argv: list[str], name: str) -> str | None:
    for i, w in enumerate(argv):
        if w == name and i + 1 < len(argv):
            return argv[i + 1]
        if w.startswith(name + "="):
            return w.split("=", 1)[1]
    return None


def set_opt(argv: list[str], name: str, value: str, rewrites: list[str], why: str = "") -> None:
    old = opt(argv, name)
    for i, w in enumerate(argv):
        if w == name:
            argv[i + 1] = value
            break
        if w.startswith(name + "="):
            argv[i] = f"{name}={value}"
            break
    else:
        argv += [name, value]
    if old != value:
        rewrites.append(f"{name} {old if old is not None else '(absent)'} -> {value}" + (f" ({why})" if why else ""))


def add_missing(argv: list[str], pairs: list[str], rewrites: list[str], why: str) -> None:
    added = []
    for name, value in zip(pairs[::2], pairs[1::2], strict=True):
        if opt(argv, name) is None:
            argv += [name, value]
            added += [name, value]
    if added:
        rewrites.append(f"added {' '.join(added)} ({why})")


def assert_loopback(argv: list[str]) -> None:
    """Refuse any command that could send to a host other than 127.0.0.1."""
    assert "--yes" not in argv
    for i, w in enumerate(argv):
        if "://" in w:
            host = urlsplit(w).hostname or ""
            assert host in LOOPBACK, f"not a loopback URL: {w}"
        if w in ("--endpoint", "--reference", "--cluster") and i + 1 < len(argv):
            v = argv[i + 1]
            if w == "--reference" and "://" not in v:
                continue
            host = urlsplit(v if "://" in v else f"//{v}").hostname or ""
            assert host in LOOPBACK, f"{w} {v} is not on 127.0.0.1"
    if argv[:1] == ["loadgen"] and opt(argv, "--provider") in ("openai", "azure", "anthropic"):
        assert opt(argv, "--endpoint") is not None, "a provider without --endpoint means its public API"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------ the rules


def plan_for(cmd: ShellCommand, ctx: Context) -> Plan:
    """The shortened form of one README command (raises NoRule when there is none)."""
    a = list(cmd.argv)
    plan = Plan(cmd, a)
    rw = plan.rewrites
    if a[0] == "scripts/demo":
        return _plan_demo(plan, ctx)
    if a[0] != "loadgen" or len(a) < 2:
        raise NoRule(cmd.text)
    sub = a[1]
    for name, src in NAMED_FILES.items():
        if any(w == name or w.endswith("/" + name) or w.endswith(":" + name) for w in a):
            rw.append(f"./{name}: a copy of the shipped {src.name}")
    key_env = opt(a, "--api-key-env")
    if key_env:
        plan.env[key_env] = "readme-test-key"
        rw.append(f"${key_env} set to a dummy key (the fake platform takes any)")
    if sub in ("run", "sweep", "check", "locust") and "--serve" not in a:
        _point_endpoint(plan, sub, ctx)
    if sub == "run":
        if "--dry-run" not in a:
            _shorten_run(plan)
        add_missing(a, ["--out", f"out/{cmd.ident}"], rw, "one directory per command")
        plan.tolerated[1] = "INVALID"
        if "--dry-run" not in a:
            plan.expect.append(f"{opt(a, '--out')}/result.json")
    elif sub == "sweep":
        _shorten_sweep(plan, ctx)
    elif sub == "sim":
        set_opt(a, "--port", FREE_PORT, rw, "a free port")
        plan.server = True
        rw.append("started in the background, asked for one completion, stopped with Ctrl-C (SIGINT)")
    elif sub == "trace":
        pass
    elif sub == "selftest":
        for flag, val in (("--users", "8"), ("--rates", "50"), ("--duration", "1s")):
            set_opt(a, flag, val, rw, "one level of each kind, 1 s (the full ladder is about a minute)")
        add_missing(a, ["--out", f"out/{cmd.ident}"], rw, "one directory per command")
        plan.tolerated[1] = "no honest"  # a shared CI machine's client may measure no level within 2 ms
        plan.expect.append(f"{opt(a, '--out')}/selftest.json")
    elif sub in ("plan", "capacity"):
        # they read sweeps already run: the README points them at the shipped fixtures
        for i, w in enumerate(a):
            if w.startswith("tests/fixtures/"):
                a[i] = str(REPO / w)
        if i and any(w.startswith(str(REPO / "tests/fixtures")) for w in a):
            rw.append("tests/fixtures/...: the repository's shipped capacity fixtures")
        if opt(a, "--out") is not None:
            set_opt(a, "--out", f"out/{cmd.ident}", rw, "one directory per command")
            plan.expect.append(f"out/{cmd.ident}/plan.json")
        if a[1:3] == ["capacity", "gate"]:
            plan.tolerated[1] = "REGRESSED"  # the fixtures are two different systems: a significant regression
        if "--validate" in a:
            plan.tolerated[5] = "INVALID"  # the replay's client could not keep up on a busy machine: no claim
            # the README promises exit 1 when the SLO does not hold: the simulated replicas share the CI machine's
            # two cores with the other README commands, so a plan near their capacity may truly not hold there
            plan.tolerated[1] = "NOT HELD"
    elif sub == "locust":
        a += ["--web-port", FREE_PORT, "--autostart", "--autoquit", "0", "-u", "2", "-r", "2", "-t", "3s"]
        rw.append("added --web-port FREE --autostart --autoquit 0 -u 2 -r 2 -t 3s (the web UI starts the test "
                  "itself and quits after 3 s; the page is driven in test_locust_webui)")  # fmt: skip
        add_missing(a, ["--out", f"out/{cmd.ident}"], rw, "one directory per command")
        plan.tolerated[1] = "INVALID"
        plan.expect.append(f"{opt(a, '--out')}/result.json")
    elif sub in ("compare", "export"):
        plan.group = "after"
        paths = [w for w in a[2:] if not w.startswith("-") and "/" in w]
        for named, made in zip(paths, ctx.sweep_outs, strict=False):
            plan.links[named] = made
            rw.append(f"{named}: the output of the sweep run above as {made}")
        if len(plan.links) < len(paths):
            raise NoRule(f"{cmd.text}: more result directories than README sweeps")
    elif sub == "check":
        ref = opt(a, "--reference")
        if ref is not None and "://" not in ref:
            plan.group = "after"
            if ctx.check_outs:
                plan.links[ref] = ctx.check_outs[0]
                rw.append(f"{ref}: the output of the check run above as {ctx.check_outs[0]}")
        out = opt(a, "--out")
        if out is not None:
            plan.expect.append(f"{out}/check.json")
            if ref is None:
                ctx.check_outs.append(out)
    else:
        raise NoRule(cmd.text)
    return plan


def _point_endpoint(plan: Plan, sub: str, ctx: Context) -> None:
    a, rw = plan.argv, plan.rewrites
    provider, api = opt(a, "--provider"), opt(a, "--api") or ""
    if provider == "azure":
        new, what = ctx.azure_url, "the fake Azure OpenAI platform"
    elif provider == "anthropic":
        new, what = ctx.anthropic_url, "the fake Anthropic platform"
    elif api.startswith("triton-"):
        if ctx.triton is None:
            plan.skip = ctx.triton_skip
            return
        new = ctx.triton["grpc_url"] if api == "triton-grpc" else ctx.triton["http_url"]
        what = "the real Triton (PyTriton tiny_llm)"
        if opt(a, "--model") not in (None, "tiny_llm"):
            set_opt(a, "--model", "tiny_llm", rw, "the model the test's Triton serves")
    elif sub == "sweep":
        new, what = ctx.sweep_sim_url, "a simulated endpoint of ~30 req/s for sweeps: " + " ".join(SWEEP_SIM)
    else:
        new, what = ctx.sim_url, "the shared fast simulated endpoint: " + " ".join(FAST_SIM)
    if opt(a, "--endpoint") is None:
        if provider is None or provider == "openai-compatible":
            return  # the embedded simulated endpoint, as the README says
        a += ["--endpoint", new]
        rw.append(f"added --endpoint {new} ({what}; never the platform's public API)")
    else:
        set_opt(a, "--endpoint", new, rw, what)


def _shorten_run(plan: Plan) -> None:
    a, rw = plan.argv, plan.rewrites
    stages = opt(a, "--stages")
    if stages is not None:  # each stage's time shortened (--stages sets the duration)
        set_opt(a, "--stages", ",".join(e.rsplit(":", 1)[0] + ":1s" for e in stages.split(",")), rw, "1 s a stage")
    elif opt(a, "--duration") is not None or not any(opt(a, o) for o in ("--requests", "--trace")):
        set_opt(a, "--duration", "3s", rw, "a few seconds of load")
    n = opt(a, "--requests")
    rate = opt(a, "--rate")
    if n is not None and n.isdigit():
        cap = max(5, math.ceil(3 * float(rate))) if rate and rate != "inf" else 30
        if int(n) > cap:
            set_opt(a, "--requests", str(cap), rw, "about 3 s of load")
    w = opt(a, "--warmup")
    if w is not None:
        set_opt(a, "--warmup", str(min(int(w), 4)) if w.isdigit() else "1s", rw, "a short warm-up")
    if opt(a, "--trace") is not None and opt(a, "--trace-duration") is None:
        scale = float(opt(a, "--trace-time-scale") or opt(a, "--time-scale") or 1)
        set_opt(a, "--trace-duration", f"{3 * scale:g}s", rw, "3 s of the trace at its time scale")
    add_missing(a, RELAX, rw, "validity bounds for a shared CI machine")


def _shorten_sweep(plan: Plan, ctx: Context) -> None:
    a, rw, cmd = plan.argv, plan.rewrites, plan.cmd
    for name, value in zip(SWEEP_SHORT[::2], SWEEP_SHORT[1::2], strict=True):
        set_opt(a, name, value, rw, "short probes, coarse precision")
    add_missing(a, RELAX, rw, "validity bounds for a shared CI machine")
    plan.tolerated[5] = "lower bound"
    if "--serve" in a:
        if opt(a, "--serve") != "vllm":
            raise NoRule(cmd.text)
        if ctx.vllm_python is None:
            plan.skip = "no vLLM environment: run scripts/setup_servers vllm (or set LOADGEN_VLLM_PYTHON)"
            return
        rw.append("./model: the tiny test model (tests/fixtures/tiny_model.py)")
        py = opt(a, "--server-python")
        if py is not None and not os.path.isabs(py):
            set_opt(a, "--server-python", ctx.vllm_python, rw, "the README's path is relative to the repository")
        add_missing(a, ["--serve-args", CPU_VLLM_ARGS], rw, "a tiny model's length; the CPU defaults do the rest")
        add_missing(a, ["--input-tokens", "16", "--output-tokens", "8", "--max-rate", "8", "--min-rate", "4"], rw,
                    "a tiny model on a CPU: probes between 4 and 8 req/s")  # fmt: skip
        if (os.cpu_count() or 1) <= 4:
            plan.env["VLLM_CPU_OMP_THREADS_BIND"] = "0"
            rw.append("VLLM_CPU_OMP_THREADS_BIND=0 (vLLM's threads on core 0: the client keeps a core)")
        plan.group = "early"
        # a real server on a shared CPU may miss 300 ms even at the lowest rate: the README's exit 1
        plan.tolerated[1] = "no rate met"
        rw.append("started first: vLLM's start (~40-80 s on 2 cores) overlaps the other commands")
    else:
        plan.group = "sweeps"
    out = f"out/{cmd.ident}"
    if opt(a, "--out") is None:
        add_missing(a, ["--out", out], rw, "one directory per command")
    plan.expect.append(f"{opt(a, '--out')}/sweep.json")
    if "--serve" not in a and "--concurrency-levels" not in a:
        ctx.sweep_outs.append(str(opt(a, "--out")))


def _plan_demo(plan: Plan, ctx: Context) -> Plan:
    a, rw = plan.argv, plan.rewrites
    plan.argv = a = [str(REPO / "scripts" / "demo"), *a[1:]]
    extra = [*SWEEP_SHORT, *RELAX, "--max-rate", "8"]
    a += [*extra, "--out", str(ctx.cwd / "out" / plan.cmd.ident)]
    rw.append(f"extra sweep options (scripts/demo passes them on): {' '.join(extra)} --out out/... "
              "(the sweep stops at 8 req/s: its long code-trace prompts cost the client)")  # fmt: skip
    rw.append("its 20 s trace replay is kept as it is (scripts/demo has no option for it)")
    plan.env["LOADGEN_VENV"] = sys.prefix
    extras = _installed_extras()
    if extras:
        plan.env["LOADGEN_EXTRAS"] = extras
        rw.append(f"LOADGEN_VENV={sys.prefix} LOADGEN_EXTRAS={extras}: the test's environment is reused")
    plan.tolerated[5] = "lower bound"
    return plan


def _installed_extras() -> str | None:
    """The extras scripts/_env.sh recorded in this environment's stamp, so scripts/demo reinstalls nothing."""
    for stamp in Path(sys.prefix).glob(".loadgen-installed-*"):
        parts = stamp.name.removeprefix(".loadgen-installed-").split("-", 1)
        if len(parts) == 2:
            return parts[1].replace("_", ",")
    return None


# ------------------------------------------------------------------ running


def _loadgen_argv(argv: list[str]) -> list[str]:
    """A README command line as written: ``loadgen`` is this environment's console script (what a user types;
    the fixture's ``python -m loadgen.cli`` only where the script is missing), every other command unchanged."""
    if argv[0] != "loadgen":
        return argv
    script = Path(sys.executable).parent / "loadgen"
    return [str(script), *argv[1:]] if script.exists() else cli_argv(*argv[1:])


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    for k in ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HTTP_PROXY", "HTTPS_PROXY"):
        env.pop(k, None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    env["NO_PROXY"] = "*"
    env.update(extra)
    return env


def execute(plan: Plan, ctx: Context) -> Outcome:
    """Run one planned command in ``ctx.cwd`` (a server: start, ask once, SIGINT), bounded in time."""
    for dst, src in plan.links.items():  # commands of the "after" group run side by side: one may link first
        d = ctx.cwd / dst
        target = (ctx.cwd / src).resolve()
        if not d.exists():
            d.parent.mkdir(parents=True, exist_ok=True)
            try:
                d.symlink_to(target, target_is_directory=True)
            except FileExistsError:
                assert d.resolve() == target, (d, d.resolve(), target)  # another command linked the same output
    plan.argv = [str(free_port()) if w == FREE_PORT else w for w in plan.argv]
    assert_loopback(plan.argv)
    log = ctx.cwd / "logs" / f"{plan.cmd.ident}.log"
    log.parent.mkdir(exist_ok=True)
    t0 = time.monotonic()
    with open(log, "w+b") as fh:
        proc = subprocess.Popen(_loadgen_argv(plan.argv), cwd=ctx.cwd, env=_env(plan.env), stdout=fh,
                                stderr=subprocess.STDOUT, process_group=0)  # fmt: skip
        note = ""
        try:
            if plan.server:
                note = _ask_server(plan)
                proc.send_signal(signal.SIGINT)
            rc: int | None = proc.wait(timeout=PER_COMMAND_TIMEOUT_S)
        except (subprocess.TimeoutExpired, AssertionError, OSError) as exc:
            note = f"{note} {type(exc).__name__}: {exc}".strip()
            rc = None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        fh.seek(0)
        output = fh.read().decode("utf-8", "replace")
    m = re.search(r"the replay in (results/demo-[0-9TZ]+)/replay", output)
    if plan.argv[0].endswith("scripts/demo") and m:  # scripts/demo writes its replay into the repository
        shutil.rmtree(REPO / m.group(1), ignore_errors=True)
        note += f"; removed {m.group(1)} (the demo's replay, written in the repository)"
    missing = [f for f in plan.expect if not (ctx.cwd / f).exists()]
    if missing:
        note = (f"{note}; " if note else "; ") + f"missing: {', '.join(missing)}"
    if plan.server and rc == 0:
        truth = opt(plan.argv, "--truth-log")
        if truth is not None:
            lines = (ctx.cwd / truth).read_text().splitlines() if (ctx.cwd / truth).exists() else []
            note += f"; {truth}: {len(lines)} line(s)"
            if not lines:
                rc, note = None, note + " (the truth log is empty)"
    return Outcome(rc, time.monotonic() - t0, output, note)


def _ask_server(plan: Plan) -> str:
    port = int(str(opt(plan.argv, "--port")))
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError(f"nothing listens on 127.0.0.1:{port} after 30 s") from None
            time.sleep(0.2)
    body = json.dumps({"model": "sim-model", "prompt": "hello", "max_tokens": 3}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=20) as r:
        assert r.status == 200
        json.loads(r.read())
    return "one completion answered (HTTP 200)"


def _fake_platforms() -> tuple[Any, Any]:
    from tests.fixtures.fake_platforms import PlatformServer, anthropic_writes, azure_chat_writes

    az = azure_chat_writes(["a", "b", "c"], [0.01, 0.02, 0.03],
                           usage={"prompt_tokens": 100, "completion_tokens": 3, "total_tokens": 103})  # fmt: skip
    an = anthropic_writes([("text", [(0.01, "Hi"), (0.02, " there")])], input_tokens=20, output_deltas=[(0.03, 2)])
    models = [str(opt(c.argv, "--model")) for c in COMMANDS if opt(c.argv, "--provider") == "anthropic"]
    azure = PlatformServer([{"writes": az} for _ in range(200)]).start_in_thread()
    anthropic = PlatformServer([{"writes": an} for _ in range(200)], models=models or ["claude-x"]).start_in_thread()
    return azure, anthropic


def _start_triton(tmp: Path) -> tuple[Any, str]:
    from loadgen.serve import launch
    from loadgen.serve.vllm import find_server_python

    py, source = find_server_python("triton")
    if "no --server-python" in source or not os.path.exists(py):
        return None, "no Triton environment: run scripts/setup_servers triton (or set LOADGEN_TRITON_PYTHON)"
    try:
        import tritonclient.grpc  # noqa: F401
    except ImportError:
        return None, "the client side needs tritonclient[grpc] (loadgen[triton])"
    srv = launch("triton", pytriton=str(REPO / "servers" / "pytriton" / "tiny_llm.py"), server_python=py,
                 triton_model="tiny_llm", engine_args=["--ttft-ms", "20", "--itl-ms", "2"],
                 log_dir=str(tmp / "triton-log"), ready_timeout_s=120)  # fmt: skip
    return srv, ""


def _vllm_python() -> str | None:
    from loadgen.serve.vllm import find_server_python

    py, source = find_server_python("vllm")
    return py if "no --server-python" not in source and os.path.exists(py) else None


@dataclass
class Ran:
    plans: dict[str, Plan]
    outcomes: dict[str, Outcome]
    errors: dict[str, str]
    wall_s: float


ALL = COMMANDS + HELP_EXAMPLES


def ident(cmd: ShellCommand) -> str:
    if cmd.source == "README.md":
        return cmd.ident
    return cmd.source.replace(" --help", "").replace(" ", "-") + f"-help-{cmd.ident}"


def _selected(request: pytest.FixtureRequest) -> set[str]:
    """The idents of this module's commands that the session will run (``-k`` narrows the work)."""
    keys = set()
    for item in request.session.items:
        spec = getattr(item, "callspec", None)
        cmd = spec.params.get("cmd") if spec is not None else None
        if getattr(item, "module", None) is sys.modules[__name__] and isinstance(cmd, ShellCommand):
            keys.add(ident(cmd))
    return keys


@pytest.fixture(scope="module")
def ran(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ran]:
    """Every selected command, run once: 3 at a time, the sweeps in turn, then those that need earlier outputs.

    ``--serve vllm`` starts first (its server's start is the longest step); the others fill that time.
    """
    t_all = time.monotonic()
    cwd = tmp_path_factory.mktemp("readme")
    for name, src in NAMED_FILES.items():
        shutil.copyfile(src, cwd / name)
    needs = " ".join(c.text for c in ALL)
    if "./tok" in needs:
        from tests.fixtures.tokenizer import build_test_tokenizer

        build_test_tokenizer(cwd / "tok")
    vllm_python = _vllm_python() if "--serve vllm" in needs else None
    if vllm_python is not None:
        from tests.fixtures.tiny_model import build_tiny_model

        build_tiny_model(cwd / "model")
    azure, anthropic = _fake_platforms()
    triton, triton_skip = _start_triton(cwd) if "--api triton" in needs else (None, "")
    try:
        with SimProcess(FAST_SIM) as sim, SimProcess(SWEEP_SIM) as sweep_sim:
            assert sim.url and sweep_sim.url
            ctx = Context(cwd, sim.url, sweep_sim.url, azure.url, anthropic.url,
                          dict(triton.info) if triton else None, triton_skip, vllm_python)  # fmt: skip
            plans: dict[str, Plan] = {}
            errors: dict[str, str] = {}
            for cmd in ALL:
                if cmd.not_in_ci or cmd.ci_itself:
                    continue
                try:
                    plans[ident(cmd)] = plan_for(cmd, ctx)
                except NoRule as exc:
                    errors[ident(cmd)] = f"no shortening rule for this command: {exc}"
            outcomes: dict[str, Outcome] = {}
            lock = threading.Lock()

            def go(key: str) -> None:
                out = execute(plans[key], ctx)
                with lock:
                    outcomes[key] = out
                    print(f"[readme] {key}: exit {out.rc} in {out.seconds:.1f} s {out.note}", flush=True)

            wanted = _selected(request)
            for p in [plans[k] for k in wanted if k in plans]:  # what a selected command's links need
                outs = set(p.links.values())
                wanted |= {k for k, q in plans.items() if opt(q.argv, "--out") in outs}
            runnable = {k: p for k, p in plans.items() if p.skip is None and k in wanted}
            first = [k for k, p in runnable.items() if p.group == "parallel"]
            sweeps = [k for k, p in runnable.items() if p.group == "sweeps"]
            after = [k for k, p in runnable.items() if p.group == "after"]
            early = [k for k, p in runnable.items() if p.group == "early"]
            with ThreadPoolExecutor(max_workers=5) as pool:
                started = [pool.submit(go, k) for k in early]

                def one_by_one() -> None:
                    for k in sweeps:
                        go(k)

                serial = pool.submit(one_by_one)
                list(pool.map(go, first))
                serial.result()
                list(pool.map(go, after))
                for f in started:
                    f.result()
            yield Ran(plans, outcomes, errors, time.monotonic() - t_all)
    finally:
        azure.stop_thread()
        anthropic.stop_thread()
        if triton is not None:
            triton.stop()


def _report(plan: Plan, out: Outcome | None) -> None:
    print(f"\n{plan.cmd.source}:{plan.cmd.line}: {plan.cmd.text}")
    for line in plan.rewrites or ["(run as written)"]:
        print(f"  rewrite: {line}")
    print(f"  ran:     {' '.join(plan.argv)}")
    for k, v in plan.env.items():
        print(f"  env:     {k}={'***' if 'KEY' in k else v}")
    if out is not None:
        print(f"  exit {out.rc} in {out.seconds:.1f} s {out.note}".rstrip())
        if out.rc != 0:
            lines = out.output.splitlines()
            why = [ln for ln in lines if re.search(r"Result is|^\s*(FAIL|fail)\b|no rate met|lower bound|Error", ln)]
            print("  its verdict lines, then its last lines:")
            for line in why[:8] + ["..."] + lines[-6:]:
                print(f"    | {line}")


def _judge(key: str, ran: Ran) -> None:
    assert key not in ran.errors, ran.errors.get(key)
    plan = ran.plans[key]
    if plan.skip is not None:
        _report(plan, None)
        pytest.skip(plan.skip)
    out = ran.outcomes[key]
    _report(plan, out)
    tail = "\n".join(out.output.splitlines()[-25:])
    if out.rc == 0:
        assert "Traceback (most recent call last)" not in out.output and not out.missing, f"{out.note}\n{tail}"
        return
    want = plan.tolerated.get(out.rc) if out.rc is not None else None
    assert want is not None and want in out.output and not out.missing, (
        f"{plan.cmd.source}:{plan.cmd.line} exited {out.rc} ({out.note}), which the README does not "
        f"promise for it; last lines:\n{tail}"
    )
    print(f"  tolerated: exit {out.rc} is the README's promise for a client that could not keep up ({want!r})")


@pytest.mark.parametrize("cmd", COMMANDS, ids=[ident(c) for c in COMMANDS])
def test_readme_command(cmd: ShellCommand, ran: Ran) -> None:
    """Each README command runs (shortened) and exits as the README promises, or is marked in the README."""
    if cmd.not_in_ci:
        print(f"\nREADME.md:{cmd.line}: {cmd.text}\n  not run: marked in the README: {cmd.not_in_ci}")
        return
    if cmd.ci_itself:
        ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
        print(f"\nREADME.md:{cmd.line}: {cmd.text}\n  not run here: .ci/run runs it as a stage of its own")
        assert cmd.argv[0] in ci, f"README.md:{cmd.line} says CI runs {cmd.argv[0]}, but .ci/run does not"
        return
    _judge(ident(cmd), ran)


HELP_PARAMS = [pytest.param(c, id=ident(c)) for c in HELP_EXAMPLES] or [pytest.param(None, id="none-yet")]


@pytest.mark.parametrize("cmd", HELP_PARAMS)
def test_help_example(cmd: ShellCommand | None, ran: Ran) -> None:
    """Each example of a ``--help`` epilog runs (shortened) like a README command."""
    if cmd is None:
        print("\nno epilog of loadgen's commands shows an example today (tests.readme_commands.help_examples)")
        return
    _judge(ident(cmd), ran)


def test_every_command_was_planned_and_timed(ran: Ran) -> None:
    """The list of what ran, in one place, and the whole module's wall time."""
    print(f"\n{len(ALL)} commands ({len(COMMANDS)} README, {len(HELP_EXAMPLES)} --help examples); "
          f"{len(ran.outcomes)} run, {sum(p.skip is not None for p in ran.plans.values())} skipped, "
          f"{sum(bool(c.not_in_ci or c.ci_itself) for c in ALL)} marked; wall {ran.wall_s:.1f} s")  # fmt: skip
    for key, out in sorted(ran.outcomes.items(), key=lambda kv: -kv[1].seconds):
        print(f"  {out.seconds:6.1f} s  exit {out.rc}  {key}")
    assert len(ALL) >= 20 and not ran.errors, ran.errors

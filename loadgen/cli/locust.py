"""The ``locust`` command: start Locust with loadgen's LLM user (``loadgen/locust/locustfile.py``).

``loadgen locust --endpoint URL [workload options] [Locust options]``. Options this
command does not know go to Locust unchanged (``-u``, ``-r``, ``-t``,
``--headless``, ``--master``, ``--worker``, ``--expect-workers``,
``--stop-timeout``, ``--web-port``, ...). Locust runs in a child process: this
module never imports it (``import locust`` monkey-patches the standard library),
so the rest of loadgen stays free of gevent.

Before Locust starts, the endpoint is discovered and pre-flighted once with the
same code as ``loadgen run`` (served model, accepted optional fields); the
resolved configuration travels to the Locust process as JSON in
``LOADGEN_LOCUST_CONFIG`` (the environment, never the command line ``ps`` shows) and
from the master to its workers at each test start, without its secrets
(:mod:`loadgen.locust.channel`). A worker (``--worker``) needs no workload options;
it brings its own credentials (``--endpoint`` with userinfo, ``--header``,
``--api-key-env``, ``--extra-body``, best in ``--config FILE``).

Exit codes as ``loadgen run`` (:func:`loadgen.cli.locust_exit_code` decides them from the
:class:`LocustOutcome` this command returns): 0 for a VALID result, 1 for INVALID (or no
result), 3 when the endpoint is unreachable, Locust's own code when it crashed.

Defaults chosen on purpose: the web UI binds 127.0.0.1 (another interface only with
``--web-token-env``, whose token the UI then requires); the master's worker port binds
127.0.0.1 (another interface only with ``--allow-remote-workers`` and a shared token,
``--master-token-env``); ``--stop-timeout 30`` (requests in flight at a stop get 30 s to
finish, then count as ``cancelled``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

import click

from loadgen.cli.config import config_record
from loadgen.cli.locust_options import LocustOptions
from loadgen.cli.options import (
    _header_name,
    duration_s,
    parse_extra_body,
    parse_headers,
    usage_errors,
)
from loadgen.cli.runfile import config_file_option, merge_file_headers
from loadgen.cli.scale import refuse_brace_list
from loadgen.cli.session_options import SessionOptions, session_source
from loadgen.cli.target import endpoint_from_options
from loadgen.cli.target_options import EndpointOptions
from loadgen.cli.url_options import URL

__all__ = ["LOCUSTFILE", "LocustOutcome", "locust_cmdline", "locust_command", "master_args", "web_args"]

LOCUSTFILE = Path(__file__).resolve().parents[1] / "locust" / "locustfile.py"
_REPO_ROOT = str(Path(__file__).resolve().parents[2])
_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
DEFAULT_STOP_TIMEOUT_S = 30
DEFAULT_MAX_INFLIGHT = 1000
WORKER_SECRETS_ENV = "LOADGEN_LOCUST_WORKER_SECRETS"  # as loadgen.locust.channel (the CLI never imports it)
MASTER_TOKEN_ENV = "LOADGEN_LOCUST_MASTER_TOKEN"


def _opt_value(args: list[str], *names: str) -> str | None:
    """The value of a pass-through option (``--name V`` or ``--name=V``), last one wins."""
    found = None
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                found = args[i + 1]
            elif a.startswith(n + "="):
                found = a.split("=", 1)[1]
    return found


def _has(args: list[str], *names: str) -> bool:
    return any(a == n or a.startswith(n + "=") for a in args for n in names)


def web_args(args: list[str], token_env: str | None) -> list[str]:
    """Pass-through args with the web UI bound to loopback unless told otherwise.

    Raises UsageError for a non-loopback ``--web-host`` without ``--web-token-env``.
    """
    if _has(args, "--web-login"):
        raise click.UsageError("--web-login needs a login page set up in the Locust file; use --web-token-env NAME")
    host = _opt_value(args, "--web-host")
    if host is None:
        return ["--web-host", "127.0.0.1", *args]
    if host not in _LOOPBACK and not token_env:
        raise click.UsageError(
            f"--web-host {host!r} exposes the Locust UI (it can start load) beyond this machine: "
            "also give --web-token-env NAME (the UI then requires that token)"
        )
    return list(args)


def master_args(args: list[str], token_env: str | None, allow_remote: bool) -> list[str]:
    """Pass-through args with the master's worker port bound to loopback unless told otherwise.

    Always explicit (so Locust's default ``*``, a ``locust.conf`` or ``LOCUST_MASTER_BIND_HOST``
    cannot widen it unseen); a non-loopback bind (from the command line or that variable) needs
    ``--allow-remote-workers`` and ``--master-token-env``, else UsageError.
    """
    host = _opt_value(args, "--master-bind-host")
    if host is None:
        host = os.environ.get("LOCUST_MASTER_BIND_HOST") or "127.0.0.1"
        args = ["--master-bind-host", host, *args]
    if host not in _LOOPBACK and not (allow_remote and token_env):
        raise click.UsageError(
            f"--master-bind-host {host!r} lets any machine that reaches it join as a worker and receive "
            "the test plan: also give --allow-remote-workers and --master-token-env NAME (a shared token "
            "every worker must prove; give the workers the same --master-token-env)"
        )
    return list(args)


def worker_secrets(eopts: EndpointOptions) -> dict[str, Any]:
    """What a worker was given to send with (its own credentials: the master sends none)."""
    out: dict[str, Any] = {}
    if eopts.endpoint:
        out["endpoint_url"] = eopts.endpoint
    if eopts.headers:
        out["headers"] = parse_headers(eopts.headers)
    if eopts.api_key_env:
        out["api_key_env"] = eopts.api_key_env
    if eopts.extra_body:
        out["extra_body"] = parse_extra_body(eopts.extra_body)
    return out


def _token_env(child_var: str, option: str, name: str | None) -> dict[str, str]:
    """``{child_var: token}`` from the environment variable ``name`` (UsageError when it is unset)."""
    if not name:
        return {}
    if not os.environ.get(name):
        raise click.UsageError(f"{option} {name}: that environment variable is not set")
    return {child_var: os.environ[name]}


def locust_cmdline(args: list[str], endpoint_shown: str | None) -> list[str]:
    """The child's command line: Locust on loadgen's Locust file, our defaults first.

    A ``-H`` given here is only the UI's label (``--endpoint`` fixes the target): its
    secrets are removed, as the command line is visible to every local user."""
    from loadgen.core.redact import redact_url

    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE)]
    args = [redact_url(a) if "://" in a else a for a in args]
    if endpoint_shown and not _has(args, "-H", "--host"):
        cmd += ["-H", endpoint_shown]
    if not _has(args, "--stop-timeout") and not _has(args, "--worker"):
        cmd += ["--stop-timeout", str(DEFAULT_STOP_TIMEOUT_S)]
    return cmd + args


def _run_child(cmd: list[str], env: dict[str, str]) -> int:
    """Run Locust in our process group and wait for it to finish (it writes the result).

    Ctrl-C reaches Locust through the terminal's process group, so SIGINT is ignored
    here (a second SIGINT would break Locust's shutdown); SIGTERM and SIGHUP are
    forwarded (Locust stops the test, writes the result and exits).
    """
    proc = subprocess.Popen(cmd, env=env)

    def forward(sig: int, _frame: FrameType | None) -> None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass

    old = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN)}
    for s in (signal.SIGTERM, signal.SIGHUP):
        old[s] = signal.signal(s, forward)
    try:
        return proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_REPO_ROOT, env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def build_config(
    record: dict[str, Any],
    lo: LocustOptions,
    eopts: EndpointOptions,
    endpoint: Any,
    endpoint_url: str,
    embedded: bool,
    locust_args: list[str],
) -> dict[str, Any]:
    """The JSON configuration the Locust process runs with (no secret values recorded; ``record``: the
    command's options as recorded in result.json)."""
    from loadgen.core.redact import redact_url

    mode = "sessions" if lo.sessions else "open" if lo.open_loop else "closed"
    mine = ("web_token_env", "master_token_env", "allow_remote_workers", "config_file")
    rec = config_record({k: v for k, v in record.items() if k not in mine}, eopts, endpoint_url, embedded)
    rec["locust_args"] = [redact_url(a) if "://" in a else a for a in locust_args]
    rec["mode"] = mode
    return {
        "mode": mode,
        "endpoint_url": endpoint_url,
        "endpoint_shown": redact_url(endpoint_url),
        "api": eopts.api,
        "model": endpoint.config.model,
        "headers": parse_headers(eopts.headers),
        "api_key_env": eopts.api_key_env
        or (None if embedded or not os.environ.get("OPENAI_API_KEY") else "OPENAI_API_KEY"),
        "extra_body": parse_extra_body(eopts.extra_body),
        "timeout_s": duration_s(eopts.timeout, "--timeout") or 600.0,
        "connect_timeout_s": duration_s(eopts.connect_timeout, "--connect-timeout") or 10.0,
        "header_timeout_s": endpoint.config.header_timeout_s,  # resolved by endpoint_from_options
        "verify_tls": not eopts.insecure,
        "pool_limit": max(lo.max_concurrency or DEFAULT_MAX_INFLIGHT, 1) + 16,
        "accepted": dict(endpoint.accepted),
        "describe": endpoint.describe(),
        "workload": lo.workload(),
        "rate": lo.rate,
        "arrival": lo.arrival,
        "burstiness": lo.burstiness,
        "requests": lo.n_requests,
        "duration_s": duration_s(lo.duration, "--duration"),
        "max_concurrency": lo.max_concurrency or DEFAULT_MAX_INFLIGHT,
        "origin": lo.latency_origin,
        "slos": list(lo.slos),
        "save_text": lo.save_text,
        "token_lists": not lo.no_token_lists,
        "out_dir": str(Path(lo.out_dir or "").resolve()),
        "config_record": rec,
        "sessions": lo.sessions,  # --sessions SOURCE: a Locust user is a session (loadgen.locust.session_user)
        "session_header": eopts.session_header,
    }


def validate(kw: dict[str, Any], lo: LocustOptions, api: str) -> None:
    """Option checks that need no endpoint (``kw``: click's values, for the checks shared with run and
    sweep); raises UsageError."""
    from loadgen.core.slo import parse_slo
    from loadgen.workload.spec import Workload, WorkloadOptions

    if lo.rate is not None and lo.rate <= 0:
        raise click.UsageError("--rate must be > 0")
    refuse_brace_list(kw, "locust")
    src = session_source(
        SessionOptions.from_kw(kw)
    )  # usage errors: --session-header without --sessions, --trace/--dataset with it
    if src is not None:
        for value, flag in ((lo.rate, "--rate"), (lo.n_requests, "--requests"), (lo.duration, "--duration"),
                            (lo.max_concurrency, "--max-concurrency")):  # fmt: skip
            if value is not None:
                raise click.UsageError(
                    f"{flag} with --sessions: a Locust user is a session (closed loop): -u N runs N sessions at "
                    "once, each replaced when it ends, until -t or the stop button"
                )
        from loadgen.sessions.planning import check_sessions

        # the whole source checked once, before any user starts: a bad one fails here, naming its file, line and
        # field (issue 32); the waits its sessions will have capped are said once
        for line in check_sessions(src, seed=lo.seed):
            click.echo(f"warning: {line}", err=True)
    if not lo.open_loop:
        for value, flag in ((lo.n_requests, "--requests"), (lo.duration, "--duration"),
                            (lo.max_concurrency, "--max-concurrency")):  # fmt: skip
            if value is not None:
                raise click.UsageError(
                    f"{flag} shapes an open-loop schedule: give --rate (closed-loop users run until -t or stop)"
                )
    if lo.n_requests is not None and lo.duration is not None:
        raise click.UsageError("--requests and --duration clash: give one")
    from loadgen.engine.runplan import LoadConfig

    with usage_errors():  # the arrival settings' and the in-flight cap's rules, one place (issue 29)
        LoadConfig(arrival=lo.arrival, burstiness=lo.burstiness, max_concurrency=lo.max_concurrency).check_kept()
    with usage_errors():
        Workload(WorkloadOptions(**{**lo.workload(), "api": api, "salt": lo.salt or "check"}))
        for t in lo.slos:
            parse_slo(t)


def _preflight(eopts: EndpointOptions, endpoint_url: str, embedded: bool) -> Any:
    """Discover the served model and the accepted optional fields, with ``loadgen run``'s code."""
    from loadgen.core.redact import Redactor

    endpoint = endpoint_from_options(replace(eopts, no_stream=False), endpoint_url, embedded, Redactor())

    async def go() -> None:
        try:
            await endpoint.open()
        finally:
            await endpoint.close()

    asyncio.run(go())
    return endpoint


@click.command(
    "locust",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": ["--help"]},
)
@click.option(
    "--endpoint",
    type=URL,
    help="Base URL of an OpenAI-compatible server (default: start the embedded simulated endpoint).",
)
@click.option("--api", type=click.Choice(["completions", "chat"]), default="completions", show_default=True)
@click.option("--model", help="Model name sent in requests (default: the first model the endpoint lists).")
@click.option(
    "--header",
    "headers",
    multiple=True,
    callback=merge_file_headers,
    help="Extra request header 'Name: value' (repeatable; adds to a --config file's).",
)
@click.option("--api-key-env", help="Environment variable holding the API key (read by every Locust process).")
@click.option("--timeout", default="600s", show_default=True, help="Total per-request deadline.")
@click.option("--connect-timeout", default="10s", show_default=True)
@click.option(
    "--header-timeout",
    help="No response headers this long after the send ends the request as header_timeout (the server's failure) "
    "[default: max(30s, 10x the TTFT target) with a --slo on ttft, else 60s].",
)
@click.option("--extra-body", help="JSON object merged into every request body.")
@click.option("--no-preflight", is_flag=True, help="Skip the pre-flight request that detects optional fields.")
@click.option("--insecure", is_flag=True, help="Do not verify TLS certificates (recorded in the result).")
@click.option("--sim-args", default="", help="Flags for the embedded simulated endpoint, e.g. '--itl-ms 10'.")
@click.option(
    "--rate", type=float, help="Open loop: requests per second, independent of responses (default: closed loop)."
)
@click.option("--arrival", type=click.Choice(["poisson", "constant", "gamma"]), default="poisson", show_default=True)
@click.option("--burstiness", type=float, default=1.0, show_default=True, help="Gamma shape (1.0 = Poisson).")
@click.option("--requests", "n_requests", type=int, help="Open loop: schedule this many requests.")
@click.option("--duration", help="Open loop: schedule this long (default: Locust's -t, else 1 h).")
@click.option(
    "--max-concurrency",
    type=int,
    help=f"Open loop: in-flight cap per process (default {DEFAULT_MAX_INFLIGHT}); reaching it makes the run INVALID.",
)
@click.option(
    "--input-tokens",
    default="128",
    show_default=True,
    help="Prompt length: N or a distribution (uniform:A,B, normal:M,SD, ...).",
)
@click.option("--output-tokens", default="64", show_default=True, help="Output length: N or a distribution.")
@click.option(
    "--output-tokens-override", is_flag=True, help="--output-tokens wins over a trace's or data set's lengths."
)
@click.option("--trace", help="Replay a request trace (file or builtin:NAME): open loop on its timestamps.")
@click.option("--trace-format", default="auto", show_default=True)
@click.option("--trace-time-scale", type=float, help="Divide the trace's offsets by this factor.")
@click.option("--trace-start", type=float, default=0.0, show_default=True, help="Trace window start (s).")
@click.option("--trace-duration", type=float, help="Trace window length (s).")
@click.option("--trace-max-requests", type=int, help="At most this many trace rows.")
@click.option("--dataset", help="Prompts from a data set (ShareGPT JSON or loadgen JSONL).")
@click.option("--tokenizer", help="Hugging Face tokenizer (directory or tokenizer.json) for exact prompt lengths.")
@click.option("--prompt-format", type=click.Choice(["text", "token-ids"]), default="text", show_default=True)
@click.option("--shared-prefix-tokens", type=int, default=0, show_default=True)
@click.option("--prefix-groups", type=int, default=1, show_default=True)
@click.option(
    "--sessions",
    help="Multi-turn sessions, as loadgen run --sessions: 'synthetic,turns=10,input=64,output=32,delay=1s' or a "
    "session file [,key=value...]. A Locust user is a session: -u N runs N sessions at once, each replaced when it "
    "ends; Locust's table has one row per turn depth ('turn K').",
)
@click.option(
    "--session-header",
    callback=_header_name,
    help="Send this header (e.g. X-Session-ID) with the session's id on every turn of a --sessions test.",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--salt", help="Prompt salt (default: a fresh one per test).")
@click.option("--save-text", is_flag=True, help="Keep each request's output text in requests.jsonl.")
@click.option("--no-token-lists", is_flag=True, help="Leave per-token ITL lists out of requests.jsonl.")
@click.option("--latency-origin", type=click.Choice(["scheduled", "sent"]), default="scheduled", show_default=True)
@click.option(
    "--slo",
    "slos",
    multiple=True,
    help="SLO target METRIC:pNN<=VALUE, e.g. ttft:p99<=300ms (repeatable): its verdict in the loadgen tab and result.json.",
)
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False), help="Output directory (default results/<UTC time>-locust/)."
)
@click.option(
    "--web-token-env",
    help="Environment variable with a token the web UI requires (needed for a non-loopback --web-host).",
)
@click.option(
    "--master-token-env",
    help="Environment variable with a token shared by the master and its workers; each worker must prove "
    "it (HMAC challenge; the token never travels). Needed for a non-loopback --master-bind-host.",
)
@click.option(
    "--allow-remote-workers",
    is_flag=True,
    help="Let --master-bind-host name an interface beyond loopback (with --master-token-env).",
)
@config_file_option
@click.pass_context
def locust_command(ctx: click.Context, **kw: Any) -> LocustOutcome:
    """Locust with loadgen's LLM user: one Locust row per request (E2E); TTFT, TPOT, ITL, tok/s and the
    SLO verdict in the loadgen tab; loadgen's result.json at the end.

    Closed loop by default (Locust users); --rate gives an open-loop schedule. The web UI's
    start form takes the rate, arrival, input/output tokens and SLO (Custom parameters).
    Unknown options go to Locust (-u, -r, -t, --headless, --master, --worker,
    --expect-workers, --stop-timeout, --web-host, --web-port, ...).

    \b
    Distributed: the master listens for workers on 127.0.0.1 (--master-bind-host beyond
    loopback needs --allow-remote-workers and --master-token-env). The master never sends
    credentials to its workers: each worker reads its own, e.g.
      loadgen locust --worker --master-host H --config worker.toml --api-key-env OPENAI_API_KEY
    with worker.toml (chmod 600) holding the secret parts of the master's options:
      endpoint = "https://user:pass@host/v1"   header = ["Authorization: Bearer ..."]
      extra-body = '{"api_key": "..."}'
    A worker missing a credential the master uses, or aimed elsewhere, says so and exits 2.
    """
    if importlib.util.find_spec("locust") is None:
        raise click.ClickException("Locust is not installed: pip install 'loadgen[locust]'")
    args = list(ctx.args)
    # the options typed once (issue 29: frozen values built from click's, --config merged into them)
    lo, eopts = LocustOptions.from_kw(kw), EndpointOptions.from_kw(kw)
    token_env = lo.web_token_env
    extra_env = _token_env("LOADGEN_LOCUST_WEB_TOKEN", "--web-token-env", token_env)
    extra_env.update(_token_env(MASTER_TOKEN_ENV, "--master-token-env", lo.master_token_env))
    if _has(args, "--worker"):  # the master sends the configuration (no secrets) at each test start
        extra_env[WORKER_SECRETS_ENV] = json.dumps(worker_secrets(eopts))
        return LocustOutcome(_run_child(locust_cmdline(args, None), _child_env(extra_env)), worker=True)
    args = master_args(web_args(args, token_env), lo.master_token_env, lo.allow_remote_workers)
    validate(kw, lo, eopts.api)
    from loadgen.engine.recordlog import default_out_dir

    out_dir = lo.out_dir or str(default_out_dir("locust"))
    lo = replace(lo, out_dir=out_dir)
    kw["out_dir"] = out_dir  # the record (result.json's config) names the directory written
    from loadgen.cli.options import make_out_dir

    make_out_dir(Path(out_dir))  # one usage line before any child starts (a name too long, no write access)
    sim = None
    embedded = eopts.endpoint is None
    try:
        if embedded:
            from loadgen.sim.launch import SimProcess

            sim = SimProcess(lo.sim_args.split() if lo.sim_args else [])
            click.echo(f"no --endpoint: started the embedded simulated endpoint at {sim.url} (a test double)", err=True)
        endpoint_url: str = sim.url if sim is not None and sim.url else (eopts.endpoint or "")
        # EndpointUnreachable (exit 3) and ConfigError (usage) go up to loadgen.cli's mapping
        endpoint = _preflight(eopts, endpoint_url, embedded)
        cfg = build_config(kw, lo, eopts, endpoint, endpoint_url, embedded, args)
        extra_env["LOADGEN_LOCUST_CONFIG"] = json.dumps(cfg)
        code = _run_child(locust_cmdline(args, cfg["endpoint_shown"]), _child_env(extra_env))
    finally:
        if sim is not None:
            sim.stop()
    result_path = Path(cfg["out_dir"]) / "result.json"
    if not result_path.exists():
        return LocustOutcome(code, valid=None)
    result = json.loads(result_path.read_text(encoding="utf-8"))
    valid = result["validity"]["valid"]
    if result.get("sessions"):  # the session summary of loadgen run --sessions
        from rich.console import Console

        from loadgen.report.session_summary import render_sessions

        render_sessions(result["sessions"], Console(stderr=True, soft_wrap=True))
    click.echo(f"loadgen: {'VALID' if valid else 'INVALID'}; result in {result_path}", err=True)
    return LocustOutcome(code, valid=valid)


@dataclass(frozen=True)
class LocustOutcome:
    """How a ``loadgen locust`` ended: Locust's exit code and the result's verdict.

    ``valid`` is None when Locust wrote no result; ``worker`` for a ``--worker`` process
    (it writes none: the master does).
    """

    locust_code: int
    valid: bool | None = None
    worker: bool = False

"""No secret reaches the output directory, stdout or stderr; the server gets the real key.

Unique sentinel keys are planted everywhere a credential can be given (the
``--api-key-env`` variable, ``Authorization`` and ``x-api-key`` headers, a URL
query parameter, URL userinfo, ``--extra-body``) and runs are made against a
recording server on 127.0.0.1 that answers OK, fails with the keys echoed in its
error bodies (HTTP 500, 429, in-band stream errors), or stops listening mid-run.
Every output is searched for each key plain, URL-encoded and base64-encoded (at
all three byte alignments), and for any 10-character piece of its random part.
"""

from __future__ import annotations

import base64
import json
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

from tests.fixtures.cli_proc import cli_popen, cli_run
from tests.fixtures.recording_server import RecordingServer, http, ok_stream

ENV_NAME = "LOADGEN_TEST_SENTINEL_KEY"


def new_key() -> str:
    return "sk-SENTINEL-" + uuid.uuid4().hex


def b64_cores(secret: str) -> list[str]:
    """The base64 characters that depend only on ``secret``'s bytes, for each of the
    three alignments it can have inside a larger encoded blob."""
    data = secret.encode()
    out = []
    for pad in range(3):
        enc = base64.b64encode(b"\0" * pad + data).decode()
        g0 = -(-pad // 3)  # first 3-byte group made only of secret bytes
        g1 = (pad + len(data)) // 3  # one past the last such group
        out.append(enc[4 * g0 : 4 * g1])
    return out


def leaks(text: str, secret: str) -> list[str]:
    forms = {secret, quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1], *b64_cores(secret)}
    found = [f for f in forms if f and f in text]
    rand = secret.rsplit("-", 1)[-1]
    found += [rand[i : i + 10] for i in range(len(rand) - 9) if rand[i : i + 10] in text]
    return found


def assert_no_leaks(out: Path, proc: subprocess.CompletedProcess[str], keys: dict[str, str]) -> None:
    texts = {"stdout": proc.stdout, "stderr": proc.stderr}
    files = sorted(p for p in out.rglob("*") if p.is_file())
    assert {p.name for p in files} >= {"result.json", "requests.jsonl", "histograms.hlog"}
    for p in files:
        texts[str(p.relative_to(out))] = p.read_bytes().decode("latin-1")
    found = {(where, name): f for where, t in texts.items() for name, k in keys.items() if (f := leaks(t, k))}
    assert found == {}


def load(out: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    res = json.loads((out / "result.json").read_text())
    lines = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    return res, lines


N = 20
COMMON = ["--rate", "40", "--requests", str(N), "--output-tokens", "3"]


def test_keys_stay_out_ok_then_refused(tmp_path: Path) -> None:
    """Key from --api-key-env; x-api-key header; query key; body key. 10 POSTs
    (the pre-flight probe among them) answered, then the server stops listening."""
    keys = {"env": new_key(), "x-api-key": new_key(), "query": new_key(), "body": new_key()}
    with RecordingServer(lambda n, r: ok_stream(), refuse_after=10) as srv:
        out = tmp_path / "out"
        proc = cli_run(
            "run",
            *COMMON,
            "--endpoint",
            f"http://127.0.0.1:{srv.port}/v1?api_key={keys['query']}&x=1",
            "--api-key-env",
            ENV_NAME,
            "--header",
            f"x-api-key: {keys['x-api-key']}",
            "--extra-body",
            json.dumps({"api_key": keys["body"], "temperature": 0}),
            out=out,
            env={ENV_NAME: keys["env"]},
        )
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    res, lines = load(out)
    assert res["counts"]["requests"] == N
    assert res["counts"]["completed"] == 9  # 10 answered POSTs, one was the pre-flight probe
    assert res["counts"]["errors_by_kind"] == {"connect": N - 9}
    assert all(ln["error_detail"] for ln in lines if ln["status"] == "error")
    # the target got the real credentials on every request
    assert srv.requests and len([r for r in srv.requests if r["method"] == "POST"]) == 10
    for r in srv.requests:
        assert r["headers"]["authorization"] == f"Bearer {keys['env']}", r
        assert r["headers"]["x-api-key"] == keys["x-api-key"]
        if r["method"] == "POST":
            assert r["target"] == f"/v1/completions?api_key={keys['query']}&x=1"
            assert json.loads(r["body"])["api_key"] == keys["body"]
    # recorded, but redacted
    assert res["config"]["extra_body"] == {"api_key": "***", "temperature": 0}
    assert res["conditions"]["endpoint"]["url"] == f"http://127.0.0.1:{srv.port}/v1/completions?api_key=***&x=1"
    assert_no_leaks(out, proc, keys)


def _echo_errors(keys: dict[str, str]) -> Callable[[int, dict[str, Any]], bytes]:
    """POST n fails, echoing one key (in turn) plain, URL-encoded and base64-encoded:
    HTTP 500, HTTP 429 or an in-band error event in a 200 stream."""
    names = sorted(keys)

    def respond(n: int, req: dict[str, Any]) -> bytes:
        k = keys[names[n % len(names)]]
        msg = f"bad key {k} / {quote(k, safe='')} / {base64.b64encode(('u:' + k).encode()).decode()}"
        body = json.dumps({"error": {"message": msg, "type": "auth"}}).encode()
        kind = n % 3
        if kind == 0:
            return http("500 Internal Server Error", body)
        if kind == 1:
            return http("429 Too Many Requests", body, extra="Retry-After: 1\r\n")
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        return head + b"data: " + body + b"\n\n"

    return respond


def test_keys_stay_out_of_echoed_errors(tmp_path: Path) -> None:
    """Authorization header given explicitly (it wins over --api-key-env); the server
    echoes the keys back in 500, 429 and in-band stream errors."""
    keys = {"env": new_key(), "authorization": new_key(), "x-api-key": new_key(), "query": new_key(), "body": new_key()}
    with RecordingServer(_echo_errors(keys)) as srv:
        out = tmp_path / "out"
        proc = cli_run(
            "run",
            *COMMON,
            "--no-preflight",
            "--endpoint",
            f"http://127.0.0.1:{srv.port}?token={keys['query']}",
            "--api-key-env",
            ENV_NAME,
            "--header",
            f"Authorization: Bearer {keys['authorization']}",
            "--header",
            f"x-api-key: {keys['x-api-key']}",
            "--extra-body",
            json.dumps({"auth": {"api_key": keys["body"]}}),
            out=out,
            env={ENV_NAME: keys["env"]},
        )
    assert proc.returncode in (0, 1, 6), proc.stderr  # 6: every request failed (on purpose here)
    assert "Traceback" not in proc.stderr
    res, lines = load(out)
    assert res["counts"]["errors_by_kind"] == {"http_error": 7, "rate_limited": 7, "stream_error": 6}
    assert all("***" in ln["error_detail"] for ln in lines)  # the echo was there, and scrubbed
    assert len(srv.requests) == 2 + N  # GET /v1/models, GET /version, the POSTs
    for r in srv.requests:
        assert r["headers"]["authorization"] == f"Bearer {keys['authorization']}", r
        assert r["headers"]["x-api-key"] == keys["x-api-key"]
    assert_no_leaks(out, proc, keys)


def test_userinfo_key_stays_out(tmp_path: Path) -> None:
    """Credentials in the URL's userinfo (no other key): sent as HTTP Basic, never written."""
    key = new_key()
    basic = "Basic " + base64.b64encode(f"bob:{key}".encode()).decode()
    with RecordingServer(_echo_errors({"userinfo": key}), refuse_after=None) as srv:
        out = tmp_path / "out"
        proc = cli_run(
            "run", *COMMON, "--no-preflight", "--endpoint", f"http://bob:{key}@127.0.0.1:{srv.port}", out=out
        )
    assert proc.returncode in (0, 1, 6), proc.stderr  # 6: every request failed (on purpose here)
    assert "Traceback" not in proc.stderr
    res, _ = load(out)
    assert res["counts"]["failed"] == N
    assert res["conditions"]["endpoint"]["url"] == f"http://127.0.0.1:{srv.port}/v1/completions"
    assert res["config"]["endpoint"] == f"http://127.0.0.1:{srv.port}"
    assert len(srv.requests) == 2 + N
    assert all(r["headers"]["authorization"] == basic for r in srv.requests)
    assert_no_leaks(out, proc, {"userinfo": key})


def test_userinfo_with_api_key(tmp_path: Path) -> None:
    keys = {"env": new_key(), "userinfo": new_key()}
    with RecordingServer(lambda n, r: ok_stream()) as srv:
        out = tmp_path / "out"
        proc = cli_run(
            "run",
            *COMMON,
            "--no-preflight",
            "--endpoint",
            f"http://bob:{keys['userinfo']}@127.0.0.1:{srv.port}",
            "--api-key-env",
            ENV_NAME,
            out=out,
            env={ENV_NAME: keys["env"]},
        )
    assert {n: leaks(proc.stdout + proc.stderr, k) for n, k in keys.items()} == {n: [] for n in keys}
    assert "Traceback" not in proc.stderr
    assert proc.returncode in (0, 1), proc.stderr
    assert all(r["headers"]["authorization"] == f"Bearer {keys['env']}" for r in srv.requests)
    assert_no_leaks(out, proc, keys)


def test_key_cut_by_error_truncation(tmp_path: Path) -> None:
    key = new_key()

    def respond(n: int, req: dict[str, Any]) -> bytes:
        # the key starts at character 270 of the body; the error text keeps 300
        prefix = '{"error": {"message": "'
        msg = "x" * (270 - len(prefix)) + key + " rejected"
        return http("500 Internal Server Error", json.dumps({"error": {"message": msg}}).encode())

    with RecordingServer(respond) as srv:
        out = tmp_path / "out"
        proc = cli_run(
            "run",
            *COMMON,
            "--requests",
            "3",
            "--no-preflight",
            "--endpoint",
            f"http://127.0.0.1:{srv.port}",
            "--api-key-env",
            ENV_NAME,
            out=out,
            env={ENV_NAME: key},
        )
    assert proc.returncode in (0, 1, 6), proc.stderr  # 6: every request failed (on purpose here)
    res, lines = load(out)
    assert res["counts"]["errors_by_kind"] == {"http_error": 3}
    assert_no_leaks(out, proc, {"env": key})


def _version_echo(req: dict[str, Any]) -> bytes:
    """A /version that echoes the request's headers (as debugging servers and proxies do)."""
    echoed = "; ".join(f"{k}: {v}" for k, v in req["headers"].items())
    return http("200 OK", json.dumps({"version": f"0.9 ({echoed})"}).encode())


def test_server_text_and_code_query_stay_out(tmp_path: Path) -> None:
    """The server's /version echoes the Authorization header (env key) and an Azure Functions ``?code=`` key
    is in the URL: result.json records the version and the URL, both redacted by value."""
    keys = {"env": new_key(), "code": new_key()}
    with RecordingServer(lambda n, r: ok_stream(), get={"/version": _version_echo}) as srv:
        out = tmp_path / "out"
        proc = cli_run(
            "run",
            *COMMON,
            "--endpoint",
            f"http://127.0.0.1:{srv.port}/v1?code={keys['code']}",
            "--api-key-env",
            ENV_NAME,
            out=out,
            env={ENV_NAME: keys["env"]},
        )
    assert proc.returncode in (0, 1), proc.stderr
    res, _ = load(out)
    assert any(r["target"].startswith("/v1/completions?code=") for r in srv.requests)  # the server got the key
    version = json.dumps(res).split("0.9 (")[1][:400]
    assert "Bearer ***" in version  # the echo was recorded, scrubbed
    assert "code=***" in res["conditions"]["endpoint"]["url"]
    assert_no_leaks(out, proc, keys)


def test_a_mistyped_header_is_not_echoed() -> None:
    key = new_key()
    proc = cli_run("run", *COMMON, "--endpoint", "http://127.0.0.1:9", "--header", f"Authorization Bearer {key}")
    assert proc.returncode == 2
    assert "Authorization" in proc.stderr and "Traceback" not in proc.stderr
    assert leaks(proc.stdout + proc.stderr, key) == []


def test_header_env_keeps_the_secret_off_the_command_line(tmp_path: Path) -> None:
    """``--header-env NAME=ENVVAR``: the server gets the header, no process's argv holds the value, nothing
    written does (issue 20 item 4)."""
    key = new_key()
    with RecordingServer(lambda n, r: ok_stream()) as srv:
        out = tmp_path / "out"
        args = [*COMMON, "--endpoint", f"http://127.0.0.1:{srv.port}", "--header-env", f"x-api-key={ENV_NAME}"]
        proc = cli_run("run", *args, out=out, env={ENV_NAME: key})
    assert proc.returncode in (0, 1), proc.stderr
    assert all(r["headers"]["x-api-key"] == key for r in srv.requests)
    assert key not in " ".join(args)
    res, _ = load(out)
    assert "x-api-key" in res["config"]["header_names"]
    assert_no_leaks(out, proc, {"header-env": key})


def test_a_config_file_with_secrets_must_be_private(tmp_path: Path) -> None:
    key = new_key()
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'header = ["Authorization: Bearer {key}"]\n')
    cfg.chmod(0o644)
    with RecordingServer(lambda n, r: ok_stream()) as srv:
        args = [*COMMON, "--endpoint", f"http://127.0.0.1:{srv.port}", "--config", str(cfg)]
        refused = cli_run("run", *args, out=tmp_path / "a")
        assert refused.returncode == 2 and not srv.requests
        assert (
            f"holds secrets (header Authorization) and is readable by group or others (mode 0644): chmod 600 {cfg}"
            in (refused.stderr)
        )
        assert leaks(refused.stdout + refused.stderr, key) == []
        cfg.chmod(0o600)
        proc = cli_run("run", *args, out=tmp_path / "b")
    assert proc.returncode in (0, 1), proc.stderr
    assert all(r["headers"]["authorization"] == f"Bearer {key}" for r in srv.requests)
    assert_no_leaks(tmp_path / "b", proc, {"config": key})


def test_no_process_loadgen_starts_shows_a_secret(tmp_path: Path) -> None:
    """Every process a run starts (the parent, its worker processes, the embedded simulated endpoint is not
    used here) is scanned in /proc/*/cmdline while it sends: no key in any process title (issue 20 item 4)."""
    if not Path("/proc/self/cmdline").exists():
        import pytest

        pytest.skip("needs /proc")
    import time

    keys = {"env": new_key(), "header-env": new_key()}
    with RecordingServer(lambda n, r: ok_stream()) as srv:
        env = {ENV_NAME: keys["env"], "LOADGEN_TEST_H": keys["header-env"]}
        args = ["--rate", "20", "--requests", "60", "--output-tokens", "3", "--workers", "2",
                "--endpoint", f"http://127.0.0.1:{srv.port}", "--api-key-env", ENV_NAME,
                "--header-env", "x-api-key=LOADGEN_TEST_H", "--out", str(tmp_path / "out")]  # fmt: skip
        p = cli_popen("run", *args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen: list[str] = []
        titles = 0
        for _ in range(100):  # bounded: ~5 s of scans while it runs
            for f in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    t = f.read_bytes().replace(b"\0", b" ").decode("latin-1")
                except OSError:
                    continue
                titles += 1
                seen += [name for name, k in keys.items() if leaks(t, k)]
            if p.poll() is not None:
                break
            time.sleep(0.05)
        out, err = p.communicate(timeout=60)
    assert titles > 0 and seen == []
    assert p.returncode in (0, 1), err
    assert len([r for r in srv.requests if r["method"] == "POST"]) >= 60
    assert all(r["headers"].get("x-api-key") == keys["header-env"] for r in srv.requests if r["method"] == "POST")


@pytest.mark.timing
def test_url_option_credentials_stay_out(tmp_path: Path, sim_url: str) -> None:
    """Credentials in the URL options beside --endpoint (issue 33 item 2): ``--server-metrics`` and
    ``--otlp-endpoint`` each with a userinfo key and a query key. Both are used whole (the scrapes and the
    OTLP pushes carry them) and recorded redacted: none in any file of the run (result.json, report.html,
    config.used.toml, requests.jsonl, ...), stdout or stderr."""
    keys = {n: new_key() for n in ("metrics-userinfo", "metrics-query", "otlp-userinfo", "otlp-query", "dcgm-query")}
    host = sim_url.split("://", 1)[1]
    metrics = f"http://bob:{keys['metrics-userinfo']}@{host}/metrics?api_key={keys['metrics-query']}"
    dcgm = f"http://{host}/metrics?token={keys['dcgm-query']}"  # --dcgm-metrics (issue 33 item 5): a URL option too
    with RecordingServer(lambda n, r: http("200 OK", b"", "application/x-protobuf")) as otlp:
        out = tmp_path / "out"
        otlp_url = f"http://bob:{keys['otlp-userinfo']}@127.0.0.1:{otlp.port}/v1/metrics?token={keys['otlp-query']}"
        args = ["--endpoint", sim_url, "--rate", "20", "--requests", "20", "--output-tokens", "3",
                "--server-metrics", metrics, "--server-metrics-interval", "0.2s",
                "--otlp-endpoint", otlp_url, "--otlp-interval", "1s", "--dcgm-metrics", dcgm,
                "--out", str(out)]  # fmt: skip
        proc = cli_run("run", *args)
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    # used whole: the OTLP receiver got the userinfo as HTTP Basic and the query key
    basic = "Basic " + base64.b64encode(f"bob:{keys['otlp-userinfo']}".encode()).decode()
    assert otlp.requests and all(r["headers"].get("authorization") == basic for r in otlp.requests)
    assert all(r["target"] == f"/v1/metrics?token={keys['otlp-query']}" for r in otlp.requests)
    res, _ = load(out)
    assert res["server"]["scrapes"] >= 2 and res["server"]["series"]["t_s"]  # the scrapes were answered
    shown = f"http://{host}/metrics?api_key=***"
    assert res["server"]["metrics_url"] == res["conditions"]["server"]["metrics_url"] == shown
    assert res["config"]["server_metrics"] == shown
    assert res["config"]["otlp_endpoint"] == f"http://127.0.0.1:{otlp.port}/v1/metrics?token=***"
    assert res["gpu_dcgm"]["metrics_url"] == res["config"]["dcgm_metrics"] == f"http://{host}/metrics?token=***"
    used = (out / "config.used.toml").read_text()
    assert f'server-metrics = "{shown}"' in used and "# otlp-endpoint: credentials in the URL not written" in used
    assert {"report.html", "config.used.toml"} <= {p.name for p in out.iterdir()}
    assert_no_leaks(out, proc, keys)

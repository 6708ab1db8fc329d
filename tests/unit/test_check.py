"""``loadgen check``: agreement figures against a perturbed test double, accuracy, the CLI."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from click.testing import CliRunner

from loadgen.check import (
    CheckSettings,
    Prompt,
    agreement,
    is_correct,
    lcp,
    load_prompts,
    normalise,
    run_check,
    scorecard_values,
)
from loadgen.cli import main

# prompt -> (HTTP status, output token ids, text); the candidate is the reference perturbed
REFERENCE = {
    "p1": (200, [1, 2, 3, 4], "The answer is 42."),
    "p2": (200, [5, 6, 7, 8], "Paris is the capital"),
    "p3": (200, [1, 1, 1], "one one one"),
    "p4": (200, [7, 8], "seven eight"),
    "p5": (500, None, ""),  # the reference failed here: p5 is left out
}
CANDIDATE = {
    "p1": (200, [1, 2, 3, 4], "The answer is 42."),  # identical
    "p2": (200, [5, 6, 9, 9], "Paris is not it"),  # same first token, diverges after 2
    "p3": (200, [2, 1, 1, 1, 1], "two one one one one"),  # first token differs, 5 tokens instead of 3
    "p4": (500, None, ""),  # the candidate failed: a mismatch everywhere
    "p5": (200, [3], "three"),
}


class _Server:
    """A scripted OpenAI-compatible completions server on 127.0.0.1, in its own thread."""

    def __init__(self, script: dict[str, tuple[int, list[int] | None, str]], reject_token_ids: bool = False) -> None:
        self.script = script
        self.reject_token_ids = reject_token_ids
        self.bodies: list[dict[str, Any]] = []
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _completions(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        if self.reject_token_ids and "return_token_ids" in body:
            return web.json_response({"error": {"message": "unknown field return_token_ids"}}, status=400)
        status, ids, text = self.script[body["prompt"]]
        if status != 200:
            return web.json_response({"error": {"message": "boom"}}, status=status)
        choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": "stop"}
        if not self.reject_token_ids:
            choice["token_ids"] = ids
        usage = {"prompt_tokens": 3, "completion_tokens": len(ids or []), "total_tokens": 3 + len(ids or [])}
        return web.json_response({"choices": [choice], "usage": usage})

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "scripted"}]})

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # a started site's asyncio Server
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self) -> _Server:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture()
def prompts_file(tmp_path: Path) -> Path:
    p = tmp_path / "prompts.jsonl"
    answers = {"p1": ["42"], "p2": ["Paris"], "p3": ["three"], "p4": ["eight"], "p5": ["three"]}
    p.write_text("".join(json.dumps({"id": k, "prompt": k, "answers": answers[k]}) + "\n" for k in REFERENCE))
    return p


@pytest.fixture()
def servers() -> Iterator[tuple[_Server, _Server]]:
    with _Server(REFERENCE) as ref, _Server(CANDIDATE) as cand:
        yield ref, cand


def test_perturbed_candidate_exact_figures(
    servers: tuple[_Server, _Server], prompts_file: Path, tmp_path: Path
) -> None:
    ref, cand = servers
    doc = run_check(cand.url, prompts_file=str(prompts_file), reference=ref.url, answers=True, out_dir=tmp_path / "c")
    ag = doc["agreement"]
    assert ag["token_unit"] == "token_ids"
    assert ag["prompts"] == 4 and ag["reference_errors"] == 1 and ag["candidate_errors"] == 1
    assert ag["first_token_agreement"] == 2 / 4  # p1, p2
    assert ag["exact_match_rate"] == 1 / 4  # p1
    assert ag["mean_lcp_tokens"] == (4 + 2 + 0 + 0) / 4
    assert ag["mean_lcp_fraction"] == (1 + 2 / 4 + 0 + 0) / 4
    assert ag["output_length_agreement"] == 2 / 4  # p1, p2 (4 = 4); p3 5 != 3; p4 failed
    assert ag["output_length_ratio"] == (4 + 4 + 5) / (4 + 4 + 3 + 2)
    # answers: p1 "42" yes, p2 "Paris" yes, p3 "three" no, p4 failed, p5 "three" yes
    assert doc["summary"]["accuracy"]["correct"] == 3 and doc["summary"]["accuracy"]["accuracy"] == 3 / 5
    # every request greedy and seeded
    assert all(b["temperature"] == 0.0 and b["seed"] == 0 and b["return_token_ids"] is True for b in cand.bodies)
    saved = json.loads((tmp_path / "c" / "check.json").read_text())
    assert saved["schema_version"] == 1 and saved["kind"] == "loadgen-check"
    assert (tmp_path / "c" / "reference-check.json").exists()
    # the same figures from the saved reference file instead of the reference endpoint
    again = run_check(cand.url, prompts_file=str(prompts_file), reference=str(tmp_path / "c" / "reference-check.json"))
    assert again["agreement"] == {**ag, "warnings": []}
    vals = scorecard_values(doc)
    assert vals["quality_exact_match_rate"] == 0.25 and vals["quality_accuracy"] == 0.6


def test_against_itself_is_full_agreement(servers: tuple[_Server, _Server], prompts_file: Path) -> None:
    ref, _ = servers
    doc = run_check(ref.url, prompts_file=str(prompts_file), reference=ref.url, settings=CheckSettings(rate_rps=50.0))
    ag = doc["agreement"]
    assert (ag["first_token_agreement"], ag["exact_match_rate"], ag["output_length_agreement"]) == (1.0, 1.0, 1.0)
    assert ag["mean_lcp_fraction"] == 1.0 and ag["mean_lcp_tokens"] == (4 + 4 + 3 + 2) / 4
    assert doc["settings"]["load"] == "open loop at 50 req/s"


def test_server_without_token_ids_falls_back_to_words(prompts_file: Path) -> None:
    with _Server(REFERENCE, reject_token_ids=True) as ref, _Server(CANDIDATE, reject_token_ids=True) as cand:
        doc = run_check(cand.url, prompts_file=str(prompts_file), reference=ref.url)
    assert doc["token_ids"] is False
    ag = doc["agreement"]
    assert ag["token_unit"] == "words"
    # words: p1 equal (4 words); p2 "Paris is" common (2 of 4); p3 differ at once; p4 failed
    assert ag["exact_match_rate"] == 1 / 4 and ag["mean_lcp_tokens"] == (4 + 2 + 0 + 0) / 4
    assert "return_token_ids" not in cand.bodies[-1]


def test_settings_mismatch_is_a_warning() -> None:
    out = [{"id": "a", "text": "x", "token_ids": [1], "output_tokens": 1, "error": None}]
    a = {"settings": {"max_tokens": 32}, "token_ids": True, "outputs": out}
    b = {"settings": {"max_tokens": 16}, "token_ids": True, "outputs": out}
    assert agreement(a, b)["warnings"] == ["max_tokens differs: 32 vs reference 16"]


def test_lcp_and_answer_rule() -> None:
    assert lcp([1, 2, 3], [1, 2, 4, 5]) == 2 and lcp([], [1]) == 0
    assert normalise("It's 1,234.") == ["it", "s", "1234"]
    assert is_correct(" 17 + 25 = 42.", ["42"]) and not is_correct(" 420", ["42"])
    assert is_correct("Carbon Dioxide, mostly", ["carbon dioxide"]) and not is_correct("carbon", ["carbon dioxide"])


def test_shipped_questions_have_answers() -> None:
    qs = load_prompts()
    assert len(qs) == 40 and all(isinstance(q, Prompt) and q.answers for q in qs)


def test_cli_check_writes_and_exits(servers: tuple[_Server, _Server], prompts_file: Path, tmp_path: Path) -> None:
    ref, cand = servers
    r = CliRunner().invoke(main, ["check", "--endpoint", cand.url, "--reference", ref.url, "--prompts", str(prompts_file),
                                  "--answers", "--out", str(tmp_path / "o")])  # fmt: skip
    assert r.exit_code == 1, r.output  # one request failed
    assert "exact match 25.0%" in r.output and "accuracy 3/5" in r.output
    assert json.loads((tmp_path / "o" / "check.json").read_text())["agreement"]["prompts"] == 4
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n')
    r = CliRunner().invoke(main, ["check", "--endpoint", cand.url, "--prompts", str(bad)])
    assert r.exit_code == 2 and "bad.jsonl:1: field 'prompt'" in r.output


def test_unreachable_endpoint_is_one_line_and_keys_never_leak(tmp_path: Path) -> None:
    """No server: exit 3 naming the URL and the cause (no traceback), with the key and URL userinfo
    redacted from the message; nothing written that looks like a result."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    key = "sk-check-SENTINEL-4242"
    r = CliRunner().invoke(main, ["check", "--endpoint", f"http://user:{key}@127.0.0.1:{port}", "--header",
                                  f"X-Api-Key: {key}", "--out", str(tmp_path / "o")])  # fmt: skip
    assert r.exit_code == 3, r.output
    assert f"cannot reach http://127.0.0.1:{port}/v1: connection refused" in r.output, r.output
    assert "Traceback" not in r.output and key not in r.output
    assert not (tmp_path / "o" / "check.json").exists()


def _free_port() -> int:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()  # nothing listens there now
    return port


def test_cli_unreachable_with_model_names_the_cause_before_sending_all(tmp_path: Path) -> None:
    """``loadgen check --model`` against nothing: exit 3 and one line naming "connection refused",
    not "40 prompts, 40 failed"; a name that does not resolve says DNS."""
    port = _free_port()
    r = CliRunner().invoke(main, ["check", "--endpoint", f"http://127.0.0.1:{port}", "--model", "m",
                                  "--out", str(tmp_path / "o")])  # fmt: skip
    assert r.exit_code == 3, r.output
    assert f"connection refused by 127.0.0.1:{port}" in r.output and "failed" not in r.output
    assert "--model" not in r.output and len(r.output.strip().splitlines()) == 1
    r = CliRunner().invoke(main, ["check", "--endpoint", "http://no-such-host.invalid:9", "--model", "m"])
    assert r.exit_code == 3 and "DNS: cannot resolve 'no-such-host.invalid'" in r.output, r.output


def test_cli_tls_to_a_plain_server_names_tls(servers: tuple[_Server, _Server]) -> None:
    ref, _ = servers
    r = CliRunner().invoke(main, ["check", "--endpoint", ref.url.replace("http://", "https://"), "--model", "m"])
    assert r.exit_code == 3 and "TLS handshake with 127.0.0.1:" in r.output, r.output


def test_cli_wrong_model_and_not_openai_say_status_and_message(tmp_path: Path) -> None:
    """A 4xx on the first prompt (wrong model) or on /v1/models (not OpenAI-compatible) stops the
    check with the status and the server's own message (exit 2)."""
    with _Server(REFERENCE) as srv:
        srv.script = {**REFERENCE, "p1": (404, None, "")}
        pf = tmp_path / "p.jsonl"
        pf.write_text('{"id": "p1", "prompt": "p1"}\n{"id": "p2", "prompt": "p2"}\n')
        r = CliRunner().invoke(main, ["check", "--endpoint", srv.url, "--prompts", str(pf), "--model", "nope"])
        assert r.exit_code == 2, r.output
        assert (
            "answered HTTP 404: boom before the check" in r.output and len(srv.bodies) == 1
        )  # nothing after the refusal
    port = _free_port()

    async def not_found(_: web.Request) -> web.Response:
        return web.json_response({"detail": "Not Found"}, status=404)

    app = web.Application()
    app.router.add_get("/v1/models", not_found)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    try:
        r = CliRunner().invoke(main, ["check", "--endpoint", f"http://127.0.0.1:{port}"])
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)
        loop.close()
    assert r.exit_code == 2 and "/v1/models answered HTTP 404: Not Found" in r.output, r.output


def test_cli_failures_under_way_are_counted_by_kind_with_their_cause(tmp_path: Path) -> None:
    """Failures after the first prompt are data: the summary line gives each kind's count and cause."""
    script = {"p1": (200, [1], "a"), "p2": (500, None, ""), "p3": (500, None, ""), "p4": (429, None, "")}
    pf = tmp_path / "p.jsonl"
    pf.write_text("".join(json.dumps({"id": k, "prompt": k}) + "\n" for k in script))
    with _Server(script) as srv:
        r = CliRunner().invoke(
            main, ["check", "--endpoint", srv.url, "--prompts", str(pf), "--out", str(tmp_path / "o")]
        )
    assert r.exit_code == 1, r.output
    assert "4 prompts, 3 failed (http_error 2: HTTP 500: boom; rate_limited 1: HTTP 429: boom)" in r.output
    doc = json.loads((tmp_path / "o" / "check.json").read_text())
    assert doc["summary"]["errors_by_kind"]["http_error"] == {"count": 2, "first": "HTTP 500: boom"}
    assert [o["http_status"] for o in doc["outputs"]] == [None, 500, 500, 429]

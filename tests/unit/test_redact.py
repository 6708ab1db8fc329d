"""Secrets never reach what is written: URL, header, body redaction and text scrubbing."""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from loadgen.core.redact import Redactor, find_body_secrets, redact_body, redact_headers, redact_url, split_url_secrets

KEY = "sk-TESTSENTINEL-0123456789abcdef"


def test_url_loses_userinfo_and_key_query_values() -> None:
    url = f"https://user:{KEY}@api.example.test:8443/v1?api_key={KEY}&x=1"
    clean, secrets = split_url_secrets(url)
    assert KEY not in clean
    assert clean == "https://api.example.test:8443/v1?api_key=***&x=1"
    assert KEY in secrets and "user" in secrets
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"


def test_headers_and_body() -> None:
    assert redact_headers({"Authorization": "Bearer x", "X-Trace": "1"}) == {"Authorization": "***", "X-Trace": "1"}
    body = {"temperature": 0, "api_key": KEY, "nested": [{"token": KEY}]}
    assert sorted(find_body_secrets(body)) == [KEY, KEY]
    assert KEY not in repr(redact_body(body))


def test_redactor_scrubs_plain_url_encoded_and_base64() -> None:
    r = Redactor([KEY])
    for pad in ("", "a", "ab"):
        b64 = base64.b64encode((pad + KEY + "tail").encode()).decode()
        assert KEY not in r(b64) and b64 != r(b64)
    assert r(f"error for {quote(KEY, safe='')}") == "error for ***"
    assert r(f"Bearer {KEY}") == "Bearer ***"
    assert r("nothing here") == "nothing here"


def test_key_names_that_are_secrets_only_as_a_whole_name() -> None:
    # Azure Functions keys ride in ?code=; the substring rule must not flag status_code or encoding
    assert (
        redact_url(f"https://fn.example.test/api/chat?code={KEY}&x=1")
        == "https://fn.example.test/api/chat?code=***&x=1"
    )
    assert redact_body({"pwd": KEY, "status_code": 200, "encoding": "utf-8"}) == {
        "pwd": "***",
        "status_code": 200,
        "encoding": "utf-8",
    }
    assert redact_headers({"Ocp-Apim-Subscription-Key": KEY, "x-goog-api-key": KEY, "Accept-Encoding": "gzip"}) == {
        "Ocp-Apim-Subscription-Key": "***",
        "x-goog-api-key": "***",
        "Accept-Encoding": "gzip",
    }


def test_scrub_reaches_every_string_of_a_result() -> None:
    r = Redactor([KEY])
    result: dict[str, Any] = {
        "conditions": {"server_version": f"0.1 (headers: Authorization: Bearer {KEY})"},
        "n": [1, f"x{KEY}"],
    }
    clean = r.scrub(result)
    assert KEY not in repr(clean)
    assert clean["conditions"]["server_version"] == "0.1 (headers: Authorization: Bearer ***)"
    assert clean["n"] == [1, "x***"]
    assert Redactor().scrub(result) is result  # nothing to scrub: the same object


def test_url_options_are_declared_by_their_type() -> None:
    """The URL options of each command (their credentials recorded redacted, loadgen.cli.url_options)."""
    from loadgen.cli.run import run_cmd
    from loadgen.cli.sweep import sweep_cmd
    from loadgen.cli.url_options import record_urls, url_option_names, url_secrets

    assert url_option_names(run_cmd) == {"endpoint", "cluster", "otlp_endpoint", "server_metrics", "dcgm_metrics"}
    assert url_option_names(sweep_cmd) == {"endpoint", "cluster", "server_metrics", "dcgm_metrics"}
    url = f"http://bob:{KEY}@127.0.0.1:9/metrics?api_key={KEY}x"
    assert record_urls(url) == ("http://127.0.0.1:9/metrics?api_key=***", True)
    assert record_urls(["http://h:1/a?b=c"]) == (["http://h:1/a?b=c"], False)  # kept exactly
    assert url_secrets({"server_metrics": url, "otlp_endpoint": None, "rate": 1}, run_cmd) == ["bob", KEY, KEY + "x"]


def test_otlp_exporter_log_lines_pass_the_redactor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The OpenTelemetry SDK logs a failed export with its URL, query key included: on stderr it is redacted."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from loadgen.telemetry.otlp import OtlpPusher
    from tests.fixtures.recording_server import RecordingServer, http

    with RecordingServer(lambda n, r: http("200 OK", b"", "application/x-protobuf")) as rx:
        url = f"http://127.0.0.1:{rx.port}/v1/metrics?token={KEY}"
        with OtlpPusher(tmp_path / "requests.jsonl", url, interval_s=60, redact=Redactor([KEY])):
            sdk = logging.getLogger("opentelemetry.exporter.otlp.proto.http.metric_exporter")
            sdk.warning("Transient error %s encountered while exporting metrics batch", f"url: {url}")
    err = capsys.readouterr().err
    assert "Transient error url: " in err and "token=***" in err and KEY not in err
    assert logging.getLogger("opentelemetry").propagate  # the handler is gone with the push


def test_an_endpoint_config_repr_shows_no_credential() -> None:
    """An endpoint's config travels to worker processes and Ray actors and can end up in a log line or an
    error message by its repr: its API key, headers and extra body (each may hold a credential) are not in it."""
    from loadgen.endpoints.anthropic import AnthropicConfig
    from loadgen.endpoints.openai import OpenAIConfig
    from loadgen.endpoints.triton_config import TritonConfig

    secret = "sk-live-0123456789abcdef"
    configs = [
        OpenAIConfig(
            base_url="http://127.0.0.1:1",
            api_key=secret,
            headers={"Authorization": f"Bearer {secret}"},
            extra_body={"api_token": secret},
        ),  # fmt: skip
        AnthropicConfig(api_key=secret, headers={"x-api-key": secret}),
        TritonConfig(url="http://127.0.0.1:1", model="m", headers={"Authorization": f"Bearer {secret}"}),
    ]
    for cfg in configs:
        assert secret not in repr(cfg), repr(cfg)
        assert "127.0.0.1" in repr(cfg) or "anthropic" in repr(cfg)  # the rest of the repr is still there

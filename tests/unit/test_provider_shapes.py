"""URL shapes, credentials and bodies per provider (no network)."""

from __future__ import annotations

from typing import cast

import pytest

from loadgen.core.errors import ConfigError
from loadgen.core.redact import Redactor
from loadgen.core.types import RequestSpec
from loadgen.endpoints.anthropic import AnthropicEndpoint, messages_url
from loadgen.endpoints.openai import OpenAIEndpoint
from loadgen.endpoints.providers import azure_url, is_loopback_url, make_endpoint


def test_azure_deployment_url() -> None:
    assert azure_url("https://res.openai.azure.com", deployment="gpt4o", api_version="2024-10-21") == (
        "https://res.openai.azure.com/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21"
    )
    assert azure_url("https://res.openai.azure.com/", deployment="d", api_version=None, api="completions") == (
        "https://res.openai.azure.com/openai/deployments/d/completions?api-version=2024-10-21"
    )
    # a full deployment URL is kept; api-version added when missing
    assert azure_url(
        "https://res.openai.azure.com/openai/deployments/d/chat/completions",
        deployment=None,
        api_version="2025-01-01-preview",
    ) == ("https://res.openai.azure.com/openai/deployments/d/chat/completions?api-version=2025-01-01-preview")
    assert azure_url("https://res.openai.azure.com", deployment=None, api_version="v1") == (
        "https://res.openai.azure.com/openai/v1/chat/completions"
    )
    with pytest.raises(ConfigError):
        azure_url("https://res.openai.azure.com", deployment=None, api_version="2024-10-21")


def test_azure_endpoint_api_key_header_and_no_vllm_fields() -> None:
    ep = make_endpoint("azure", base_url="https://res.openai.azure.com", deployment="gpt4o", api_key="azkey-123456")
    assert isinstance(ep, OpenAIEndpoint)
    assert ep._url == "https://res.openai.azure.com/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21"
    assert ep._headers["api-key"] == "azkey-123456" and "Authorization" not in ep._headers
    body = ep.build_body(RequestSpec(0, "hi", requested_output_tokens=8))
    assert body["max_tokens"] == 8 and "ignore_eos" not in body and "min_tokens" not in body
    assert body["stream_options"] == {"include_usage": True} and body["model"] == "gpt4o"
    assert ep.config.discover is False
    assert "azkey-123456" not in str(ep.describe())


def test_azure_entra_token_is_bearer() -> None:
    ep = cast(
        OpenAIEndpoint,
        make_endpoint("azure", base_url="https://res.openai.azure.com", deployment="d", bearer_token="eyJ.tok.en"),
    )
    assert ep._headers["Authorization"] == "Bearer eyJ.tok.en" and "api-key" not in ep._headers


def test_openai_uses_max_completion_tokens() -> None:
    ep = cast(OpenAIEndpoint, make_endpoint("openai", model="gpt-4o-mini", api_key="sk-abcdef"))
    assert ep._url == "https://api.openai.com/v1/chat/completions"
    assert ep._headers["Authorization"] == "Bearer sk-abcdef"
    body = ep.build_body(RequestSpec(0, "hi", requested_output_tokens=8))
    assert body["max_completion_tokens"] == 8 and "max_tokens" not in body
    with pytest.raises(ConfigError):
        make_endpoint("openai")  # needs --model


def test_openai_compatible_is_unchanged() -> None:
    ep = cast(
        OpenAIEndpoint,
        make_endpoint("openai-compatible", base_url="http://127.0.0.1:8000", api="completions", model="m"),
    )
    assert ep._url == "http://127.0.0.1:8000/v1/completions"
    body = ep.build_body(RequestSpec(0, "hi", requested_output_tokens=8))
    assert body["ignore_eos"] is True and body["stream_options"]["continuous_usage_stats"] is True


def test_anthropic_headers_url_body() -> None:
    r = Redactor()
    ep = make_endpoint("anthropic", model="claude-x", api_key="sk-ant-0123456789", redactor=r)
    assert isinstance(ep, AnthropicEndpoint)
    assert ep._url == "https://api.anthropic.com/v1/messages"
    assert ep._headers["x-api-key"] == "sk-ant-0123456789" and ep._headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in ep._headers
    spec = RequestSpec(
        0,
        "p",
        requested_output_tokens=16,
        messages=({"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}),
    )
    assert ep.build_body(spec) == {
        "model": "claude-x",
        "max_tokens": 16,
        "system": "be brief",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
    }
    assert ep.build_body(RequestSpec(0, "p"))["max_tokens"] == 1024  # required by the API
    assert r("x sk-ant-0123456789 y") == "x *** y"
    assert "sk-ant" not in str(ep.describe())
    with pytest.raises(ConfigError):
        make_endpoint("anthropic", api="completions")


def test_messages_url_forms() -> None:
    for base in ("http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/messages"):
        assert messages_url(base) == ("http://h:1/v1", "http://h:1/v1/messages")


def test_bad_combinations() -> None:
    with pytest.raises(ConfigError):
        make_endpoint("bogus")
    with pytest.raises(ConfigError):
        make_endpoint("openai-compatible")  # no URL
    with pytest.raises(ConfigError):
        make_endpoint("openai-compatible", base_url="http://x", deployment="d")
    with pytest.raises(ConfigError):
        make_endpoint("openai-compatible", base_url="http://x", no_such_option=1)


def test_loopback() -> None:
    assert is_loopback_url("http://127.0.0.1:8000")
    assert is_loopback_url("http://127.9.9.9")
    assert is_loopback_url("http://[::1]:80")
    assert is_loopback_url("https://localhost:443/v1")
    assert not is_loopback_url("https://api.openai.com/v1", resolve=False)
    assert not is_loopback_url("http://10.0.0.1:8000")
    assert not is_loopback_url("http://203.0.113.5")

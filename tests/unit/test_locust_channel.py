"""The master channel's rules (``loadgen.locust.channel``), the master bind of ``loadgen locust`` and the web
UI's Host/Origin checks (``loadgen.locust.webguard``): pure, in-process (issue 20 items 1 and 2)."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import click
import pytest

from loadgen.cli.locust import locust_cmdline, master_args
from loadgen.core.errors import ConfigError
from loadgen.locust import channel
from tests.integration.test_secrets import leaks, new_key

HAVE_FLASK = importlib.util.find_spec("flask") is not None


def _cfg(keys: dict[str, str], env: str = "LG_UNIT_KEY") -> dict[str, Any]:
    return {
        "endpoint_url": f"http://bob:{keys['userinfo']}@127.0.0.1:9/v1?api_key={keys['query']}&x=1",
        "headers": {"Authorization": f"Bearer {keys['auth']}", "X-Tenant": "blue"},
        "extra_body": {"api_key": keys["body"], "temperature": 0},
        "api_key_env": env,
        "describe": {"version": f"echo: Bearer {keys['env']}"},  # a server's /version echoing the key
        "model": "m",
    }


def test_public_config_holds_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = {n: new_key() for n in ("userinfo", "query", "auth", "body", "env")}
    monkeypatch.setenv("LG_UNIT_KEY", keys["env"])
    pub = channel.public_config(_cfg(keys))
    text = json.dumps(pub)
    assert {n: leaks(text, k) for n, k in keys.items()} == {n: [] for n in keys}
    assert pub["endpoint_url"] == "http://127.0.0.1:9/v1?api_key=***&x=1" and pub["endpoint_url_needs_secrets"]
    assert pub["headers"] == {"Authorization": "***", "X-Tenant": "blue"}
    assert pub["extra_body"] == {"api_key": "***", "temperature": 0} and pub["api_key_env"] == "LG_UNIT_KEY"


def test_worker_fills_the_placeholders_from_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = {n: new_key() for n in ("userinfo", "query", "auth", "body", "env")}
    monkeypatch.setenv("LG_UNIT_KEY", keys["env"])
    cfg = _cfg(keys)
    pub = channel.public_config(cfg)
    mine = {"endpoint_url": cfg["endpoint_url"], "headers": {"authorization": cfg["headers"]["Authorization"]},
            "extra_body": cfg["extra_body"]}  # fmt: skip
    got = channel.worker_config(pub, mine)
    assert got["endpoint_url"] == cfg["endpoint_url"] and got["extra_body"] == cfg["extra_body"]
    assert got["headers"] == {"authorization": cfg["headers"]["Authorization"], "X-Tenant": "blue"}
    # what is missing or aimed elsewhere is refused, never sent as a placeholder
    for drop, msg in (("endpoint_url", "--endpoint"), ("headers", "Authorization"), ("extra_body", "--extra-body")):
        with pytest.raises(ConfigError, match=msg):
            channel.worker_config(pub, {k: v for k, v in mine.items() if k != drop})
    with pytest.raises(ConfigError, match="is not the master's"):
        channel.worker_config(pub, {**mine, "endpoint_url": f"http://bob:x@127.0.0.1:10/v1?api_key={keys['query']}"})
    monkeypatch.delenv("LG_UNIT_KEY")
    with pytest.raises(ConfigError, match="set LG_UNIT_KEY in this worker's environment"):
        channel.worker_config(pub, mine)


def test_a_config_without_secrets_travels_unchanged() -> None:
    cfg = {"endpoint_url": "http://127.0.0.1:9/v1?a=b%20c", "headers": {"X-Tenant": "blue"}, "extra_body": {"t": 0},
           "api_key_env": None}  # fmt: skip
    pub = channel.public_config(cfg)
    assert channel.worker_config(pub, {}) == {**cfg, "endpoint_url_needs_secrets": False}


def test_token_answer_is_bound_to_nonce_and_worker() -> None:
    a = channel.answer("tok", "n1", "w1")
    assert channel.verify("tok", "n1", "w1", a)
    assert not channel.verify("tok", "n2", "w1", a) and not channel.verify("tok", "n1", "w2", a)
    assert not channel.verify("other", "n1", "w1", a) and not channel.verify("tok", "n1", "w1", None)
    assert "tok" not in a


def test_master_binds_loopback_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCUST_MASTER_BIND_HOST", raising=False)
    assert master_args(["--master"], None, False) == ["--master-bind-host", "127.0.0.1", "--master"]
    assert master_args(["--master-bind-host", "::1"], None, False) == ["--master-bind-host", "::1"]
    for args in (["--master-bind-host", "0.0.0.0"], ["--master-bind-host=*"], ["--master-bind-host", "10.1.2.3"]):
        for token, allow in ((None, False), ("LG_T", False), (None, True)):
            with pytest.raises(click.UsageError, match="--allow-remote-workers and --master-token-env"):
                master_args(args, token, allow)
        assert master_args(args, "LG_T", True) == args
    monkeypatch.setenv("LOCUST_MASTER_BIND_HOST", "0.0.0.0")  # Locust's own variable counts as telling
    with pytest.raises(click.UsageError):
        master_args(["--master"], None, False)


def test_child_command_line_shows_no_url_secret() -> None:
    key = new_key()
    cmd = locust_cmdline(["-H", f"http://bob:{key}@h:1/v1?api_key={key}"], None)
    assert leaks(" ".join(cmd), key) == []


@pytest.mark.skipif(not HAVE_FLASK, reason="Flask comes with Locust: pip install 'loadgen[locust]'")
def test_host_and_origin_checks() -> None:
    from loadgen.locust.webguard import host_allowed, same_origin

    assert host_allowed("127.0.0.1:8089", "127.0.0.1", 8089, False)
    assert host_allowed("localhost:8089", "127.0.0.1", 8089, False)
    assert host_allowed("[::1]:8089", "127.0.0.1", 8089, False)
    assert not host_allowed("evil.example:8089", "127.0.0.1", 8089, False)  # DNS rebinding
    assert not host_allowed("127.0.0.1:8090", "127.0.0.1", 8089, False)
    assert not host_allowed("127.0.0.1:bad", "127.0.0.1", 8089, False)
    assert host_allowed("10.0.0.5:8089", "0.0.0.0", 8089, False) and not host_allowed("a.example:8089", "", 8089, False)
    assert host_allowed("10.0.0.5:8089", "10.0.0.5", 8089, False) and not host_allowed(
        "a.b:8089", "10.0.0.5", 8089, False
    )
    assert host_allowed("127.0.0.1", "127.0.0.1", 80, False) and host_allowed("127.0.0.1", "127.0.0.1", 443, True)
    assert same_origin("http://127.0.0.1:8089", "127.0.0.1:8089", False)
    assert not same_origin("http://evil.example", "127.0.0.1:8089", False)
    assert not same_origin("null", "127.0.0.1:8089", False)
    assert not same_origin("https://127.0.0.1:8089", "127.0.0.1:8089", False)

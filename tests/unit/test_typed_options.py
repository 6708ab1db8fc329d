"""The CLI's typed option groups (issue 29 item 2): built from click's values, secrets kept out of their repr."""

from __future__ import annotations

import pytest

from loadgen.cli.live import ViewOptions
from loadgen.cli.load_options import LoadOptions, RunOptions
from loadgen.cli.target import header_timeout_s
from loadgen.cli.target_options import EndpointOptions


def test_secrets_stay_out_of_the_repr() -> None:
    """The groups travel into error paths and debug lines: a URL's credentials, a header's value and a
    body's key never show in their repr."""
    kw = {
        "endpoint": "http://user:pw-1@127.0.0.1:8000/v1?key=qk-2",
        "headers": ("Authorization: Bearer hv-3",),
        "extra_body": '{"api_key": "bk-4"}',
        "server_metrics": "http://u:mp-5@127.0.0.1:9/metrics",
        "otlp_endpoint": "http://127.0.0.1:4318?token=ot-6",
    }
    text = repr(EndpointOptions.from_kw(kw)) + repr(ViewOptions.from_kw(kw))
    for secret in ("pw-1", "qk-2", "hv-3", "bk-4", "mp-5", "ot-6"):
        assert secret not in text


def test_a_front_end_subset_gets_the_defaults() -> None:
    """``loadgen locust`` and ``plan --validate`` pass a few options: the rest are click's defaults."""
    opts = EndpointOptions.from_kw({"api": "chat", "headers": ["X-A: 1"]})
    assert (opts.api, opts.headers, opts.provider, opts.timeout) == ("chat", ("X-A: 1",), "openai-compatible", "600s")
    assert not opts.api_given  # no click context: --api was not given
    assert header_timeout_s(opts) == 60.0


def test_frozen() -> None:
    """Built once: a command changes a group only by ``dataclasses.replace``."""
    run = RunOptions.from_kw({"rate": 5.0, "unknown": 1})
    with pytest.raises(AttributeError):
        run.rate = 6.0  # type: ignore[misc]  # the point of the test: a frozen field refuses the write
    assert LoadOptions.from_kw({"seed": 7}).seed == 7

"""Secrets never reach what is written: URL, header, body redaction and text scrubbing."""

from __future__ import annotations

import base64
from urllib.parse import quote

from loadgen.redact import Redactor, find_body_secrets, redact_body, redact_headers, redact_url, split_url_secrets

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

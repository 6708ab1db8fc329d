"""Quota headers and the client's own rate cap: pure functions, no I/O.

* :func:`parse_retry_after` (delta-seconds, an HTTP date read against the response's
  ``Date``, ``retry-after-ms`` first, Azure's ``-1`` as unknown) and
  :func:`retry_after_from_headers` (the same over a response's headers).
* :func:`parse_go_duration` (``6m0s``, ``9ms``, ``1h2m3.5s``).
* :func:`parse_ratelimit_headers` (``x-ratelimit-*`` of OpenAI and Azure,
  ``anthropic-ratelimit-*``; Azure's ``-1`` and a limit of 0 as unknown).
* :class:`ClientRateCap` (``--max-rpm``/``--max-tpm``) and :func:`request_token_cost`,
  the tokens a request reserves under it.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import re
import time
from collections.abc import Iterable
from typing import Any, Protocol

from loadgen.core.types import RequestSpec


class Headers(Protocol):
    """Response headers as every client library gives them: aiohttp's CIMultiDict, a dict,
    ``http.client.HTTPMessage`` (the Locust client)."""

    def get(self, name: str, /) -> str | None: ...

    def items(self) -> Iterable[tuple[str, str]]: ...


def _http_date_s(text: str) -> float | None:
    """Seconds since the epoch of an HTTP date (IMF-fixdate, RFC 850 or asctime; UTC)."""
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # asctime carries no zone: HTTP dates are GMT
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def parse_retry_after(
    value: str | None, date_header: str | None = None, *, retry_after_ms: str | None = None
) -> float | None:
    """Seconds to wait, from ``Retry-After`` (and ``retry-after-ms``, which wins when valid).

    ``retry_after_ms`` (OpenAI and Azure send ``retry-after-ms``; Azure also
    ``x-ms-retry-after-ms``) is milliseconds. ``value`` is delta-seconds (decimals
    accepted) or an HTTP date, read against the response's ``Date`` header when
    present (the server's clock, so client clock skew does not matter), else
    against the local wall clock; a date in the past gives 0. Azure's ``-1``, any
    negative number and anything unparseable give None ("unknown").
    """
    if retry_after_ms:
        ms = _number(retry_after_ms.strip())
        if ms is not None and 0 <= ms != float("inf"):
            return ms / 1000.0
    if not value:
        return None
    value = value.strip()
    s = _number(value)
    if s is not None:
        return s if 0 <= s != float("inf") else None
    when = _http_date_s(value)
    if when is None:
        return None
    ref = _http_date_s(date_header) if date_header else None
    if ref is None:
        ref = time.time()
    return max(when - ref, 0.0)


def _number(text: str) -> float | None:
    """``text`` as a bare number (None: it is not one)."""
    try:
        return float(text)
    except ValueError:
        return None


def _get(headers: Headers, name: str) -> str | None:
    v = headers.get(name)
    if v is None and not hasattr(headers, "getall"):  # a plain dict: match case-insensitively
        low = name.lower()
        for k, val in headers.items():
            if k.lower() == low:
                return val
    return v


def retry_after_from_headers(headers: Headers) -> float | None:
    """:func:`parse_retry_after` over a response's headers (any capitalisation)."""
    ms = _get(headers, "retry-after-ms") or _get(headers, "x-ms-retry-after-ms")
    return parse_retry_after(_get(headers, "retry-after"), _get(headers, "date"), retry_after_ms=ms)


_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str | None) -> float | None:
    """Seconds of a Go-style duration as OpenAI's ``x-ratelimit-reset-*`` headers send it.

    ``"6m0s"`` -> 360.0, ``"9ms"`` -> 0.009, ``"1h2m3.5s"`` -> 3723.5, ``"0s"`` -> 0.0;
    a bare number is seconds. Anything else (negative, empty, an unknown unit) is None.
    """
    if text is None:
        return None
    t = text.strip()
    if not t:
        return None
    v = _number(t)
    if v is not None:
        return v if 0 <= v != float("inf") else None
    pos, total = 0, 0.0
    while pos < len(t):
        m = _GO_PART.match(t, pos)
        if m is None:
            return None
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    return total


def _reset_s(value: str, date_header: str | None) -> float | None:
    """A reset value: a Go duration, seconds, or an RFC 3339 time (Anthropic) read against Date."""
    d = parse_go_duration(value)
    if d is not None:
        return d
    try:
        when = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    ref = _http_date_s(date_header) if date_header else None
    if ref is None:
        ref = time.time()
    return max(when.timestamp() - ref, 0.0)


_OPENAI_RL = re.compile(r"^x-ratelimit-(limit|remaining|reset)-([a-z0-9-]+)$")
_ANTHROPIC_RL = re.compile(r"^anthropic-ratelimit-([a-z0-9-]+)-(limit|remaining|reset)$")


def parse_ratelimit_headers(headers: Headers) -> dict[str, float] | None:
    """The quota state a response reports, or None when it reports none.

    Reads ``x-ratelimit-{limit,remaining,reset}-{requests,tokens,...}`` (OpenAI,
    Azure OpenAI, many compatible hosts) and
    ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}``.
    Keys: ``limit_<what>``, ``remaining_<what>`` (numbers) and ``reset_<what>_s``
    (seconds until the quota refills: Go durations such as ``6m0s``, or an RFC 3339
    time read against the response's ``Date``), ``<what>`` with ``-`` as ``_``.
    Unparseable values are left out.

    Unknown is left out, never a number. A quota (``<what>``) whose ``limit`` or
    ``remaining`` is negative, or whose ``limit`` is 0, reports nothing: Azure OpenAI answers
    ``limit: -1, remaining: -1, reset: 0`` where it keeps no such quota (and ``remaining: -1``
    alone), and a quota of 0 could not have served the request that carries it; that quota's
    ``reset`` (0 there) goes too. A ``remaining: 0`` beside a positive (or absent) limit is a
    real zero (OpenAI: the quota is spent until the reset), and so is a ``reset`` of 0 then.
    """
    date = _get(headers, "date")
    out: dict[str, float] = {}
    unknown: set[str] = set()
    for name, value in headers.items():
        low = name.lower()
        if not low.startswith(("x-ratelimit-", "anthropic-ratelimit-")):
            continue
        m = _OPENAI_RL.match(low)
        if m:
            kind, what = m.group(1), m.group(2)
        else:
            m = _ANTHROPIC_RL.match(low)
            if not m:
                continue
            what, kind = m.group(1), m.group(2)
        what = what.replace("-", "_")
        if kind == "reset":
            v = _reset_s(value, date)
            if v is not None:
                out[f"reset_{what}_s"] = v
            continue
        try:
            n = float(value.strip())
        except ValueError:
            continue
        if n != n or n in (float("inf"), float("-inf")):
            continue
        if n < 0 or (kind == "limit" and n == 0):
            unknown.add(what)
            continue
        out[f"{kind}_{what}"] = int(n) if n.is_integer() else n
    for what in unknown:
        for key in (f"limit_{what}", f"remaining_{what}", f"reset_{what}_s"):
            out.pop(key, None)
    return dict(sorted(out.items())) or None


class ClientRateCap:
    """The client's own cap on requests and tokens per minute (``--max-rpm``, ``--max-tpm``).

    A generic cell-rate algorithm per dimension: each request of cost c (1 for
    requests, its prompt plus ``max_tokens`` for tokens, as providers reserve them)
    moves that dimension's theoretical arrival time on by ``c * 60 s / limit``; a
    request may go once every dimension's theoretical time is within ``burst_s`` of
    now. :meth:`reserve` takes the slot and returns the wait, so concurrent callers
    queue in call order. Pure (the caller passes the clock).
    """

    def __init__(self, max_rpm: float | None = None, max_tpm: float | None = None, burst_s: float = 1.0) -> None:
        for name, v in (("max_rpm", max_rpm), ("max_tpm", max_tpm)):
            if v is not None and not v > 0:
                raise ValueError(f"{name} must be > 0")
        self.max_rpm = max_rpm
        self.max_tpm = max_tpm
        self.burst_ns = int(burst_s * 1e9)
        self._tat = [0, 0]  # theoretical arrival time per dimension (ns)
        self._first = True

    def reserve(self, tokens: int, now: int) -> int:
        """Reserve a slot for a request of ``tokens`` at ``now`` (ns); returns ns to wait first."""
        if self._first:
            self._tat = [now, now]
            self._first = False
        start = now
        costs = []
        for i, (limit, cost) in enumerate(((self.max_rpm, 1), (self.max_tpm, max(tokens, 0)))):
            if limit is None:
                costs.append(0)
                continue
            costs.append(round(cost * 60e9 / limit))
            start = max(start, self._tat[i] - self.burst_ns)
        for i, c in enumerate(costs):
            if c:
                self._tat[i] = max(self._tat[i], start) + c
        return start - now

    def describe(self) -> dict[str, Any]:
        return {"max_rpm": self.max_rpm, "max_tpm": self.max_tpm, "burst_s": self.burst_ns / 1e9}


def request_token_cost(spec: RequestSpec) -> int:
    """Tokens a provider reserves for a request: its prompt plus its ``max_tokens``."""
    inp = spec.requested_input_tokens
    if inp is None:
        inp = -(-len(spec.prompt) // 4) if spec.prompt else 0
    return inp + (spec.requested_output_tokens or 0)

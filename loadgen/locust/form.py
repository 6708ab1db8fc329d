"""loadgen's settings in Locust's start form: custom arguments, their check, and the test's configuration.

Locust shows every argument a Locust file adds in ``events.init_command_line_parser``
under *Custom parameters* of its start form (``include_in_web_ui``), posts them with
the form to ``/swarm`` and stores them in ``environment.parsed_options``. loadgen adds
five, each a string (Locust converts a posted value to the type of the default, and an
empty number field must not crash the form):

========================== ============================================================
``--loadgen-rate``          open loop at this many req/s; empty: closed loop (Locust's users)
``--loadgen-arrival``       poisson, constant or gamma (open loop)
``--loadgen-input-tokens``  prompt length: N or a distribution (``uniform:A,B``, ...)
``--loadgen-output-tokens`` output length: N or a distribution
``--loadgen-slo``           SLO targets, comma-separated (``ttft:p99<=300ms,tpot:p99<=50ms``)
========================== ============================================================

Their defaults are what ``loadgen locust`` was started with (the JSON configuration),
so a headless run and an untouched form run exactly that. :func:`check` validates a
posted form before Locust starts anything (the form shows the message); :func:`apply`
makes the configuration of one test from the base configuration and the current
values. Pure: imports neither Locust nor gevent.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from loadgen.core.errors import ConfigError
from loadgen.core.slo import parse_slo
from loadgen.workload.lengths import parse_length_spec


class _Parser(Protocol):
    """Locust's ``LocustArgumentParser``: ``add_argument`` that also takes ``include_in_web_ui``."""

    def add_argument(self, *args: str, include_in_web_ui: bool, **kwargs: object) -> object: ...


ARRIVALS = ("poisson", "constant", "gamma")
FIELDS = ("loadgen_rate", "loadgen_arrival", "loadgen_input_tokens", "loadgen_output_tokens", "loadgen_slo")


def add_arguments(parser: _Parser, cfg: dict[str, Any] | None) -> None:
    """Add loadgen's fields to Locust's parser, defaulting to ``cfg`` (None on a worker: empty)."""
    cfg = cfg or {}
    wl = cfg.get("workload") or {}
    rate = cfg.get("rate")
    group = parser  # not an argument group: only the parser itself takes include_in_web_ui
    group.add_argument(
        "--loadgen-rate", default="" if rate is None else f"{rate:g}", include_in_web_ui=True,
        help="open loop: requests per second, independent of responses; empty: closed loop (the users send)",
    )  # fmt: skip
    group.add_argument(
        "--loadgen-arrival", default=cfg.get("arrival") or "poisson", choices=ARRIVALS, include_in_web_ui=True,
        help="open-loop arrival process",
    )  # fmt: skip
    group.add_argument(
        "--loadgen-input-tokens", default=str(wl.get("input_tokens", "128")), include_in_web_ui=True,
        help="prompt tokens: N, uniform:A,B, normal:MEAN,SD, ...",
    )  # fmt: skip
    out = wl.get("output_tokens", "64")
    group.add_argument(
        "--loadgen-output-tokens", default="" if out is None else str(out), include_in_web_ui=True,
        help="output tokens (max_tokens): N or a distribution; empty: none asked",
    )  # fmt: skip
    group.add_argument(
        "--loadgen-slo", default=",".join(cfg.get("slos") or ()), include_in_web_ui=True,
        help="SLO targets, comma-separated, e.g. ttft:p99<=300ms,tpot:p99<=50ms (empty: none)",
    )  # fmt: skip


def values(source: object) -> dict[str, str]:
    """The five fields as strings, from ``parsed_options`` (an object) or a posted form (a mapping)."""
    get = source.get if hasattr(source, "get") else (lambda k, d=None: getattr(source, k, d))
    return {k: str(get(k, "") or "").strip() for k in FIELDS}


def parse_rate(text: str) -> float | None:
    """``--loadgen-rate``: None when empty (closed loop), else a finite rate > 0 req/s. Raises ConfigError."""
    if not text:
        return None
    try:
        rate = float(text)
    except ValueError:
        raise ConfigError(f"rate {text!r}: expected requests per second, e.g. 5 (empty: closed loop)") from None
    if not (math.isfinite(rate) and rate > 0):
        raise ConfigError(f"rate {text!r}: must be a finite number > 0 (empty: closed loop)")
    return rate


def parse_slos(text: str) -> list[str]:
    """``--loadgen-slo``: the targets' labels as typed (checked by :func:`loadgen.core.slo.parse_slo`)."""
    out = [t.strip() for t in text.replace(";", ",").split(",") if t.strip()]
    for t in out:
        parse_slo(t)
    return out


def check(form: dict[str, str]) -> str | None:
    """The first problem of a posted form's loadgen fields, as one line; None when they are usable."""
    try:
        parse_rate(form["loadgen_rate"])
        if form["loadgen_arrival"] and form["loadgen_arrival"] not in ARRIVALS:
            raise ConfigError(f"arrival {form['loadgen_arrival']!r}: one of {', '.join(ARRIVALS)}")
        parse_length_spec(form["loadgen_input_tokens"] or "128", column="input")
        if form["loadgen_output_tokens"]:
            parse_length_spec(form["loadgen_output_tokens"], column="output")
        parse_slos(form["loadgen_slo"])
    except (ConfigError, OSError) as exc:
        return f"loadgen: {exc}"
    return None


def apply(cfg: dict[str, Any], form: dict[str, str]) -> dict[str, Any]:
    """One test's configuration: ``cfg`` with the form's rate, arrival, lengths and SLOs.

    A rate makes the test open loop; an empty rate closed loop (a trace stays open loop,
    the rate then rescales it). The recorded configuration says what was used.
    Raises ConfigError for a value :func:`check` would refuse.
    """
    rate = parse_rate(form["loadgen_rate"])
    slos = parse_slos(form["loadgen_slo"])
    wl = dict(cfg["workload"])
    wl["input_tokens"] = form["loadgen_input_tokens"] or wl["input_tokens"]
    wl["output_tokens"] = form["loadgen_output_tokens"] or None
    mode = "open" if (rate is not None or wl.get("trace")) else "closed"
    arrival = form["loadgen_arrival"] or cfg["arrival"]
    burstiness = cfg["burstiness"] if arrival == "gamma" else 1.0
    rec = {
        **cfg["config_record"], "rate": rate, "arrival": arrival, "burstiness": burstiness, "mode": mode,
        "input_tokens": wl["input_tokens"], "output_tokens": wl["output_tokens"], "slos": slos,
    }  # fmt: skip
    return {
        **cfg, "mode": mode, "rate": rate, "arrival": arrival, "burstiness": burstiness, "workload": wl,
        "slos": slos, "config_record": rec,
    }  # fmt: skip

"""The facts the report pages show, in words: probe states, test conditions, what a system is.

Read from ``sweep.json`` (its ``conditions``, ``config``, ``settings``) and from the probes'
``result.json`` (``started_at``, ``conditions``, ``config.workload``, ``tokens``, ``counts``);
nothing is measured here. A fact that was not recorded reads "not recorded", never a guess.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from loadgen.report.why import target_counts
from loadgen.sweep.verdict import text_of

NOT_RECORDED = "not recorded"


def verdict_text(p: dict[str, Any]) -> str:
    """A probe's verdict in words: ``sweep.json``'s own ``verdict_text``, or (older files) the same
    words built from ``verdict``, ``low_confidence``, ``stopped_early`` (:func:`loadgen.sweep.verdict.text_of`)."""
    return text_of(p)


def probe_state(p: dict[str, Any]) -> str:
    """``pass``, ``fail``, ``stopped_early`` (a FAIL cut short) or ``invalid`` (no verdict on the load: client
    timing, rate limited, or interrupted by the user)."""
    v = p.get("verdict")
    if v == "pass":
        return "pass"
    if v == "fail":
        return "stopped_early" if p.get("stopped_early") else "fail"
    return "invalid"


def target_texts(p: dict[str, Any]) -> dict[str, str]:
    """Per SLO target of a probe: its verdict text (``targets``), or the probe's reason naming it."""
    out = {str(t.get("target")): str(t.get("verdict_text") or str(t.get("verdict") or "?").upper())
           for t in p.get("targets") or []}  # fmt: skip
    if out:
        return out
    for r in p.get("reasons") or []:
        name, _, rest = str(r).partition(": ")
        if rest and name not in out:
            out[name] = rest
    return out


COUNTED = (
    "over of measured: per SLO target, the probe's measured requests (scheduled in its measurement window, "
    "warm-up excluded, all its segments; one cancelled in flight with its outcome unknown is censored, not "
    "measured) and how many of them were over the threshold (failures count as over): sweep.json "
    "probes[i].targets[j] exceedances and requests, the counts the live view, the console and report.html show"
)
"""What the one count of a probe counts (the console's table note and the report's)."""


def counts_words(p: dict[str, Any]) -> str:
    """``"23 of 40"`` (over of measured) per per-request target of a probe, comma-separated; ``-`` without any."""
    return ", ".join(f"{k} of {n}" for k, n in target_counts(p).values()) or "-"


def stopped_on(p: dict[str, Any], t: dict[str, Any]) -> bool:
    """Whether SLO target ``t`` (a ``sweep.json`` ``slo`` entry) is one that stopped probe ``p`` early.

    Its own ``targets`` verdict text says so (``FAIL (stopped early)``); older files without
    per-target texts: its exceedance fraction is past the target's allowed fraction.
    """
    own = {str(x.get("target")): x for x in p.get("targets") or []}
    if own:
        return str(own.get(str(t.get("target")), {}).get("verdict_text", "")).endswith("(stopped early)")
    frac = (p.get("exceedance_fraction") or {}).get(str(t.get("target")))
    return frac is None or frac > 1.0 - float(t.get("percentile", 99.0)) / 100.0


def read_json(path: Path) -> dict[str, Any]:
    """A JSON file's object, or {} when it is missing or unreadable (a report never fails on one)."""
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}


def length_words(spec: Any) -> str:
    """``uniform:64,256`` -> "uniform 64 to 256 tokens"; ``32`` -> "32 tokens (fixed)"."""
    if spec is None:
        return NOT_RECORDED
    s = str(spec)
    kind, _, args = s.partition(":")
    if not args:
        return f"{s} tokens (fixed)" if s.isdigit() else s
    parts = args.split(",")
    if kind == "uniform" and len(parts) == 2:
        return f"uniform {parts[0]} to {parts[1]} tokens"
    if kind == "normal" and len(parts) == 2:
        return f"normal, mean {parts[0]}, s.d. {parts[1]} tokens"
    if kind == "lognormal" and len(parts) == 2:
        return f"lognormal, mean {parts[0]}, s.d. {parts[1]} tokens"
    if kind == "empirical":
        return f"drawn from {args.removeprefix('builtin:')} (empirical)"
    return s


def accelerator_words(server: dict[str, Any] | None, count_setting: Any = None) -> str:
    """The accelerator serving the endpoint: ``conditions.server.accelerator`` (NVML), else ``--accelerators``."""
    acc = (server or {}).get("accelerator") or {}
    if acc.get("kind") == "nvidia-gpu" and acc.get("count"):
        s = f"{acc['count']} x {acc.get('name') or 'NVIDIA GPU'}"
        return s + (f" (driver {acc['driver']})" if acc.get("driver") else "")
    if acc.get("kind") == "cpu":
        return f"CPU: {acc.get('cpu_model') or 'unknown model'} ({acc.get('cpu_count') or '?'} cores, no GPU)"
    if count_setting:
        return f"{count_setting} (--accelerators; kind not recorded)"
    return NOT_RECORDED


def server_words(cond: dict[str, Any], cfg: dict[str, Any]) -> str:
    """Server kind and version: ``conditions.server`` when loadgen launched or observed it, else what the endpoint said."""
    srv = cond.get("server") or {}
    ep = cond.get("endpoint") or {}
    if srv.get("kind"):
        s = f"{srv['kind']} {srv.get('version') or '(version not recorded)'}"
        extra = [f"dtype {srv['dtype']}"] if srv.get("dtype") else []
        extra += [f"quantization {srv['quantization']}"] if srv.get("quantization") else []
        extra += ["launched by loadgen"] if srv.get("launched_by_loadgen") else []
        return s + (f" ({', '.join(extra)})" if extra else "")
    s = str(ep.get("server_version") or NOT_RECORDED)
    if cfg.get("embedded_simulated_endpoint"):
        s += " — loadgen's simulated endpoint" + (f" ({cfg['sim_args']})" if cfg.get("sim_args") else "")
    return s


def price_words(settings: dict[str, Any]) -> str:
    """``--cost-per-hour`` and the per-token prices, as given."""
    out = []
    if settings.get("cost_per_hour_usd") is not None:
        out.append(f"${settings['cost_per_hour_usd']:,.2f} per hour")
    prices = settings.get("prices") or {}
    names = {"input_per_million_usd": "input", "output_per_million_usd": "output",
             "cached_input_per_million_usd": "cached input"}  # fmt: skip
    for k, v in prices.items() if isinstance(prices, dict) else ():
        if v is not None:
            out.append(f"${v:,.4g} per million {names.get(k, k)} tokens")
    return "; ".join(out) or "none given (no cost figures)"


def system_facts(doc: dict[str, Any]) -> dict[str, str]:
    """What a system under test is, from a ``sweep.json`` or ``result.json``: model, server, accelerator, $/h."""
    cond = doc.get("conditions") or {}
    cfg = doc.get("config") or {}
    settings = doc.get("settings") or {}
    ep = cond.get("endpoint") or {}
    cost = settings.get("cost_per_hour_usd", cfg.get("cost_per_hour"))
    return {
        "model": str(ep.get("model") or cfg.get("model") or NOT_RECORDED),
        "server": server_words(cond, cfg),
        "accelerator": accelerator_words(cond.get("server"), settings.get("accelerators", cfg.get("accelerators"))),
        "cost_per_hour": f"${cost:,.2f}" if isinstance(cost, (int, float)) else NOT_RECORDED,
    }


def identity_line(res: dict[str, Any], *, with_label: bool = True) -> str:
    """Which system was measured, in one line (report.html's head): ``--label``, then the model, the server
    and where it answered (the endpoint's host, credentials removed as everywhere: :func:`redact_url`)
    and the accelerator when recorded: "mylabel: sim-model on loadgen-sim 0.1.0 at 127.0.0.1:8000"
    (``with_label=False``: without the label, for a page whose title already names it)."""
    from urllib.parse import urlsplit

    from loadgen.core.redact import redact_url

    cond = res.get("conditions") or {}
    cfg = res.get("config") or {}
    facts = system_facts(res)
    url = (cond.get("endpoint") or {}).get("url") or cfg.get("endpoint")
    where = ""
    if url:
        try:
            host = urlsplit(redact_url(str(url))).netloc
        except ValueError:
            host = ""
        where = f" at {host}" if host else ""
    s = f"{facts['model']} on {facts['server']}{where}"
    if facts["accelerator"] != NOT_RECORDED:
        s += f"; {facts['accelerator']}"
    return f"{cfg['label']}: {s}" if with_label and cfg.get("label") else s


def _probe_docs(res: dict[str, Any], out_dir: Path) -> list[dict[str, Any]]:
    docs = []
    for p in res.get("probes") or []:
        if p.get("dir"):
            d = read_json(out_dir / Path(str(p["dir"])).name / "result.json")
            if d:
                docs.append(d)
    return docs


def _date_words(docs: list[dict[str, Any]]) -> str:
    starts = sorted(str(d["started_at"]) for d in docs if d.get("started_at"))
    if not starts:
        return NOT_RECORDED
    first, last = starts[0][:16].replace("T", " "), starts[-1][:16].replace("T", " ")
    return f"{first} UTC" if first == last else f"{first} to {last[11:] if last[:10] == first[:10] else last} UTC"


def conditions_rows(res: dict[str, Any], out_dir: Path, answer_dir: str | None = None) -> list[tuple[str, str]]:
    """The report's conditions section: (label, words) per fact, from ``sweep.json`` and its probes.

    ``answer_dir``: the answer probe's directory, whose requests give the measured lengths.
    """
    cond = res.get("conditions") or {}
    cfg = res.get("config") or {}
    settings = res.get("settings") or {}
    ep = cond.get("endpoint") or {}
    docs = _probe_docs(res, out_dir)
    facts = system_facts(res)
    api = ep.get("api") or cfg.get("api")
    stream = "streaming" if ep.get("stream", not cfg.get("no_stream")) else "not streaming (only E2E is measured)"
    rows = [
        ("Date", _date_words(docs)),
        ("Endpoint", f"{ep.get('url') or cfg.get('endpoint') or NOT_RECORDED} ({ep.get('provider') or 'openai-compatible'}, {api} API, {stream})"),
        ("Model", facts["model"] + (f" (max length {ep['max_model_len']:,} tokens)" if ep.get("max_model_len") else "")),
        ("Server", facts["server"]),
        ("Accelerator", facts["accelerator"]),
    ]  # fmt: skip
    wl = ((docs[0].get("config") or {}).get("workload") or {}) if docs else {}
    arrival = cfg.get("arrival") or "poisson"
    if arrival == "gamma":
        arrival += f" (burstiness {cfg.get('burstiness')})"
    if cfg.get("concurrency_levels"):
        arrival = f"closed loop, {cfg['concurrency_levels']} users"
    if cfg.get("trace"):
        rows.append(
            ("Workload", f"trace {cfg['trace']}" + (f" at {cfg['time_scale']}x" if cfg.get("time_scale") else ""))
        )
    elif cfg.get("dataset"):
        rows.append(("Workload", f"prompts from {cfg['dataset']}"))
    rows.append(("Arrivals", arrival))
    counted = wl.get("input_tokens_counted_by")
    rows.append(
        ("Input lengths", length_words(cfg.get("input_tokens")) + (f"; counted by {counted}" if counted else ""))
    )
    rows.append(("Output lengths", length_words(cfg.get("output_tokens"))))
    if cfg.get("shared_prefix_tokens"):
        rows.append(
            ("Shared prefix", f"{cfg['shared_prefix_tokens']} tokens in {cfg.get('prefix_groups') or 1} group(s)")
        )
    at = read_json(out_dir / answer_dir / "result.json") if answer_dir else {}
    counts, tokens = at.get("counts") or {}, at.get("tokens") or {}
    if counts.get("requests") and tokens:
        done = counts.get("completed") or counts["requests"]
        rows.append(("Measured at the answer", f"{counts['requests']:,} requests: mean {tokens.get('input', 0) / counts['requests']:,.1f} "
                     f"input tokens per request, {tokens.get('output', 0) / done:,.1f} output tokens per completed request"))  # fmt: skip
    rows.append(("Prices", price_words(settings)))
    slo = ", ".join(str(t.get("target")) for t in res.get("slo") or []) or "none"
    conf = settings.get("confidence")
    rows.append(("SLO", slo + (f" at {conf:.0%} confidence" if isinstance(conf, (int, float)) else "")))
    if res.get("evidence_rule"):
        rows.append(("Evidence rule", str(res["evidence_rule"])))
    rows.append(("Probes", _probe_words(settings, res)))
    if settings.get("max_schedule_lag_rule"):
        rows.append(("Client timing bound", f"p99 schedule lag <= {settings.get('max_schedule_lag_ms')} ms ({settings['max_schedule_lag_rule']})"))  # fmt: skip
    client = (
        f"{cond.get('host') or '?'}: {cond.get('cpu_model') or 'CPU not recorded'}, {cond.get('cpu_count') or '?'} CPUs"
    )
    if cond.get("cpu_affinity"):
        client += f" (client on CPUs {_ranges(cond['cpu_affinity'])})"
    rows.append(("Client", client + f"; Python {cond.get('python') or '?'}, {cond.get('event_loop') or '?'}; workers {cfg.get('workers') or 1}"))  # fmt: skip
    rows.append(("loadgen version", str(cond.get("loadgen_version") or res.get("loadgen_version") or NOT_RECORDED)))
    return rows


def _probe_words(settings: dict[str, Any], res: dict[str, Any]) -> str:
    parts = []
    if settings.get("probe_duration_s") is not None:
        parts.append(f"at least {settings['probe_duration_s']:g} s")
    if settings.get("min_requests_per_probe"):
        parts.append(f"{settings['min_requests_per_probe']:,} requests")
    s = " and ".join(parts) or "settings not recorded"
    if settings.get("precision") is not None:
        s += f"; bisection to {settings['precision'] * 100:g} %"
    if res.get("probe_time_s") is not None:
        s += f"; {len(res.get('probes') or [])} probes, {res['probe_time_s']:,.1f} s in all"
    return s


def _ranges(cpus: list[int]) -> str:
    out: list[str] = []
    for c in sorted(cpus):
        if out and "-" not in out[-1] and int(out[-1]) == c - 1 and len(out) > 0:
            out[-1] = f"{out[-1]}-{c}"
        elif out and "-" in out[-1] and int(out[-1].split("-")[1]) == c - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)

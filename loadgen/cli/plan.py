"""``loadgen plan`` and ``loadgen capacity``: from measured capacity to a decision (:mod:`loadgen.capacity`).

``plan``: replicas per interval of a demand and their cost under each pricing model.
``capacity ci``: the confidence interval on a sweep's max SLO load; ``capacity gate``: a
regression gate for CI pipelines (exit 1 only on a significant regression, mapped in
:mod:`loadgen.cli`); ``capacity pareto``: the interactivity front and prices at a target
speed per user; ``capacity scaling``: scaling efficiency across accelerator counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from loadgen.cli.options import make_out_dir
from loadgen.cli.plan_validate import ValidateOptions, validate_options
from loadgen.core.units import parse_percent
from loadgen.engine.recordlog import default_out_dir

__all__ = ["capacity_group", "plan_cmd", "refuse_session_sweep"]


def _fraction(text: str, what: str) -> float:
    try:
        return parse_percent(text, what=what)
    except Exception as exc:
        raise click.BadParameter(str(exc)) from None


def _level(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """``--confidence``: ``90%`` or ``0.9``, strictly between 0 and 1."""
    if value is None:
        return None
    try:
        v = parse_percent(value, what="--confidence") if value.strip().endswith("%") else float(value)
    except Exception as exc:
        raise click.BadParameter(str(exc)) from None
    if not 0 < v < 1:
        raise click.BadParameter(f"{value!r}: a level between 0 and 1 (or 0% and 100%)")
    return v


def _rps(v: float | None) -> str:
    return "–" if v is None else f"{v:,.2f}"


def _usd(v: object, nd: int = 2) -> str:
    return "–" if v is None else f"${v:,.{nd}f}"


@click.command("plan")
@click.option("--capacity", "capacities", multiple=True, required=True, metavar="SWEEP_DIR",
              help="A sweep directory (sweep.json): one measured system; give it once per system.")  # fmt: skip
@click.option("--label", "labels", multiple=True, help="A name for each --capacity, in order.")
@click.option("--demand", required=True, metavar="TRACE",
              help="A rate CSV (start_s + rate_rps or output_tps) or any trace loadgen reads (builtin:NAME too).")  # fmt: skip
@click.option("--slo", "slos", multiple=True, help="The SLO the plan holds; must be the sweeps' own (default: theirs).")
@click.option("--prices", "prices_file", metavar="FILE", help="Prices file (TOML; format: loadgen.capacity.prices).")
@click.option("--headroom", default="10%", show_default=True, help="Capacity kept free on every replica.")
@click.option("--interval", "interval_s", default=60.0, show_default=True, type=float,
              help="Seconds per demand interval when --demand is a trace.")  # fmt: skip
@click.option("--demand-scale", default=1.0, show_default=True, type=float, help="Multiply every demand rate.")
@click.option("--confidence", callback=_level,
              help="Two-sided level of the capacity interval, 90% or 0.9 (default: what the sweep's probes support, 1 - 2 x (1 - its --confidence)).")  # fmt: skip
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False), help="Output directory (default results/<UTC>-plan/)."
)
@validate_options
def plan_cmd(capacities: tuple[str, ...], labels: tuple[str, ...], demand: str, slos: tuple[str, ...],
             prices_file: str | None, headroom: str, interval_s: float, demand_scale: float, confidence: float,
             out_dir: str | None, **validate_kw: Any) -> dict[str, Any]:  # fmt: skip
    """Replicas per interval of a demand at the measured capacity, and their cost (--validate: replayed)."""
    from loadgen.capacity import load_prices, load_sweep, plan_document, read_demand
    from loadgen.capacity.render import write_plan
    from loadgen.core.errors import ConfigError
    from loadgen.core.slo import parse_slo

    if labels and len(labels) != len(capacities):
        raise click.UsageError(f"--label given {len(labels)} times for {len(capacities)} --capacity")
    caps = [load_sweep(c, labels[i] if labels else None) for i, c in enumerate(capacities)]
    for c in caps:
        refuse_session_sweep(c.path, c.doc)
    if slos:
        want = sorted(parse_slo(s).label for s in slos)
        for c in caps:
            if c.slo_labels != want:
                raise ConfigError(f"--slo {', '.join(want)} is not the SLO {c.path} was swept on "
                                  f"({', '.join(c.slo_labels)}): sweep again under that SLO")  # fmt: skip
    prices = load_prices(prices_file) if prices_file else None
    dem = read_demand(demand, interval_s=interval_s, scale=demand_scale)
    doc = plan_document(caps, dem, prices, _fraction(headroom, "--headroom"), confidence)
    out = Path(out_dir) if out_dir else default_out_dir("plan")
    make_out_dir(out)  # one usage line for an --out that cannot be made or written
    vo = ValidateOptions.from_kw(validate_kw)
    if vo.validate:  # the plan's claim replayed (loadgen.capacity.validate): the first system
        from loadgen.cli.plan_validate import run_validation

        err = Console(stderr=True, soft_wrap=True)
        if len(caps) > 1:
            err.print(f"validate: the first --capacity only ({caps[0].label})")
        doc["plans"][0]["validation"] = run_validation(vo, caps[0], doc["plans"][0], out, err)
    write_plan(doc, out)
    _print_plan(doc)
    Console().print(f"plan.json, plan.csv, plan.html in {out}")
    return doc


def refuse_session_sweep(path: str, doc: dict[str, Any]) -> None:
    """A usage error for a session sweep's ``sweep.json`` (``loadgen sweep --sessions``: it has a ``sessions``
    block): its answer is sessions/s (or concurrent sessions), and a plan sizes replicas for requests/s."""
    block = doc.get("sessions")
    if block:
        unit = block.get("unit", "sessions/s") if isinstance(block, dict) else "sessions/s"
        raise click.UsageError(
            f"{path} is a session sweep (loadgen sweep --sessions): its answer is in {unit}, not the "
            "requests/s a plan sizes replicas for; plan from a request sweep of the same system (loadgen sweep "
            "without --sessions) and give that directory to --capacity"
        )


def _print_plan(doc: dict[str, Any]) -> None:
    con = Console()
    unit = "req/s" if doc["demand"]["unit"] == "rate_rps" else "output tok/s"
    d = doc["demand"]
    con.print(f"demand {d['source']} ({d['kind']}): {len(d['intervals'])} intervals over {d['span_s']:,.0f} s; "
              f"headroom {doc['headroom']:.0%}")  # fmt: skip
    con.print(f"model: {doc['model']}")
    for p in doc["plans"]:
        con.print(f"[bold]{p['label']}[/]: {p['capacity_interval']['text']}; capacity per replica "
                  f"{p['capacity_per_replica']:,.2f} {unit}, usable {p['capacity_per_replica'] * (1 - p['headroom']):,.2f}")  # fmt: skip
        for n in p["notes"]:
            con.print(f"[yellow]note:[/] {n}")
        t = Table(title=f"{p['label']}: replicas per interval")
        for col in ("start s", "duration s", f"demand {unit}", "replicas", "utilisation", "autoscaled"):
            t.add_column(col, justify="right")
        from loadgen.capacity.render import shown_rows  # here: a plain `loadgen run` never imports capacity

        rows, hidden = shown_rows(p["intervals"])
        for r in rows:
            u = "–" if r["utilisation"] is None else f"{r['utilisation']:.1%}"
            t.add_row(f"{r['start_s']:,.0f}", f"{r['duration_s']:,.0f}", f"{r['demand']:,.2f}", str(r["replicas"]), u,
                      str(r.get("autoscaled_replicas", "–")))  # fmt: skip
        con.print(t)
        if hidden:
            con.print(f"{hidden:,} more intervals in plan.csv and plan.json", markup=False)
        s = p["summary"]
        be = s["break_even_utilisation"]
        con.print(f"peak {s['peak_replicas']} replicas ({s['peak_accelerators']} accelerators), "
                  f"{s['replica_hours']:,.2f} replica-hours, fleet duty "
                  + ("–" if s["fleet_duty"] is None else f"{s['fleet_duty']:.1%}")
                  + ("" if be is None else f"; break-even utilisation cloud on-demand vs on-prem {be:.1%}"))  # fmt: skip
        v = p.get("validation")
        if v:
            color = {"held": "green", "not held": "red"}.get(v["verdict"], "yellow")
            con.print(f"[bold]validation[/] at {v['replicas']} replica{'s' if v['replicas'] != 1 else ''} (planned {v['planned_replicas']}; "
                      f"{escape(v['replicas_source'])}): {escape(v['slice_text'])}: [{color}]{v['verdict'].upper()}[/]: "
                      f"{escape(v['text'])}")  # fmt: skip
            for r in v["per_replica"]:
                con.print(
                    f"  replica {r['replica']} {escape(str(r['url']))}: {r['requests']} requests, {r['failed']} failed"
                )
        if p["costs"]:
            ct = Table(title=f"{p['label']}: cost over {d['span_s'] / 3600:,.2f} h")
            for col in ("pricing model", "total", "per million output tokens", "per successful request"):
                ct.add_column(col, justify="right")
            for name, c in p["costs"].items():
                ct.add_row(name, _usd(c["total_usd"]), _usd(c["per_million_output_tokens_usd"], 4),
                           _usd(c["per_successful_request_usd"], 6))  # fmt: skip
            con.print(ct)


@click.group("capacity")
def capacity_group() -> None:
    """How sure, how fast per user, how well it scales: read from sweeps already run."""


@capacity_group.command("ci")
@click.argument("sweeps", nargs=-1, required=True)
@click.option("--confidence", callback=_level,
              help="Two-sided level of the capacity interval, 90% or 0.9 (default: what the sweep's probes support, 1 - 2 x (1 - its --confidence)).")  # fmt: skip
@click.option("--replicates", is_flag=True,
              help="The sweeps are replicates of one system (different --seed): one distribution-free interval.")  # fmt: skip
def ci_cmd(sweeps: tuple[str, ...], confidence: float | None, replicates: bool) -> list[dict[str, Any]]:
    """The confidence interval on each sweep's max SLO load, from its probes' evidence (or from replicates)."""
    from loadgen.capacity import capacity_interval, load_sweep
    from loadgen.capacity.confidence import replicated_interval

    if replicates:
        rep = replicated_interval([load_sweep(s) for s in sweeps])
        Console().print(f"{len(sweeps)} replicates: {rep.text()}")
        Console().print(f"method: {rep.method}")
        return [rep.to_json()]
    out = []
    for s in sweeps:
        ci = capacity_interval(load_sweep(s), confidence)
        Console().print(f"{ci.label}: {ci.text()}")
        out.append(ci.to_json())
    Console().print(f"method: {out[0]['method']}")
    return out


@capacity_group.command("gate")
@click.option("--baseline", multiple=True, required=True, metavar="SWEEP_DIR",
              help="The sweep directory to hold to; given twice or more: replicates (a replicated interval).")  # fmt: skip
@click.option("--candidate", multiple=True, required=True, metavar="SWEEP_DIR",
              help="The sweep directory of the change; given twice or more: replicates.")  # fmt: skip
@click.option("--fail-if-regress", "tolerance", default="0%", show_default=True,
              help="Exit 1 only when the candidate is significantly lower by more than this.")  # fmt: skip
@click.option("--confidence", callback=_level,
              help="Two-sided level of the capacity interval, 90% or 0.9 (default: what the sweep's probes support, 1 - 2 x (1 - its --confidence)).")  # fmt: skip
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Write the gate's verdict here.")
def gate_cmd(
    baseline: tuple[str, ...],
    candidate: tuple[str, ...],
    tolerance: str,
    confidence: float | None,
    json_out: str | None,
) -> dict[str, Any]:
    """A regression gate on the max SLO load: exit 1 only when the drop is significant."""
    from loadgen.capacity import load_sweep, regression_gate
    from loadgen.engine.recordlog import write_json

    g = regression_gate([load_sweep(b, "baseline") for b in baseline], [load_sweep(c, "candidate") for c in candidate],
                        _fraction(tolerance, "--fail-if-regress"), confidence)  # fmt: skip
    con = Console()
    for side in ("baseline", "candidate"):
        ci = g[side]
        con.print(f"{side}: {_rps(ci['max_rate_rps'])} req/s, {ci['confidence']:.1%} interval "
                  f"[{_rps(ci['ci_lower_rps'])}, {_rps(ci['ci_upper_rps'])}] ({ci['method'].split(':')[0]})")  # fmt: skip
    con.print(g["text"])
    con.print(f"test: {g['test']}")
    if json_out:
        write_json(Path(json_out), g)
    return g


@capacity_group.command("pareto")
@click.argument("results", nargs=-1, required=True)
@click.option("--label", "labels", multiple=True, help="A name for each result, in order.")
@click.option("--accelerators", "accels", multiple=True, type=int, help="Accelerators of each result (default 1).")
@click.option("--target-tps-per-user", type=float, required=True, help="Speed per user to read prices at (tok/s).")
@click.option(
    "--price-per-accelerator-hour", type=float, help="USD per accelerator-hour (default: --prices on-demand)."
)
@click.option("--prices", "prices_file", metavar="FILE", help="Prices file: its cloud on-demand price and power_w.")
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False), help="Output directory (default results/<UTC>-pareto/)."
)
def pareto_cmd(results: tuple[str, ...], labels: tuple[str, ...], accels: tuple[int, ...], target_tps_per_user: float,
               price_per_accelerator_hour: float | None, prices_file: str | None, out_dir: str | None) -> dict[str, Any]:  # fmt: skip
    """Throughput per accelerator against tok/s per user: Pareto fronts, cost and tokens per joule at a target."""
    from loadgen.capacity import at_target, load_prices, pareto_front, points_of
    from loadgen.capacity.render import write_pareto

    for name, given in (("--label", labels), ("--accelerators", accels)):
        if given and len(given) != len(results):
            raise click.UsageError(f"{name} given {len(given)} times for {len(results)} results")
    prices = load_prices(prices_file) if prices_file else None
    price = price_per_accelerator_hour
    if price is None and prices is not None and prices.cloud is not None:
        price = prices.cloud.on_demand_per_accelerator_hour
    power = prices.on_prem.power_w if (prices is not None and prices.on_prem is not None) else None
    systems = []
    con = Console()
    for i, r in enumerate(results):
        label = labels[i] if labels else Path(r).resolve().name
        pts = points_of(r, label, accels[i] if accels else 1)
        front = pareto_front(pts)
        at = at_target(front, target_tps_per_user, price_per_accelerator_hour=price, power_w_per_accelerator=power)
        systems.append({"label": label, "source": r, "points": [p.to_json() for p in pts],
                        "front": [p.to_json() for p in front], "at_target": at})  # fmt: skip
        x = at["tps_per_accelerator"]
        con.print(f"{label}: {len(pts)} points, {len(front)} on the front; at {target_tps_per_user:g} tok/s per user: "
                  + ("outside the front's range" if x is None else
                     f"{x:,.1f} tok/s per accelerator, {_usd(at['cost_per_million_output_tokens_usd'], 4)} per million "
                     f"output tokens, {_per_joule(at['output_tokens_per_joule'])} tokens per joule"))  # fmt: skip
    doc = {"target_tps_per_user": target_tps_per_user, "price_per_accelerator_hour": price, "systems": systems}
    out = Path(out_dir) if out_dir else default_out_dir("pareto")
    make_out_dir(out)  # one usage line for an --out that cannot be made or written
    write_pareto(doc, out)
    con.print(f"pareto.json, pareto.html in {out}")
    return doc


@capacity_group.command("scaling")
@click.argument("sized", nargs=-1, required=True, metavar="N=SWEEP_DIR...")
@click.option("--confidence", callback=_level,
              help="Two-sided level of the capacity interval, 90% or 0.9 (default: what the sweep's probes support, 1 - 2 x (1 - its --confidence)).")  # fmt: skip
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Write the table here.")
def scaling_cmd(sized: tuple[str, ...], confidence: float | None, json_out: str | None) -> list[dict[str, Any]]:
    """Scaling efficiency: capacity(N) / (N x capacity(1)) from one sweep per accelerator count (N=DIR)."""
    from loadgen.capacity import load_sweep, scaling_table
    from loadgen.engine.recordlog import write_json

    pairs = []
    for s in sized:
        n, sep, d = s.partition("=")
        if not sep or not n.strip().isdigit():
            raise click.UsageError(f"{s!r}: give N=SWEEP_DIR (N the accelerator count)")
        pairs.append((int(n), load_sweep(d, f"{n}x")))
    rows = scaling_table(pairs, confidence)
    t = Table(title="scaling efficiency")
    for col in ("accelerators", "max SLO load req/s", "per accelerator", "efficiency", "efficiency CI", "step"):
        t.add_column(col, justify="right")
    for r in rows:
        lo, hi = r["efficiency_ci"]
        eff = "not measurable" if r["efficiency"] is None else f"{r['efficiency']:.1%}"
        t.add_row(str(r["accelerators"]), f"{r['capacity_rps']:,.2f}", f"{r['capacity_per_accelerator_rps']:,.2f}",
                  eff, f"[{'?' if lo is None else f'{lo:.1%}'}, {'?' if hi is None else f'{hi:.1%}'}]",
                  "–" if r["step_efficiency"] is None else f"{r['step_efficiency']:.1%}")  # fmt: skip
    con = Console()
    con.print(t)
    for r in rows:
        if r.get("note"):
            con.print(f"[yellow]note:[/] {r['accelerators']} accelerators: {r['note']}")
    if json_out:
        write_json(Path(json_out), rows)
    return rows


def _per_joule(v: float | None) -> str:
    """Output tokens per joule in words: three significant digits, or "not measured"."""
    return "not measured" if v is None else f"{v:.3g}"

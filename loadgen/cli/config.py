"""Options -> configuration: what ``run`` and ``sweep`` load, what a result records, what it may cost.

:func:`build_load_config` / :func:`base_load_config` give a :class:`~loadgen.engine.runplan.LoadConfig`,
:func:`build_sweep_config` a :class:`~loadgen.sweep.SweepConfig`; :func:`config_record` the
configuration as ``result.json`` records it (no secret values); :func:`prices` and the
estimates shown before sending to a non-loopback endpoint.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from loadgen.cli.load_options import slo_targets
from loadgen.cli.options import duration_s, parse_extra_body, parse_headers, parse_ratio, parse_workers, usage_errors
from loadgen.cli.url_options import record_urls, url_option_names
from loadgen.core.redact import redact_body, redact_url

if TYPE_CHECKING:
    from loadgen.cli.load_options import LoadOptions, OutputOptions, RunOptions, SweepOptions
    from loadgen.cli.target_options import EndpointOptions
    from loadgen.core.pricing import RunEstimate, TokenPrices
    from loadgen.engine.abandon import Abandon
    from loadgen.engine.runplan import LoadConfig
    from loadgen.sweep import SweepConfig
    from loadgen.workload.images import ImageSpec
    from loadgen.workload.models import ModelMix

__all__ = [
    "base_load_config",
    "build_load_config",
    "build_sweep_config",
    "config_record",
    "prices",
    "run_estimate",
    "sweep_estimate",
]


def build_load_config(
    run: RunOptions, opts: LoadOptions, out: OutputOptions, record: dict[str, Any], **given: Any
) -> LoadConfig:
    """``loadgen run``'s options as one frozen :class:`~loadgen.engine.runplan.LoadConfig`, validated once
    (its rules are :meth:`~loadgen.engine.runplan.LoadConfig.validate`'s; a broken one is a usage error).
    ``record``: the options as recorded (``config.used.toml``, ``result.json``), given the level run
    (``--profile throughput`` is ``--rate inf``; ``--stages``' mean rate or largest user count).
    ``given``: fields the caller resolved itself (``sessions``, ``prices``)."""
    rate, concurrency = run.rate, run.concurrency
    if run.profile == "throughput":  # GuideLLM's name for max-throughput mode: --rate inf
        if rate is not None and rate != float("inf"):
            raise click.UsageError("--profile throughput is --rate inf: it clashes with --rate R")
        rate = float("inf")
    inf = rate == float("inf")  # max-throughput mode (loadgen.engine.throughput)
    if inf and not opts.latency_origin_given:  # no schedule: latency counts from the send (an explicit
        opts = replace(opts, latency_origin="sent")  # "scheduled" is refused)
    warm_n, warm_s = 0, 0.0
    if run.warmup:
        if run.warmup.isdigit():
            warm_n = int(run.warmup)
        else:
            warm_s = duration_s(run.warmup, "--warmup") or 0.0
    duration = duration_s(run.duration, "--duration")
    stages = _stages(run, opts)
    if stages:  # levels stepped within the run: their mean rate (or largest user count) and total time
        total_s = sum(s.duration_s for s in stages)
        duration = total_s
        if stages[0].rate_rps is not None:
            rate = sum(max(1, round(s.rate_rps * s.duration_s)) for s in stages if s.rate_rps) / total_s
        else:
            concurrency = max(s.concurrency or 1 for s in stages)
    if (
        run.n_requests is None
        and duration is None
        and not opts.sessions
        and not (opts.trace and concurrency is None)
        and not (rate is not None and concurrency is not None)  # that clash is the error to show
    ):
        duration = 60.0
    slos, _ = scoped_slos(slo_targets(None, None, run.slos), opts.model)
    record.update(rate=rate, concurrency=concurrency, latency_origin=opts.latency_origin)  # the level run
    load = base_load_config(
        opts,
        out,
        record,
        rate_rps=rate,
        concurrency=concurrency,
        requests=run.n_requests,
        duration_s=duration,
        warmup_requests=warm_n,
        warmup_s=warm_s,
        slos=slos,
        # offer what was asked (issue 30): R exactly; with --duration D, round(R x D) requests (LoadConfig.exact_rate)
        exact_rate=rate is not None and not inf and not opts.trace and not stages,
        stages=stages,
        abandon=_abandon(run, opts),
        slo_flip_test=True,  # a failed timing check voids the SLO verdict only if it could flip it (issue 30)
        cost_per_hour_usd=opts.cost_per_hour,
        power_w=run.power_w,
        **given,
    )
    load.validate()  # the one place the settings' rules are checked (ConfigError -> usage error)
    return load


def scoped_slos(slos: list[Any], model: str | None) -> tuple[list[Any], float]:
    """With a ``--model`` mix each target is judged per model (:func:`loadgen.core.slo.per_model`), and the
    smallest model's share of the requests; without one, a target scoped to a model names ``--model``'s."""
    from loadgen.core.slo import per_model
    from loadgen.workload.models import parse_model_mix

    with usage_errors():
        mix = parse_model_mix(model)
        if mix is not None:
            return per_model(slos, mix.names), min(mix.weights)
    for t in slos:
        if t.model is not None and t.model != model:
            raise click.UsageError(f"--slo {t.label}: {t.model!r} is not --model (give a mix: --model a=0.7,b=0.3)")
    return slos, 1.0


def _model_mix(opts: LoadOptions) -> ModelMix | None:
    """``--model a=0.7,b=0.3`` (:mod:`loadgen.workload.models`), None for one model."""
    from loadgen.workload.models import parse_model_mix

    with usage_errors():
        mix = parse_model_mix(opts.model, seed=opts.seed or 0)
    if mix is not None and opts.sessions:
        raise click.UsageError("--model with several models: not yet with --sessions")
    return mix


def _images(opts: LoadOptions) -> ImageSpec | None:
    """``--images N[,WxH]`` parsed (:mod:`loadgen.workload.images`), None when not given."""
    if not opts.images:
        return None
    from loadgen.workload.images import parse_images

    if opts.sessions:
        raise click.UsageError("--images: not yet with --sessions (a session's turns build their own messages)")
    if opts.provider == "anthropic":
        raise click.UsageError("--images: not yet with --provider anthropic (its image blocks differ)")
    with usage_errors():
        return parse_images(opts.images)


def _abandon(run: RunOptions, opts: LoadOptions) -> Abandon | None:
    """``--abandon SHARE,AFTER`` parsed (:mod:`loadgen.engine.abandon`), None when not given."""
    if not run.abandon:
        return None
    from loadgen.engine.abandon import parse_abandon

    with usage_errors():
        return parse_abandon(run.abandon, seed=opts.seed or 0)


def _stages(run: RunOptions, opts: LoadOptions) -> tuple[Any, ...]:
    """``--stages`` parsed; its clashes with the options it replaces are usage errors."""
    if not run.stages:
        return ()
    from loadgen.engine.stages import parse_stages

    given = [o for o, v in (("--rate", run.rate), ("--concurrency", run.concurrency), ("--duration", run.duration),
                            ("--requests", run.n_requests), ("--sessions", opts.sessions), ("--trace", opts.trace),
                            ("--cluster", opts.cluster)) if v]  # fmt: skip
    if str(opts.workers or "1") != "1":
        given.append("--workers")
    if given:
        raise click.UsageError(f"--stages sets each stage's level and time: it clashes with {', '.join(given)}")
    with usage_errors():
        return parse_stages(run.stages)


def base_load_config(opts: LoadOptions, out: OutputOptions, record: dict[str, Any], **given: Any) -> LoadConfig:
    """The workload part of the options shared by run and sweep, with ``given`` fields set (not validated:
    a sweep's probes set their rate and length themselves). ``record``: the options as recorded (an
    ``--endpoint`` pasted with its API path is written there as the URL and ``--api`` sent)."""
    from loadgen.cli.target import adopt_endpoint_path
    from loadgen.engine.runplan import LoadConfig
    from loadgen.workload.spec import WorkloadOptions

    api = adopt_endpoint_path(record) or opts.api  # before the workload: the API it names shapes the prompts
    with usage_errors():  # the rules on what a sweep's probes keep as given, before the workload is built
        LoadConfig(arrival=opts.arrival, burstiness=opts.burstiness, max_concurrency=opts.max_concurrency).check_kept()
    if opts.prompt_format == "token-ids" and api != "completions":
        raise click.UsageError("--prompt-format token-ids works with --api completions only")
    # Triton's text_input takes a plain text prompt, as the completions API does
    # the Responses API takes the chat messages as its input (loadgen.endpoints.responses_stream)
    workload_api = "completions" if str(api).startswith("triton") else api
    if workload_api == "responses":
        workload_api = "chat"
    wl = WorkloadOptions(
        trace=opts.trace,
        trace_format="loadgen" if opts.trace_format == "jsonl" else opts.trace_format,
        trace_spread=opts.trace_spread,
        trace_time_scale=opts.time_scale,
        trace_start_s=duration_s(opts.trace_start, "--trace-start") or 0.0,
        trace_duration_s=duration_s(opts.trace_duration, "--trace-duration"),
        trace_loop=opts.trace_loop,
        trace_keep_zero_output=opts.trace_keep_zero_output,
        output_tokens_override=opts.output_tokens_given,
        dataset=opts.dataset,
        tokenizer=opts.tokenizer,
        prompt_format=opts.prompt_format,
        api=workload_api,
        shared_prefix_tokens=opts.shared_prefix_tokens,
        prefix_groups=opts.prefix_groups,
        images=_images(opts),
        model_mix=_model_mix(opts),
    )
    from loadgen.engine.validity import ValidityBounds

    bounds = ValidityBounds(
        max_schedule_lag_p99_ms=(duration_s(opts.max_schedule_lag, "--max-schedule-lag") or 0.0) * 1e3,
        max_loop_lag_p99_ms=(duration_s(opts.max_loop_lag, "--max-loop-lag") or 0.0) * 1e3,
        max_error_rate=parse_ratio(opts.max_error_rate, "--max-error-rate"),
    )
    return LoadConfig(
        bounds=bounds,
        arrival=opts.arrival,
        burstiness=opts.burstiness,
        max_concurrency=opts.max_concurrency,
        input_tokens=opts.input_tokens,
        output_tokens=opts.output_tokens,
        seed=opts.seed,
        salt=opts.salt,
        workload=wl,
        save_text=out.save_text,
        token_lists=not out.no_token_lists,
        origin=opts.latency_origin,
        drain_grace_s=duration_s(opts.drain_grace, "--drain-grace") or 0.0,
        **given,
    )


def config_record(
    record: dict[str, Any], endpoint: EndpointOptions, endpoint_url: str, embedded: bool
) -> dict[str, Any]:
    """The resolved configuration as recorded in result.json: every option of ``record`` (the command's,
    as resolved), no secret values (``endpoint``'s headers by name, its body redacted). Call inside the
    command: its URL options, :mod:`loadgen.cli.url_options`, are found on it."""
    urls = url_option_names()
    rec = {k: v for k, v in record.items() if k not in ("headers", "extra_body", "endpoint")}
    rec.update({k: record_urls(v)[0] for k, v in rec.items() if k in urls})
    rec["endpoint"] = redact_url(endpoint_url)
    rec["embedded_simulated_endpoint"] = embedded
    rec["header_names"] = sorted(
        {*parse_headers(endpoint.headers), *(h.partition("=")[0].strip() for h in endpoint.header_envs)}
    )
    if endpoint.extra_body:
        rec["extra_body"] = redact_body(parse_extra_body(endpoint.extra_body))
    rec["slos"] = list(record.get("slos") or [])
    if rec.get("rate") == float("inf"):  # JSON has no infinity: max-throughput mode, recorded as written
        rec["rate"] = "inf"
    return rec


def prices(opts: LoadOptions) -> TokenPrices | None:
    """``--price-*-per-million`` as token prices (None when none is given)."""
    from loadgen.core.pricing import token_prices

    with usage_errors():
        return token_prices(
            opts.price_input_per_million, opts.price_output_per_million, opts.price_cached_input_per_million
        )


def _length_or_none(value: object) -> int | None:
    text = str(value)
    return int(text) if text.isdigit() else None


def run_estimate(opts: LoadOptions, load: LoadConfig) -> RunEstimate:
    """What a run will send (requests, tokens, cost), shown before sending to a non-loopback endpoint."""
    from loadgen.core.pricing import estimate_run

    n = None
    exact = load.exact_requests()
    if load.requests is not None:
        n = load.requests + load.warmup_requests
    elif exact is not None:
        n = exact[0] + exact[1]
    elif load.rate_rps is not None and load.duration_s is not None:
        n = round(load.rate_rps * (load.duration_s + load.warmup_s)) + load.warmup_requests
    note = "" if n is not None else "closed loop for a duration: the count depends on the latency"
    return estimate_run(
        n, _length_or_none(opts.input_tokens), _length_or_none(opts.output_tokens), prices(opts), note=note
    )


def sweep_estimate(opts: LoadOptions, scfg: SweepConfig) -> RunEstimate:
    """What a sweep will send, at most (an upper bound only with --max-rate)."""
    import math

    from loadgen.core.pricing import estimate_run

    per_probe = scfg.needed_requests()
    if scfg.max_rate_rps:
        per_probe = max(per_probe, math.ceil(scfg.max_rate_rps * scfg.probe_duration_s))
        n = scfg.max_probes * (1 + scfg.max_extensions) * per_probe
        note = f"an upper bound: {scfg.max_probes} probes of at most {per_probe} requests, extensions included, plus calibration"
    else:
        n = None
        note = f"at least {per_probe} requests per probe, up to {scfg.max_probes} probes, plus calibration; give --max-rate to bound it"
    return estimate_run(
        n, _length_or_none(opts.input_tokens), _length_or_none(opts.output_tokens), prices(opts), note=note
    )


def build_sweep_config(sweep: SweepOptions, opts: LoadOptions) -> SweepConfig:
    """``loadgen sweep``'s options as a :class:`~loadgen.sweep.SweepConfig` (usage errors for bad ones)."""
    from loadgen.sweep import SweepConfig

    slos = slo_targets(sweep.slo_p99, sweep.slo_metric, sweep.slos)
    if not slos:
        raise click.UsageError("give an SLO: --slo-p99 300ms or --slo METRIC:pNN<=VALUE")
    slos, share = scoped_slos(slos, opts.model)
    levels = None
    if sweep.concurrency_levels:
        try:
            levels = [int(x) for x in sweep.concurrency_levels.split(",") if x.strip()]
        except ValueError:
            raise click.UsageError("--concurrency-levels: expected integers such as 1,2,4,8") from None
        if not levels or min(levels) < 1:
            raise click.UsageError("--concurrency-levels: each level must be at least 1")
    conf = parse_ratio(sweep.confidence, "--confidence")
    if not 0.5 <= conf < 1:
        raise click.UsageError("--confidence must be between 50% and 99.99%")
    prec = parse_ratio(sweep.precision, "--precision")
    if not 0 < prec < 1:
        raise click.UsageError("--precision must be between 0% and 100%")
    if sweep.repeats < 1:
        raise click.UsageError("--repeats must be at least 1")
    # --max-schedule-lag given: it wins; else the sweep's own default (SweepConfig.schedule_lag_bound_ms)
    return SweepConfig(
        slos=slos,
        min_model_share=share,
        probe_duration_s=duration_s(sweep.probe_duration, "--probe-duration") or 60.0,
        probe_warmup_s=duration_s(sweep.probe_warmup, "--probe-warmup"),
        confidence=conf,
        precision=prec,
        repeats=sweep.repeats,
        max_rate_rps=sweep.max_rate,
        min_rate_rps=sweep.min_rate,
        start_rate_rps=sweep.start_rate,
        calibration_s=duration_s(sweep.calibration, "--calibration") or 0.0,
        calibration_concurrency=sweep.calibration_concurrency,
        max_extensions=sweep.max_extensions,
        max_probe_duration_s=duration_s(sweep.max_probe_duration, "--max-probe-duration"),
        cost_per_hour_usd=opts.cost_per_hour,
        prices=prices(opts),
        accelerators=sweep.accelerators,
        concurrency_levels=levels,
        workers=parse_workers(opts.workers),
        max_schedule_lag_ms=(duration_s(opts.max_schedule_lag, "--max-schedule-lag") or 0.0) * 1e3
        if opts.max_schedule_lag_given
        else None,
    )

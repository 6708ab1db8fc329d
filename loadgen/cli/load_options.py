"""The load options as typed values: what ``run`` and ``sweep`` turn into a :class:`~loadgen.engine.runplan.LoadConfig`.

:class:`LoadOptions` (the workload, arrival process, validity bounds and prices ``run`` and ``sweep``
share), :class:`RunOptions` (``loadgen run``'s level and length: ``--rate``, ``--concurrency``,
``--requests``, ``--duration``, ``--stages`` ...) and :class:`OutputOptions` (``--out``, what
``requests.jsonl`` keeps) are frozen and built once per command from click's values (``--config``
already merged into them: it fills click's ``default_map``) by their ``from_kw``;
:mod:`loadgen.cli.config` takes them, never click's dict. Durations, ratios and length specs stay
as written: each is parsed where it is used, so a bad one is the same usage error at the same point
as before. Whether an option was given (not its default) is read once from the click context.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, Self

import click

if TYPE_CHECKING:
    from loadgen.core.slo import SLOTarget

__all__ = ["LoadOptions", "OutputOptions", "RunOptions", "SweepOptions", "slo_targets"]


def picked(cls: type[Any], kw: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``kw`` that name a field of ``cls`` (a multiple option's list as a tuple)."""
    out = {}
    for f in fields(cls):
        if f.name in kw:
            v = kw[f.name]
            out[f.name] = tuple(v) if isinstance(v, list) else v
    return out


def slo_targets(slo_p99: str | None, slo_metric: str | None, slos: tuple[str, ...]) -> list[SLOTarget]:
    """The SLO targets of ``--slo-p99 T`` (on ``--slo-metric``, default ttft) and each ``--slo METRIC:pNN<=T``,
    in that order; a bad one is a usage error naming its option."""
    from loadgen.cli.options import usage_errors
    from loadgen.core.slo import parse_slo

    out = []
    if slo_p99:
        with usage_errors("--slo-p99: "):
            out.append(parse_slo(f"{slo_metric or 'ttft'}:p99<={slo_p99}"))
    for text in slos:
        with usage_errors("--slo: "):
            out.append(parse_slo(text))
    return out


def given(name: str) -> bool:
    """Whether option ``name`` was given (command line, environment or ``--config``), not left at its default."""
    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source(name) if ctx is not None else None
    return source not in (None, click.core.ParameterSource.DEFAULT)


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """The load group ``run`` and ``sweep`` share (:func:`loadgen.cli.config.base_load_config`)."""

    arrival: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None
    input_tokens: str = "128"
    """A length spec as written: 128, uniform:A,B, normal:M,SD, lognormal:M,SD, empirical:FILE."""
    output_tokens: str = "64"
    output_tokens_given: bool = False
    """Whether ``--output-tokens`` was given: it then overrides a trace's or data set's lengths."""
    seed: int = 0
    salt: str | None = None
    trace: str | None = None
    trace_format: str = "auto"
    trace_spread: str = "literal"
    time_scale: float | None = None
    trace_start: str | None = None
    trace_duration: str | None = None
    trace_loop: bool = False
    trace_keep_zero_output: bool = False
    dataset: str | None = None
    tokenizer: str | None = None
    prompt_format: str = "text"
    shared_prefix_tokens: int = 0
    prefix_groups: int = 1
    images: str | None = None
    model: str | None = None
    """``--model``: one name, or a mix ``a=0.7,b=0.3`` (each model its share of the requests)."""
    sessions: str | None = None
    provider: str = "openai-compatible"
    api: str = "completions"
    latency_origin: Literal["scheduled", "sent"] = "scheduled"
    latency_origin_given: bool = False
    drain_grace: str | None = "30s"
    max_schedule_lag: str | None = "5ms"
    max_schedule_lag_given: bool = False
    max_loop_lag: str | None = "10ms"
    max_error_rate: str = "1%"
    price_input_per_million: float | None = None
    price_output_per_million: float | None = None
    price_cached_input_per_million: float | None = None
    cost_per_hour: float | None = None
    """USD per hour of the system under test (run: the max-throughput scorecard; sweep: cost per answer)."""
    workers: str = "1"
    cluster: str | None = None
    cpus: str | None = None
    """``--cpus``: the CPUs the client runs on (e.g. 0-3)."""

    @classmethod
    def from_kw(cls, kw: dict[str, Any]) -> Self:
        """The options of ``kw`` (click's values); whether an option was given from the current click context."""
        return cls(
            **picked(cls, kw),
            output_tokens_given=given("output_tokens"),
            latency_origin_given=given("latency_origin"),
            max_schedule_lag_given=given("max_schedule_lag"),
        )


@dataclass(frozen=True, slots=True)
class RunOptions:
    """``loadgen run``'s level and length (:func:`loadgen.cli.config.build_load_config`)."""

    rate: float | None = None
    """``--rate``, requests per second (inf: max-throughput mode)."""
    profile: str | None = None
    concurrency: int | None = None
    n_requests: int | None = None
    duration: str | None = None
    warmup: str | None = None
    """A request count (N) or a time (10s)."""
    stages: str | None = None
    abandon: str | None = None
    slos: tuple[str, ...] = ()
    power_w: float | None = None
    dry_run: bool = False
    cache_hit_target: str | None = None
    """``--cache-hit-target F``: the share (0.6 or 60%) of each prompt the server's prefix cache can serve."""
    cache_block_size: int | None = None

    @classmethod
    def from_kw(cls, kw: dict[str, Any]) -> Self:
        """The options of ``kw`` (click's values)."""
        return cls(**picked(cls, kw))


@dataclass(frozen=True, slots=True)
class OutputOptions:
    """Where a command writes and what ``requests.jsonl`` keeps."""

    out_dir: str | None = None
    """``--out`` (default: a new ``results/<UTC time>/``)."""
    save_text: bool = False
    no_token_lists: bool = False
    exports: tuple[str, ...] = ()
    """``--export FORMAT`` (repeatable): the result also written in these formats."""

    @classmethod
    def from_kw(cls, kw: dict[str, Any]) -> Self:
        """The options of ``kw`` (click's values)."""
        return cls(**picked(cls, kw))


@dataclass(frozen=True, slots=True)
class SweepOptions:
    """``loadgen sweep``'s search options (:func:`loadgen.cli.config.build_sweep_config`)."""

    slos: tuple[str, ...] = ()
    slo_p99: str | None = None
    slo_metric: str = "ttft"
    probe_duration: str | None = "60s"
    probe_warmup: str | None = None
    confidence: str = "97.5%"
    precision: str = "5%"
    repeats: int = 1
    max_rate: float | None = None
    min_rate: float | None = None
    start_rate: float | None = None
    calibration: str | None = "10s"
    calibration_concurrency: int = 32
    max_extensions: int = 3
    max_probe_duration: str | None = None
    accelerators: int | None = None
    concurrency_levels: str | None = None
    selftest: bool = False
    """``--selftest``: the machine's client certified first."""
    resume: str | None = None
    """``--resume DIR``: the interrupted sweep there, gone on with."""

    @classmethod
    def from_kw(cls, kw: dict[str, Any]) -> Self:
        """The options of ``kw`` (click's values)."""
        return cls(**picked(cls, kw))

"""Help a person can read: options in named sections, old spellings kept out of sight, a help line for every flag.

* :class:`SectionedCommand` prints a command's options under the headings of :data:`SECTIONS`
  (Load, Workload, Endpoint, Server launch, SLO and validity, Cost, Sweep search, Output)
  instead of one long list; an option no section names goes under "Other" (a test keeps
  ``run`` and ``sweep`` free of it). click 8 has no option groups of its own and neither
  rich-click nor click-option-group is installed, so the sections are this ``format_options``.
* :class:`AliasOption`: one option, several spellings, the old ones (``hidden_aliases``)
  accepted but left out of the help, so each idea has one spelling across the commands.
* :func:`fill_missing_help`: the help text of a shared option name (:data:`OPTION_HELP`) for
  a command that declares the option without one (commands whose modules other rooms own).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import click

__all__ = [
    "OPTION_HELP",
    "SECTIONS",
    "AliasOption",
    "SectionedCommand",
    "api_help",
    "fill_missing_help",
    "section_of",
]

SECTIONS: tuple[tuple[str, frozenset[str]], ...] = (
    ("Load", frozenset({
        "rate", "concurrency", "n_requests", "duration", "warmup", "stages", "abandon", "arrival", "burstiness", "max_concurrency",
        "drain_grace", "workers", "cluster", "cpus", "dry_run", "profile", "selftest",
    })),
    ("Workload", frozenset({
        "input_tokens", "output_tokens", "images", "trace", "trace_format", "trace_spread", "time_scale", "trace_start",
        "trace_duration", "trace_loop", "trace_keep_zero_output", "dataset", "sessions", "session_header", "tokenizer", "prompt_format",
        "shared_prefix_tokens", "prefix_groups", "salt", "seed", "cache_hit_target", "cache_block_size",
    })),
    ("Endpoint", frozenset({
        "endpoint", "balance", "api", "model", "headers", "header_envs", "api_key_env", "timeout", "connect_timeout",
        "extra_body", "tools_file",
        "no_preflight", "no_stream", "insecure", "provider", "deployment", "api_version", "azure_ad_token_env",
        "anthropic_version", "ca_file", "connection_reuse", "http_client", "network_baseline", "retry_429", "max_rpm", "max_tpm",
        "yes", "sim_args", "idle_timeout", "header_timeout",
    })),
    ("Server launch", frozenset({
        "serve", "serve_model", "served_model_name", "server_python", "server_port", "serve_args",
        "model_repository", "pytriton", "serve_timeout", "server_metrics", "server_metrics_interval", "dcgm_metrics",
    })),
    ("SLO and validity", frozenset({
        "slos", "slo_p99", "slo_metric", "latency_origin", "max_schedule_lag", "max_loop_lag", "max_error_rate",
    })),
    ("Cost", frozenset({
        "price_input_per_million", "price_output_per_million", "price_cached_input_per_million", "cost_per_hour",
        "accelerators", "power_w",
    })),
    ("Sweep search", frozenset({
        "probe_duration", "probe_warmup", "confidence", "precision", "repeats", "max_rate", "min_rate", "start_rate",
        "calibration", "calibration_concurrency", "max_extensions", "max_probe_duration", "concurrency_levels", "resume",
    })),
    ("Output", frozenset({"out_dir", "save_text", "no_token_lists", "label", "config_file", "help",
                          "progress", "quiet", "metrics_port", "metrics_host", "metrics_token_env", "otlp_endpoint",
                          "otlp_interval", "exports"})),
)  # fmt: skip
"""Help sections in print order, each with the parameter names (click's ``param.name``) it holds."""

API_CHOICES = {
    "completions": "OpenAI /v1/completions",
    "chat": "OpenAI /v1/chat/completions",
    "responses": "OpenAI /v1/responses, its typed event stream",
    "triton-http": "Triton generate_stream over HTTP",
    "triton-grpc": "Triton decoupled gRPC stream",
}


def api_help(choices: Iterable[str]) -> str:
    """``--api``'s help for the dialects a command offers."""
    return "Request dialect: " + "; ".join(f"{c} ({API_CHOICES.get(c, c)})" for c in choices) + "."


OPTION_HELP: dict[str, str] = {
    "connect_timeout": "Deadline for opening a connection (TCP and TLS), e.g. 10s.",
    "arrival": "Open-loop arrival process: poisson (exponential gaps), constant (equal gaps), "
    "gamma (shape --burstiness).",
    "trace_format": "Trace file format (auto: recognised from the file).",
    "prompt_format": "Prompts as text, or as token ids (exact input lengths; --api completions only).",
    "shared_prefix_tokens": "Tokens of a shared prefix per group.",
    "prefix_groups": "Number of distinct shared prefixes; request i uses prefix i mod N.",
    "seed": "Seed of the arrival times, lengths and prompts: the same seed gives the same schedule.",
    "latency_origin": "Latency counts from the scheduled send (coordinated-omission free) or from the "
    "actual send (sent).",
    "slo_metric": "Metric --slo-p99 bounds.",
    "calibration_concurrency": "Users of the closed-loop calibration run that estimates capacity.",
}
"""Help of option names shared by several commands: filled in where a command gives none."""


def section_of(name: str | None) -> str:
    """The help section of parameter ``name`` ("Other" when no section holds it)."""
    for title, names in SECTIONS:
        if name in names:
            return title
    return "Other"


class AliasOption(click.Option):
    """An option whose ``hidden_aliases`` (old spellings) work but are not shown in the help."""

    def __init__(self, *args: Any, hidden_aliases: tuple[str, ...] = (), **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.hidden_aliases = tuple(hidden_aliases)

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        opts = self.opts
        self.opts = [o for o in opts if o not in self.hidden_aliases]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = opts


class SectionedCommand(click.Command):
    """A command whose ``--help`` lists its options under the headings of :data:`SECTIONS`."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: dict[str, list[tuple[str, str]]] = {}
        help_option = self.get_help_option(ctx)
        for p in self.get_params(ctx):
            rec = p.get_help_record(ctx)
            if rec is not None:
                rows.setdefault(section_of("help" if p is help_option else p.name), []).append(rec)
        for title in [t for t, _ in SECTIONS] + ["Other"]:
            if rows.get(title):
                with formatter.section(title):
                    formatter.write_dl(rows[title])


def fill_missing_help(cmd: click.Command) -> None:
    """Give every option of ``cmd`` (and of its subcommands) without help the shared text of its name."""
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            fill_missing_help(sub)
    for p in cmd.params:
        if isinstance(p, click.Option) and not p.help and p.name == "api" and isinstance(p.type, click.Choice):
            p.help = api_help(p.type.choices)
        elif isinstance(p, click.Option) and not p.help and p.name in OPTION_HELP:
            p.help = OPTION_HELP[p.name]

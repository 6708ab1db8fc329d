"""Workloads: arrival processes, prompts and lengths, traces. Pure (no network).

Modules: :mod:`~loadgen.workload.arrivals` (Poisson, gamma, constant offsets),
:mod:`~loadgen.workload.traces` and :mod:`~loadgen.workload.trace_formats`
(streamed, validated trace readers), :mod:`~loadgen.workload.replay` (window ->
send offsets; ``trace inspect`` statistics), :mod:`~loadgen.workload.lengths`
(length distributions), :mod:`~loadgen.workload.tokenizer` (Hugging Face
tokenizer adapter), :mod:`~loadgen.workload.prompts` (exact-length prompts,
shared prefixes, salts), :mod:`~loadgen.workload.datasets` (ShareGPT, JSONL),
:mod:`~loadgen.workload.spec` (the entry point: :class:`WorkloadOptions` ->
schedule or spec factory) and :mod:`~loadgen.workload.command` (``trace`` CLI group).
"""

from loadgen.workload.lengths import LengthSpec, parse_length_spec
from loadgen.workload.spec import Workload, WorkloadOptions, build_schedule, spec_factory, write_schedule
from loadgen.workload.tokenizer import Tokenizer, load_tokenizer
from loadgen.workload.traces import Trace, read_trace

__all__ = [
    "LengthSpec",
    "Tokenizer",
    "Trace",
    "Workload",
    "WorkloadOptions",
    "build_schedule",
    "load_tokenizer",
    "parse_length_spec",
    "read_trace",
    "spec_factory",
    "write_schedule",
]

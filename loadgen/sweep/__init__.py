"""SLO search: the highest offered load whose probes meet every SLO target.

The public face of the sweep. :mod:`~loadgen.sweep.config` holds the settings,
:mod:`~loadgen.sweep.probe` one probe (a run at one load, its binomial verdict; its
judge, counting and early stop, in :mod:`~loadgen.sweep.judge`), :mod:`~loadgen.sweep.search` the search (calibrate, bracket, bisect;
the concurrency sweep; the answer and its price), :mod:`~loadgen.sweep.evidence` the
closed-loop probes' evidence rule, :mod:`~loadgen.sweep.verdict` the one verdict text per
probe and target, :mod:`~loadgen.sweep.unloaded` the unloaded check before the search and
:mod:`~loadgen.sweep.plan` the plan and its time estimate. The SLO rules themselves live in
:mod:`loadgen.core.slo`.
"""

from loadgen.sweep.answer import non_monotonic
from loadgen.sweep.config import SWEEP_SCHEMA_VERSION, SweepConfig
from loadgen.sweep.judge import ProbeJudge
from loadgen.sweep.probe import Probe, run_probe
from loadgen.sweep.search import Sweep, SweepOutcome, cost_per_million

__all__ = [
    "SWEEP_SCHEMA_VERSION",
    "Probe",
    "ProbeJudge",
    "Sweep",
    "SweepConfig",
    "SweepOutcome",
    "cost_per_million",
    "non_monotonic",
    "run_probe",
]

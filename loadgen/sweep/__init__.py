"""SLO search: the highest offered load whose probes meet every SLO target.

The public face of the sweep. :mod:`~loadgen.sweep.config` holds the settings,
:mod:`~loadgen.sweep.probe` one probe (a run at one load, its binomial verdict and
early stop), :mod:`~loadgen.sweep.search` the search (calibrate, bracket, bisect;
the concurrency sweep; the answer and its price). The SLO rules themselves live in
:mod:`loadgen.slo`.
"""

from loadgen.sweep.config import SWEEP_SCHEMA_VERSION, SweepConfig
from loadgen.sweep.probe import Probe, ProbeJudge, run_probe
from loadgen.sweep.search import Sweep, SweepOutcome, cost_per_million, non_monotonic

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

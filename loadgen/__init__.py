"""loadgen: realistic load on LLM inference endpoints, with numbers you can trust.

The library's public face. One measured run::

    import asyncio
    from pathlib import Path
    import loadgen

    async def main():
        ep = loadgen.make_endpoint("openai", "http://127.0.0.1:8000", model="m")
        await ep.open()
        try:
            cfg = loadgen.LoadConfig(rate_rps=10, requests=300, slos=[loadgen.parse_slo("ttft:p99<=300ms")])
            run = await loadgen.measure(ep, cfg, Path("results/one"))
        finally:
            await ep.close()
        print(run.result.throughput, run.result.valid)

    asyncio.run(main())

A sweep: ``loadgen.Sweep(endpoint, loadgen.SweepConfig(slos=[...]), out_dir)``. The names are
loaded on first use (``import loadgen`` stays cheap and imports no network library); everything
not listed in ``__all__`` is internal and may change.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from loadgen.version import __version__

# public name -> the module that defines it
_EXPORTS = {
    "Endpoint": "loadgen.endpoints.base",
    "LoadConfig": "loadgen.engine.runplan",
    "LoadgenError": "loadgen.core.errors",
    "MeasuredRun": "loadgen.measurement",
    "RequestRecord": "loadgen.core.types",
    "RequestSpec": "loadgen.core.types",
    "RunResult": "loadgen.core.run_result",
    "SLOTarget": "loadgen.core.slo",
    "Sweep": "loadgen.sweep",
    "SweepConfig": "loadgen.sweep",
    "SweepOutcome": "loadgen.sweep",
    "ValidityBounds": "loadgen.engine.validity",
    "WorkloadOptions": "loadgen.workload.spec",
    "make_endpoint": "loadgen.endpoints.providers",
    "measure": "loadgen.measurement",
    "parse_slo": "loadgen.core.slo",
}

__all__ = [
    "Endpoint",
    "LoadConfig",
    "LoadgenError",
    "MeasuredRun",
    "RequestRecord",
    "RequestSpec",
    "RunResult",
    "SLOTarget",
    "Sweep",
    "SweepConfig",
    "SweepOutcome",
    "ValidityBounds",
    "WorkloadOptions",
    "__version__",
    "make_endpoint",
    "measure",
    "parse_slo",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from loadgen.core.errors import LoadgenError
    from loadgen.core.run_result import RunResult
    from loadgen.core.slo import SLOTarget, parse_slo
    from loadgen.core.types import RequestRecord, RequestSpec
    from loadgen.endpoints.base import Endpoint
    from loadgen.endpoints.providers import make_endpoint
    from loadgen.engine.runplan import LoadConfig
    from loadgen.engine.validity import ValidityBounds
    from loadgen.measurement import MeasuredRun, measure
    from loadgen.sweep import Sweep, SweepConfig, SweepOutcome
    from loadgen.workload.spec import WorkloadOptions


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'loadgen' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})

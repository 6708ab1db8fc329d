"""The public API is pinned: adding or removing a name is a decision, made here on purpose."""

from __future__ import annotations

import subprocess
import sys

import loadgen

PUBLIC = [
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


def test_all_is_pinned_and_sorted() -> None:
    assert loadgen.__all__ == PUBLIC
    assert sorted(loadgen.__all__) == loadgen.__all__


def test_every_public_name_resolves() -> None:
    for name in loadgen.__all__:
        assert getattr(loadgen, name) is not None, name
    assert callable(loadgen.measure) and callable(loadgen.make_endpoint)


def test_unknown_name_is_an_attribute_error() -> None:
    try:
        loadgen.no_such_name  # noqa: B018 - the access is the test
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")


def test_import_is_cheap_and_opens_no_network_library() -> None:
    code = "import sys, loadgen; print(sorted(m for m in ('aiohttp', 'numpy', 'click') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

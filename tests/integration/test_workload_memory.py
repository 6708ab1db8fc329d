"""Streaming proof: windowing a 2.7-million-row Azure 2024 trace keeps peak RSS small.

``scripts/make_azure2024.py`` writes the file (the same script writes the
27-million-row week: ``scripts/make_azure2024.py 27000000 PATH``); a child
process selects a 10-minute window from the middle and reports its peak RSS
(``VmHWM``; ``ru_maxrss`` is reported too, but on Linux it can include the
forking parent's peak). Materialising a Python object per row would cost hundreds of MB
at this size; the reader keeps only the window, in arrays.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timing  # asserts timing figures: the serial phase

REPO = Path(__file__).resolve().parents[2]
ROWS = 2_700_000
RSS_BOUND_MB = 150  # measured ~50 MB peak (python + numpy + loadgen imported: ~32 MB)

CHILD = r"""
import json, resource, sys, time

def hwm_mb():
    # peak RSS of this process image; ru_maxrss can carry the parent's peak across fork+exec
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None

t = time.perf_counter()
from loadgen.workload.traces import read_trace
tr = read_trace(sys.argv[1], start_s=8 * 3600, duration_s=600)
print(json.dumps({"rows": len(tr), "before": tr.rows_before_window, "first_s": int(tr.offset_ns[0]) / 1e9,
                  "last_s": int(tr.offset_ns[-1]) / 1e9, "format": tr.format, "read_s": time.perf_counter() - t,
                  "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "vm_hwm_mb": hwm_mb()}))
"""


def test_windowing_a_large_azure_2024_trace_streams(tmp_path: Path) -> None:
    path = tmp_path / "azure2024.csv"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_azure2024.py"), str(ROWS), str(path)],
                   check=True, env=env, timeout=120, capture_output=True)  # fmt: skip
    with open(path, "rb") as fh:
        assert fh.readline() == b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
        assert b"+00:00," in fh.readline()
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], check=True, env=env, timeout=120,
                         capture_output=True, text=True)  # fmt: skip
    got = json.loads(out.stdout)
    print(f"\nwindow of a {ROWS}-row trace: {got}")
    assert got["format"] == "azure"
    assert got["before"] > 1_000_000  # the rows before the window were read (timestamps only)
    assert 20_000 < got["rows"] < 35_000  # ~44.6 req/s for 600 s
    assert 8 * 3600 <= got["first_s"] and got["last_s"] < 8 * 3600 + 600
    peak = got["vm_hwm_mb"] if got["vm_hwm_mb"] is not None else got["ru_maxrss_mb"]
    assert peak < RSS_BOUND_MB

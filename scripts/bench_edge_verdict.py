"""The verdict at the edge (issue 31 item 4): would "VALID only where each headline percentile's estimated
error is within 2 ms" hold against the truth?

Runs ``loadgen selftest`` ``--reps`` times (or reads the ``selftest.json`` files given with ``--read``) and
pools their levels (closed loop C = 8-128, open loop 100-800 req/s; every level a real ``loadgen run``
against the fast simulator's truth log, errors paired by request). For each level: the truth (the
largest |error| of TTFT p50, TTFT p99 and ITL p99), today's verdict (VALID / INVALID), and the
proposed rule's verdict: today's, made INVALID where the run's own estimate of any of the three moves
(``latency_error_ms.estimated_moves_ms``) exceeds 2 ms. Printed per rule:

* **false INVALID**: INVALID while the truth is within 2 ms (the issue's bar: at most 5 % of those levels);
* **false VALID**: VALID while the truth is over 2 ms (and over 5 ms, the old band's edge).

    scripts/bench_edge_verdict --reps 3
    scripts/bench_edge_verdict --read results/*-selftest/selftest.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
EDGE_MS = 2.0


def truth_ms(x: dict[str, Any]) -> float:
    return max(abs(x[k]) for k in ("ttft_p50_err_ms", "ttft_p99_err_ms", "itl_p99_err_ms"))


def proposed_valid(x: dict[str, Any]) -> bool:
    est = x.get("estimated_moves_ms") or {}
    return bool(x["valid"]) and all(abs(v) <= EDGE_MS for v in est.values())


def tally(levels: list[dict[str, Any]], rule: str) -> str:
    valid = [(proposed_valid(x) if rule == "2 ms" else bool(x["valid"])) for x in levels]
    honest = [truth_ms(x) <= EDGE_MS for x in levels]
    n_honest = sum(honest)
    false_invalid = sum(1 for v, h in zip(valid, honest, strict=True) if h and not v)
    over2 = [(v, x) for v, x in zip(valid, levels, strict=True) if truth_ms(x) > EDGE_MS]
    over5 = [(v, x) for v, x in over2 if truth_ms(x) > 5.0]
    return (
        f"{rule:>6s}: false INVALID {false_invalid} of {n_honest} levels within {EDGE_MS:g} ms "
        f"({100 * false_invalid / max(n_honest, 1):.1f} %); false VALID {sum(v for v, _ in over2)} of {len(over2)} "
        f"over {EDGE_MS:g} ms, {sum(v for v, _ in over5)} of {len(over5)} over 5 ms"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--read", nargs="*", default=None, help="selftest.json files to read instead of running")
    ap.add_argument("--selftest-args", default="", help="more arguments for loadgen selftest")
    a = ap.parse_args()
    files = [Path(f) for f in a.read] if a.read is not None else []
    if a.read is None:
        tmp = Path(tempfile.mkdtemp(prefix="bench-edge-"))
        for rep in range(a.reps):
            out = tmp / f"rep{rep}"
            subprocess.run([sys.executable, "-m", "loadgen.cli", "selftest", "--out", str(out), *a.selftest_args.split()],
                           cwd=REPO, check=False, capture_output=True)  # fmt: skip
            files.append(out / "selftest.json")
            print(f"rep {rep}: {out / 'selftest.json'}", flush=True)
    levels = [x for f in files for x in json.loads(f.read_text())["levels"]]
    print(f"{'level':>7s} {'truth':>6s} {'estimate':>8s} {'today':>8s} {'2 ms':>8s}")
    for x in levels:
        est = x.get("estimated_moves_ms") or {}
        e = max((abs(v) for v in est.values()), default=float("nan"))
        lv = f"C={x['level']}" if x["kind"] == "closed" else f"{x['level']}/s"
        print(f"{lv:>7s} {truth_ms(x):6.2f} {e:8.2f} {'VALID' if x['valid'] else 'INVALID':>8s} "
              f"{'VALID' if proposed_valid(x) else 'INVALID':>8s}")  # fmt: skip
    print(tally(levels, "today"))
    print(tally(levels, "2 ms"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

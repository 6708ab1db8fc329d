#!/usr/bin/env python3
"""Write a synthetic trace in the Azure LLM inference 2024 format, fast.

Usage: ``scripts/make_azure2024.py N PATH [--seed S] [--rate R] [--crlf]``

The format of the 2024 one-week traces: header ``TIMESTAMP,ContextTokens,GeneratedTokens``,
timestamps ``2024-05-10 00:00:00.012345+00:00`` (microseconds, a UTC offset) and, as
Python prints a datetime whose microsecond is 0, some rows without a fraction
(``2024-05-10 00:00:01+00:00``). Arrivals are Poisson at ``--rate`` req/s (default
27M rows per week, as the real code+conversation week: ~44.6 req/s), lengths
log-normal. N = 27_000_000 writes a full-week-sized file (~1.2 GB).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time

import numpy as np

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
START = dt.datetime(2024, 5, 10)
CHUNK = 500_000


def write(n: int, path: str, *, seed: int = 0, rate_rps: float = 27_000_000 / (7 * 86400), crlf: bool = False) -> None:
    """Write ``n`` rows to ``path`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    eol = "\r\n" if crlf else "\n"
    t_us = 0
    with open(path, "w", encoding="ascii", newline="") as fh:
        fh.write(HEADER + eol)
        done = 0
        while done < n:
            k = min(CHUNK, n - done)
            gaps = rng.exponential(1e6 / rate_rps, k)
            us = t_us + np.cumsum(np.rint(gaps).astype(np.int64))
            whole = rng.random(k) < 0.01  # ~1 % on a whole second: printed without a fraction
            us[whole] -= us[whole] % 1_000_000
            us = np.maximum.accumulate(np.maximum(us, t_us))
            t_us = int(us[-1])
            ctx = np.maximum(np.rint(rng.lognormal(7.0, 1.1, k)), 1).astype(np.int64)
            gen = np.maximum(np.rint(rng.lognormal(4.5, 1.0, k)), 1).astype(np.int64)
            day, rem = np.divmod(us, 86_400_000_000)
            sec, frac = np.divmod(rem, 1_000_000)
            hh, r2 = np.divmod(sec, 3600)
            mm, ss = np.divmod(r2, 60)
            dates = {int(d): (START + dt.timedelta(days=int(d))).strftime("%Y-%m-%d") for d in np.unique(day)}
            lines = [
                f"{dates[d]} {h:02d}:{m:02d}:{s:02d}{f'.{f:06d}' if f else ''}+00:00,{c},{g}"
                for d, h, m, s, f, c, g in zip(
                    day.tolist(), hh.tolist(), mm.tolist(), ss.tolist(), frac.tolist(), ctx.tolist(), gen.tolist()
                )
            ]
            done += k
            fh.write(eol.join(lines))
            if done < n:
                fh.write(eol)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, help="rows to write")
    ap.add_argument("path")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rate", type=float, default=27_000_000 / (7 * 86400), help="mean req/s")
    ap.add_argument("--crlf", action="store_true", help="CRLF line endings")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    write(a.n, a.path, seed=a.seed, rate_rps=a.rate, crlf=a.crlf)
    print(f"wrote {a.n} rows to {a.path} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

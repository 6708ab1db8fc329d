"""A sweep's progress on disk as it goes, and a sweep resumed from it (``loadgen sweep --resume DIR``;
issue 35, item 3).

As the search runs, :class:`Progress` appends each finished probe (its ``sweep.json`` entry) to
``probes.jsonl`` (one whole line, flushed and fsynced: a ``kill -9`` between probes loses no
finished probe) and writes ``search_state.json`` atomically after the unloaded check and the
calibration (their results and the plan figures they set). A resumed sweep (:class:`Replay`) reads
both and runs the same search with the same configuration: the unloaded check and the calibration
are read, not run; each probe the search asks for is read from ``probes.jsonl`` while the search asks
for the probe that was recorded at that position (the same rate or user count, the same kind:
a certifying probe's ``continues``), and run from the first one it does not find (the first probe
of the interrupted sweep without a verdict, or beyond). The search is a function of the probes'
verdicts and figures, so the decisions after the last probe read are those of the uninterrupted
sweep given the same verdicts.

A probe read from disk has no judge in memory: it is never continued by a certifying probe (the
resumed sweep may certify a lower rate instead). ``sweep.json`` ``resumed`` says from where and how
many probes were read; the CLI refuses a ``--resume`` whose options differ from the recorded ones
(:mod:`loadgen.cli.sweep`).
"""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path
from typing import Any

import orjson

from loadgen.core.errors import InputFileError
from loadgen.sweep.probe import Probe

__all__ = ["PROBES_LOG", "STATE_FILE", "Progress", "Replay", "probe_from_json"]

PROBES_LOG = "probes.jsonl"
STATE_FILE = "search_state.json"
_PROBE_FIELDS = {f.name for f in fields(Probe)}


def probe_from_json(d: dict[str, Any]) -> Probe:
    """A probe from its ``sweep.json`` / ``probes.jsonl`` entry (unknown keys ignored; no judge)."""
    return Probe(**{k: v for k, v in d.items() if k in _PROBE_FIELDS and k != "judge"})


class Progress:
    """Writes the sweep's progress into its output directory as it goes."""

    def __init__(self, out_dir: Path, *, append: bool = False) -> None:
        self.out_dir = out_dir
        path = out_dir / PROBES_LOG
        if not append and path.exists():
            path.unlink()

    def probe(self, p: Probe) -> None:
        with open(self.out_dir / PROBES_LOG, "ab") as fh:
            fh.write(orjson.dumps(p.to_json(), option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
            fh.flush()
            os.fsync(fh.fileno())

    def state(self, state: dict[str, Any]) -> None:
        tmp = self.out_dir / (STATE_FILE + ".tmp")
        tmp.write_bytes(orjson.dumps(state, option=orjson.OPT_SERIALIZE_NUMPY))
        os.replace(tmp, self.out_dir / STATE_FILE)


class Replay:
    """What an interrupted sweep in ``src`` finished, handed back in the order the search asks for it."""

    def __init__(self, src: Path) -> None:
        self.src = src
        self.probes: list[Probe] = []
        self.state: dict[str, Any] = {}
        log = src / PROBES_LOG
        if not log.exists():
            raise InputFileError(str(log), None, None, "no such file: not a sweep directory this loadgen can resume")
        for n, line in enumerate(log.read_bytes().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                d = orjson.loads(line)
            except orjson.JSONDecodeError:
                break  # a torn last line: the probe it held had not finished writing
            if not isinstance(d, dict) or "offered_rps" not in d:
                raise InputFileError(str(log), n, None, "not a probe of a sweep")
            self.probes.append(probe_from_json(d))
        st = src / STATE_FILE
        if st.exists():
            try:
                self.state = orjson.loads(st.read_bytes())
            except orjson.JSONDecodeError as exc:
                raise InputFileError(str(st), None, None, f"not valid JSON ({exc})") from None
        self.used = 0  # probes handed back so far
        self.diverged = False  # the search asked for another probe than the one recorded: the rest is run

    def next(self, rate: float, concurrency: int | None, continues: bool) -> Probe | None:
        """The recorded probe at this position when it is the one the search asks for, else None (from then on)."""
        if self.diverged or self.used >= len(self.probes):
            return None
        p = self.probes[self.used]
        if (
            p.concurrency != concurrency
            or (concurrency is None and p.offered_rps != rate)
            or ((p.continues is not None) != continues)
        ):
            self.diverged = True
            return None
        if p.verdict == "interrupted":  # the probe the interrupt cut: no verdict, run again
            self.diverged = True
            return None
        self.used += 1
        return p

    def describe(self) -> dict[str, Any]:
        return {"from": str(self.src), "probes_read": self.used, "probes_recorded": len(self.probes),
                "diverged": self.diverged}  # fmt: skip

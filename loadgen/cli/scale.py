"""``loadgen sweep`` over several sizes of one server: a brace list in ``--serve-args`` (or ``--sim-args``).

``loadgen sweep --serve vllm --serve-args '--tensor-parallel-size {1,2,4}' ...`` runs one whole
sweep per value of the brace list, the server started afresh for each (its own ``Target``), each
sweep in its own sub-folder ``OUT/size-<value>/`` (its sweep.json, probes, report and server logs),
then writes the scaling table (:func:`loadgen.capacity.scaling.scaling_document`) as
``OUT/scaling.json`` and the scorecard of the sizes (``loadgen compare`` over the sub-folders,
with its capacity-per-accelerator and efficiency rows) into ``OUT/scorecard/``.

The brace list: one ``{a,b,...}`` of two or more plain values (letters, digits, ``._+-``), as
bash writes it; a JSON option value (``'{"level": 3}'``) is never one. Accelerators per size:

* ``--serve vllm``: tensor x pipeline x data parallel size of the expanded options
  (``--tensor-parallel-size``/``-tp``, ``--pipeline-parallel-size``/``-pp``,
  ``--data-parallel-size``/``-dp``; 1 when absent), so ``-tp 2 -dp {1,2}`` is 2 and 4;
* any other server, and the embedded simulated endpoint (``--sim-args '--fifo --slots {1,2,4}'``,
  the stand-in the tests use: N independent servers behind one queue), the brace value itself.

The sizes' accelerator counts must differ (the table compares sizes); ``--accelerators`` is set
per size, so it is refused alongside a brace list. A size interrupted by the user ends the series:
what was measured is tabled.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from loadgen.core.errors import LoadgenError

__all__ = [
    "BRACE_LIST",
    "ScaledOutcome",
    "Size",
    "accelerators_of",
    "expand_sizes",
    "refuse_brace_list",
    "scaled_sweep",
    "sizes_of",
]

BRACE_LIST = re.compile(r"\{([A-Za-z0-9._+-]+(?:,[A-Za-z0-9._+-]+)+)\}")
_PARALLEL = {
    "--tensor-parallel-size": "tp",
    "-tp": "tp",
    "--pipeline-parallel-size": "pp",
    "-pp": "pp",
    "--data-parallel-size": "dp",
    "-dp": "dp",
}


@dataclass(frozen=True)
class Size:
    """One size of a scaled sweep: the brace value, the expanded options, accelerators, folder, label."""

    value: str
    args: str
    accelerators: int
    folder: str
    label: str


@dataclass
class ScaledOutcome:
    """What a scaled sweep did: one :class:`~loadgen.sweep.SweepOutcome` per size run, in order
    (:func:`loadgen.cli.sweep_exit_code` takes the worst), the scaling document, the output folder."""

    sizes: list[Any] = field(default_factory=list)
    scaling: dict[str, Any] = field(default_factory=dict)
    out_dir: Path = Path(".")


def accelerators_of(args: str) -> int:
    """vLLM's accelerator count for engine options ``args``: tensor x pipeline x data parallel size.

    Raises click.UsageError for a size that is not a positive integer.
    """
    sizes = {"tp": 1, "pp": 1, "dp": 1}
    words = shlex.split(args)
    for i, w in enumerate(words):
        flag, eq, val = w.partition("=")
        if flag not in _PARALLEL:
            continue
        text = val if eq else (words[i + 1] if i + 1 < len(words) else "")
        if not text.isdigit() or int(text) < 1:
            raise click.UsageError(f"--serve-args: {flag} {text!r}: expected a positive integer")
        sizes[_PARALLEL[flag]] = int(text)
    return sizes["tp"] * sizes["pp"] * sizes["dp"]


def _folder_name(value: str) -> str:
    return "size-" + re.sub(r"[^A-Za-z0-9._-]", "_", value)


def _flag_before(head: str) -> str:
    """The option a brace list is the value of (``--slots {1,2}``, ``-tp={1,2}``), else "size"."""
    try:
        words = shlex.split(head)
    except ValueError:  # an unclosed quote: the list sits inside a quoted value
        return "size"
    last = words[-1] if words else ""
    if last.startswith("-") and (head[-1:].isspace() or head.endswith("=")):
        return last.rstrip("=").lstrip("-")
    return "size"


def expand_sizes(option: str, text: str, serve: str | None) -> list[Size] | None:
    """The sizes of a brace list in option ``option``'s value ``text`` (None: no brace list).

    ``serve``: the ``--serve`` kind (None: the embedded simulated endpoint). Raises
    click.UsageError for two brace lists, a repeated value, a count that is not a positive
    integer, or sizes with the same accelerator count.
    """
    found = list(BRACE_LIST.finditer(text))
    if not found:
        return None
    if len(found) > 1:
        raise click.UsageError(f"{option}: one brace list {{a,b,...}} per sweep, found {len(found)}")
    m = found[0]
    values = m.group(1).split(",")
    if len(set(values)) != len(values):
        raise click.UsageError(f"{option}: a value is repeated in {m.group(0)}")
    flag = _flag_before(text[: m.start()])
    sizes = []
    for v in values:
        args = text[: m.start()] + v + text[m.end() :]
        if serve == "vllm":
            n = accelerators_of(args)
        elif v.isdigit() and int(v) >= 1:
            n = int(v)
        else:
            raise click.UsageError(f"{option}: {v!r}: the brace values are the accelerator counts here "
                                   "(a positive integer each)")  # fmt: skip
        sizes.append(Size(value=v, args=args, accelerators=n, folder=_folder_name(v), label=f"{flag}={v}"))
    counts = [s.accelerators for s in sizes]
    if len(set(counts)) != len(counts):
        raise click.UsageError(f"{option}: the sizes {m.group(0)} give accelerator counts {counts}: they must "
                               "differ (tensor x pipeline x data parallel size for --serve vllm)")  # fmt: skip
    return sizes


def sizes_of(kw: dict[str, Any]) -> list[Size] | None:
    """The sizes a ``loadgen sweep`` command line asks for (None: one plain sweep)."""
    serve_sizes = expand_sizes("--serve-args", kw.get("serve_args") or "", kw.get("serve"))
    sim_sizes = None
    if not kw.get("serve") and not kw.get("endpoint"):
        sim_sizes = expand_sizes("--sim-args", kw.get("sim_args") or "", None)
    if serve_sizes and not kw.get("serve"):
        raise click.UsageError("--serve-args with a brace list needs --serve (loadgen starts one server per size)")
    sizes = serve_sizes or sim_sizes
    if sizes and kw.get("accelerators") is not None:
        raise click.UsageError("--accelerators with a brace list: the accelerators are set per size from the list")
    return sizes


def refuse_brace_list(kw: dict[str, Any], command: str) -> None:
    """A usage error for a brace list in ``--sim-args``/``--serve-args`` of a command that runs one server
    (``run``, ``locust``): a brace list asks for a scaling sweep, one sweep per size (``loadgen sweep``)."""
    for key, flag in (("sim_args", "--sim-args"), ("serve_args", "--serve-args")):
        m = BRACE_LIST.search(kw.get(key) or "")
        if m:
            raise click.UsageError(
                f"{flag} {kw[key]!r}: the brace list {m.group(0)} asks for one server per size, a scaling sweep: "
                f"use `loadgen sweep` with the same {flag} (loadgen {command} runs one server: give one value)"
            )


def scaled_sweep(
    kw: dict[str, Any],
    sizes: list[Size],
    sweep_one: Callable[[dict[str, Any]], Any],
    stopped: Callable[[], bool],
    console: Console,
    err: Console,
) -> ScaledOutcome:
    """Run ``sweep_one`` (the plain sweep command body) once per size, then table and score them.

    ``stopped``: true once the user asked to stop (no further size is started); ``console``: the
    table; ``err``: progress. Raises the first size's LoadgenError (after the table of the others).
    """
    from loadgen.cli.options import make_out_dir
    from loadgen.engine.recordlog import default_out_dir

    out = Path(kw["out_dir"]) if kw["out_dir"] else default_out_dir("sweep")
    make_out_dir(out)
    key = "serve_args" if kw.get("serve") else "sim_args"
    done = ScaledOutcome(out_dir=out)
    ran: list[tuple[Size, Path]] = []
    failed: list[tuple[Size, LoadgenError]] = []
    for i, s in enumerate(sizes, 1):
        if stopped():  # a signal between sizes (or while a server started): no further size
            err.print(f"[yellow]interrupted:[/] {len(sizes) - i + 1} size(s) not run")
            break
        err.print(f"[bold]size {i} of {len(sizes)}: {s.label} ({s.accelerators} accelerators)[/] -> {out / s.folder}")
        one = {**kw, key: s.args, "accelerators": s.accelerators, "out_dir": str(out / s.folder),
               "label": f"{kw['label']} {s.label}" if kw.get("label") else s.label}  # fmt: skip
        try:
            outcome = sweep_one(one)
        except LoadgenError as exc:  # e.g. a server that does not start at this size: the others still count
            err.print(f"[red]size {s.label}:[/] {exc}")
            failed.append((s, exc))
            continue
        done.sizes.append(outcome)
        ran.append((s, out / s.folder))
        if outcome.result.get("interrupted"):
            err.print(f"[yellow]interrupted:[/] {len(sizes) - i} size(s) not run")
            break
    if ran:
        done.scaling = write_scaling(ran, out, console, failed)
        from loadgen.cli.runfile import write_used_config

        try:  # the whole series, brace list and all: `loadgen sweep --config OUT/config.used.toml` repeats it
            if click.get_current_context(silent=True) is not None:
                write_used_config(kw, out)
        except OSError as e:
            err.print(f"[yellow]warning:[/] {out}: config.used.toml not written: {e.strerror or e}")
    if failed:  # the first failure's exit code (loadgen.cli maps it), after the table of the sizes measured
        raise failed[0][1]
    return done


def write_scaling(
    ran: list[tuple[Size, Path]], out: Path, console: Console, failed: list[tuple[Size, LoadgenError]] | None = None
) -> dict[str, Any]:
    """``scaling.json`` and the scorecard of the sizes run (``scorecard/``); prints the table."""
    from loadgen.capacity.scaling import scaling_document
    from loadgen.capacity.source import load_sweep
    from loadgen.engine.recordlog import write_json
    from loadgen.report.compare import load_system, scorecard, write_outputs

    doc = scaling_document([(s.accelerators, load_sweep(str(d), s.label)) for s, d in ran])
    doc["sizes"] = [{"value": s.value, "label": s.label, "accelerators": s.accelerators, "dir": s.folder,
                     "server_args": s.args} for s, _ in ran]  # fmt: skip
    doc["failed"] = [{"value": s.value, "label": s.label, "accelerators": s.accelerators, "error": str(e)}
                     for s, e in failed or []]  # fmt: skip
    doc["notes"] += [f"{s.label} ({s.accelerators} accelerators): not measured: {e}" for s, e in failed or []]
    write_json(out / "scaling.json", doc)
    systems = [load_system(str(d), s.label) for s, d in ran]
    write_outputs(scorecard(systems), systems, out / "scorecard")
    _print_scaling(doc, console)
    console.print(f"scaling.json and scorecard/ (scorecard.html) in {out}")
    return doc


def _pct(v: float | None) -> str:
    return "?" if v is None else f"{v:.1%}"


def _print_scaling(doc: dict[str, Any], console: Console) -> None:
    from rich.table import Table

    t = Table(title="scaling efficiency")
    for col in ("size", "accelerators", "max SLO load req/s", "per accelerator", "efficiency", "efficiency CI", "step"):
        t.add_column(col, justify="right")
    for r in doc["rows"]:
        if r["capacity_rps"] is None:
            t.add_row(r["label"], str(r["accelerators"]), "–", "–", "–", "–", r.get("note") or "")
            continue
        lo, hi = r["efficiency_ci"]
        t.add_row(r["label"], str(r["accelerators"]), f"{r['capacity_rps']:,.2f}",
                  f"{r['capacity_per_accelerator_rps']:,.2f}",
                  "not measurable" if r["efficiency"] is None else _pct(r["efficiency"]), f"[{_pct(lo)}, {_pct(hi)}]",
                  "–" if r["step_efficiency"] is None else _pct(r["step_efficiency"]))  # fmt: skip
    console.print(t)
    for r in doc["rows"]:
        if r["capacity_rps"] is not None and r.get("note"):
            console.print(f"[yellow]note:[/] {r['label']}: {r['note']}")
    for n in doc.get("notes") or []:
        console.print(f"[yellow]note:[/] {n}")

"""``loadgen sweep`` over a brace list of sizes (loadgen.cli.scale): the expansion, the accelerator
count of each size, the folder layout, the series' stops and exit code, the scaling document and
the scorecard's scaling rows. The sweeps themselves are checked-in real ones (tests/fixtures/capacity)
copied into place by a stand-in for the sweep command body; the live CLI is tests/integration/test_scale_cli.py.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import pytest
from rich.console import Console

from loadgen.capacity import load_sweep, scaling_table
from loadgen.capacity.scaling import scaling_document
from loadgen.cli import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_LOWER_BOUND, EXIT_OK, sweep_exit_code
from loadgen.cli.scale import ScaledOutcome, accelerators_of, expand_sizes, scaled_sweep, sizes_of
from loadgen.core.errors import LoadgenError
from loadgen.report.compare import load_system, scorecard
from loadgen.report.compare_html import render_html

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "capacity"
QUIET = Console(file=io.StringIO())  # the command's prints, not shown


def test_tensor_parallel_brace_list() -> None:
    sizes = expand_sizes("--serve-args", "--max-model-len 4096 --tensor-parallel-size {1,2,4}", "vllm")
    assert sizes is not None
    assert [s.accelerators for s in sizes] == [1, 2, 4]
    assert [s.folder for s in sizes] == ["size-1", "size-2", "size-4"]
    assert [s.label for s in sizes] == ["tensor-parallel-size=1", "tensor-parallel-size=2", "tensor-parallel-size=4"]
    assert sizes[1].args == "--max-model-len 4096 --tensor-parallel-size 2"


def test_accelerators_are_tensor_x_pipeline_x_data_parallel() -> None:
    sizes = expand_sizes("--serve-args", "-tp 2 --data-parallel-size={1,2}", "vllm")
    assert sizes is not None and [s.accelerators for s in sizes] == [2, 4]
    assert [s.label for s in sizes] == ["data-parallel-size=1", "data-parallel-size=2"]
    assert accelerators_of("--pipeline-parallel-size 2 -tp=4") == 8
    assert accelerators_of("--max-model-len 1024") == 1
    with pytest.raises(click.UsageError, match="positive integer"):
        accelerators_of("--tensor-parallel-size x")


def test_json_values_and_plain_options_are_no_brace_list() -> None:
    assert expand_sizes("--serve-args", """--compilation-config '{"level": 3}'""", "vllm") is None
    assert expand_sizes("--serve-args", "--max-model-len 1024", "vllm") is None
    assert expand_sizes("--sim-args", "--slots {4}", None) is None  # one value: not a list (as bash)


@pytest.mark.parametrize(
    ("text", "serve", "why"),
    [
        ("-tp {1,2} -dp {1,2}", "vllm", "one brace list"),
        ("-tp {1,1}", "vllm", "repeated"),
        ("--max-num-seqs {64,128}", "vllm", "must differ"),
        ("--itl-ms {a,b}", None, "accelerator counts"),
    ],
)
def test_bad_brace_lists_are_usage_errors(text: str, serve: str | None, why: str) -> None:
    with pytest.raises(click.UsageError, match=why):
        expand_sizes("--serve-args" if serve else "--sim-args", text, serve)


def _kw(**over: Any) -> dict[str, Any]:
    kw = {"serve": None, "serve_args": None, "sim_args": "", "endpoint": None, "accelerators": None,
          "out_dir": None, "label": None}  # fmt: skip
    kw.update(over)
    return kw


def test_which_option_holds_the_sizes() -> None:
    sim = sizes_of(_kw(sim_args="--fifo --slots {1,2}"))
    assert sim is not None and [s.args for s in sim] == ["--fifo --slots 1", "--fifo --slots 2"]
    assert sizes_of(_kw(sim_args="--slots {1,2}", endpoint="http://127.0.0.1:9")) is None  # the sim is not started
    assert sizes_of(_kw()) is None
    with pytest.raises(click.UsageError, match="needs --serve"):
        sizes_of(_kw(serve_args="-tp {1,2}", endpoint="http://127.0.0.1:9"))
    with pytest.raises(click.UsageError, match="--accelerators"):
        sizes_of(_kw(sim_args="--slots {1,2}", accelerators=2))


class FakeSweeps:
    """Stands in for the sweep command body: copies a checked-in sweep into the size's folder and
    records its accelerators there, as ``--accelerators`` does (settings.accelerators)."""

    def __init__(self, sources: list[str], interrupted_at: int | None = None, fail_at: int | None = None) -> None:
        self.sources, self.interrupted_at, self.fail_at = sources, interrupted_at, fail_at
        self.calls: list[dict[str, Any]] = []

    def __call__(self, one: dict[str, Any]) -> Any:
        i = len(self.calls)
        self.calls.append(one)
        if i == self.fail_at:
            raise LoadgenError("vllm server failed to start: exited with code 1")
        dst = Path(one["out_dir"])
        shutil.copytree(FIX / self.sources[i], dst)
        doc = json.loads((dst / "sweep.json").read_text())
        doc["settings"]["accelerators"] = one["accelerators"]
        (dst / "sweep.json").write_text(json.dumps(doc))
        return SimpleNamespace(result={"interrupted": i == self.interrupted_at, "answer": doc["answer"]})


def test_one_sweep_per_size_each_in_its_folder_then_the_table(tmp_path: Path) -> None:
    sizes = sizes_of(_kw(serve="vllm", serve_args="--enforce-eager -tp {1,2}"))
    assert sizes is not None
    fake = FakeSweeps(["sim4", "sim8"])
    kw = _kw(serve="vllm", serve_args="--enforce-eager -tp {1,2}", out_dir=str(tmp_path), label="gpu")
    done = scaled_sweep(kw, sizes, fake, lambda: False, QUIET, QUIET)
    assert [c["serve_args"] for c in fake.calls] == ["--enforce-eager -tp 1", "--enforce-eager -tp 2"]
    assert [c["out_dir"] for c in fake.calls] == [str(tmp_path / "size-1"), str(tmp_path / "size-2")]
    assert [c["accelerators"] for c in fake.calls] == [1, 2]
    assert [c["label"] for c in fake.calls] == ["gpu tp=1", "gpu tp=2"]
    doc = json.loads((tmp_path / "scaling.json").read_text())
    want = scaling_table([(1, load_sweep(str(tmp_path / "size-1"))), (2, load_sweep(str(tmp_path / "size-2")))])
    assert [r["efficiency"] for r in doc["rows"]] == pytest.approx([r["efficiency"] for r in want])
    assert doc["rows"][1]["efficiency"] == pytest.approx(134.85950688634128 / (2 * 55.1571029771876))
    assert [s["dir"] for s in doc["sizes"]] == ["size-1", "size-2"] and doc["failed"] == []
    assert done.scaling == doc
    card = json.loads((tmp_path / "scorecard" / "scorecard.json").read_text())
    eff = next(r for r in card["rows"] if r["key"] == "scaling_efficiency")
    assert eff["values"] == pytest.approx({"tp=1": 1.0, "tp=2": doc["rows"][1]["efficiency"]})
    per = next(r for r in card["rows"] if r["key"] == "capacity_per_accelerator_rps")
    assert per["values"]["tp=2"] == pytest.approx(134.85950688634128 / 2) and per["best"] == "tp=2"
    assert "<h2>Scaling</h2>" in (tmp_path / "scorecard" / "scorecard.html").read_text()


def test_an_interrupted_size_ends_the_series(tmp_path: Path) -> None:
    sizes = sizes_of(_kw(sim_args="--fifo --slots {1,2,4}"))
    assert sizes is not None
    fake = FakeSweeps(["sim4", "sim8", "sim8"], interrupted_at=1)
    done = scaled_sweep(_kw(sim_args="--fifo --slots {1,2,4}", out_dir=str(tmp_path)), sizes, fake, lambda: False,
                        QUIET, QUIET)  # fmt: skip
    assert len(fake.calls) == 2 and not (tmp_path / "size-4").exists()
    assert [r["accelerators"] for r in done.scaling["rows"]] == [1, 2]
    stopped = FakeSweeps(["sim4", "sim8"])
    out2 = tmp_path / "b"
    scaled_sweep(_kw(sim_args="--slots {1,2}", out_dir=str(out2)), sizes[:2], stopped, lambda: len(stopped.calls) > 0,
                 QUIET, QUIET)  # fmt: skip
    assert len(stopped.calls) == 1  # a signal after the first size: the second is not started


def test_a_size_that_fails_leaves_the_table_of_the_others_then_raises(tmp_path: Path) -> None:
    sizes = sizes_of(_kw(serve="vllm", serve_args="-tp {1,2,4}"))
    assert sizes is not None
    fake = FakeSweeps(["sim4", "sim8"], fail_at=2)
    with pytest.raises(LoadgenError, match="failed to start"):
        scaled_sweep(_kw(serve="vllm", serve_args="-tp {1,2,4}", out_dir=str(tmp_path)), sizes, fake, lambda: False,
                     QUIET, QUIET)  # fmt: skip
    doc = json.loads((tmp_path / "scaling.json").read_text())
    assert [r["accelerators"] for r in doc["rows"]] == [1, 2]
    assert doc["failed"][0]["accelerators"] == 4 and "failed to start" in doc["notes"][-1]


def _outcome(interrupted: bool = False, limited: str | None = None, rate: float | None = 5.0) -> Any:
    return SimpleNamespace(result={"interrupted": interrupted, "answer": {"limited_by": limited, "max_rate_rps": rate,
                                                                          "concurrency": None}})  # fmt: skip


def test_exit_code_of_a_series_is_its_worst_size() -> None:
    err = QUIET
    assert sweep_exit_code(ScaledOutcome(sizes=[_outcome(), _outcome()]), err) == EXIT_OK  # type: ignore[arg-type]  # the scaled outcome
    assert sweep_exit_code(ScaledOutcome(sizes=[_outcome(), _outcome(rate=None)]), err) == EXIT_FAIL  # type: ignore[arg-type]  # the scaled outcome
    both = ScaledOutcome(sizes=[_outcome(rate=None), _outcome(limited="client")])
    assert sweep_exit_code(both, err) == EXIT_LOWER_BOUND  # type: ignore[arg-type]  # the scaled outcome
    stop = ScaledOutcome(sizes=[_outcome(limited="client"), _outcome(interrupted=True)])
    assert sweep_exit_code(stop, err) == EXIT_INTERRUPTED  # type: ignore[arg-type]  # the scaled outcome


def test_scaling_document_keeps_a_size_without_an_answer() -> None:
    one, two = load_sweep(str(FIX / "sim4"), "one"), load_sweep(str(FIX / "sim8"), "two")
    one.max_rate_rps = None
    doc = scaling_document([(2, two), (1, one)])
    assert [r["accelerators"] for r in doc["rows"]] == [1, 2]
    assert doc["rows"][0]["capacity_rps"] is None and doc["rows"][1]["efficiency"] == 1.0
    assert doc["base_accelerators"] == 2 and any("relative to 2" in n for n in doc["notes"])


def test_the_base_size_has_efficiency_one_with_no_spread() -> None:
    rows = scaling_table([(1, load_sweep(str(FIX / "sim4"))), (2, load_sweep(str(FIX / "sim8")))])
    assert rows[0]["efficiency"] == 1.0 and rows[0]["efficiency_ci"] == [1.0, 1.0]
    assert rows[1]["efficiency_ci"][0] < rows[1]["efficiency"] < rows[1]["efficiency_ci"][1]


def test_scorecard_has_no_scaling_rows_without_accelerator_counts() -> None:
    systems = [load_system(str(FIX / "sim4"), "a"), load_system(str(FIX / "sim8"), "b")]
    card = scorecard(systems)
    assert card["scaling"] is None and not any(r["key"] == "scaling_efficiency" for r in card["rows"])
    assert "<h2>Scaling</h2>" not in render_html(card)

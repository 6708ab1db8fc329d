"""Bad configuration, data files and flags through the real command line (``cfg-NN``).

Each case is ``python -m loadgen.cli ...`` in a subprocess. The endpoint, where one
is needed, is a raw HTTP server on 127.0.0.1 that answers every request at once
(``tests/fixtures/fault_proxy.py``), so a bad value that slips past validation shows
up as what it really does (a run, a traceback, a file) rather than as "unreachable".

Every case must end with exit code 2 and exactly one ``Error:`` line naming the flag,
or the file, line and field of a data file; never a traceback; and nothing written
that a later run could mistake for a result (no ``result.json``, no ``requests.jsonl``,
no ``schedule.jsonl``). Server-side malformed input is in ``tests/unit/test_bad_inputs.py``.

Each test runs its case (a module fixture holds the server and the data files); xdist spreads them.
"""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from tests.fixtures.cli_proc import cli_run
from tests.fixtures.fault_proxy import FaultServer

pytestmark = [pytest.mark.timeout(240)]

RUN = [
    "run",
    "--endpoint",
    "{url}",
    "--rate",
    "20",
    "--requests",
    "3",
    "--input-tokens",
    "8",
    "--output-tokens",
    "4",
    "--model",
    "m",
]


def run_with(*extra: str, drop: tuple[str, ...] = ()) -> list[str]:
    """``loadgen run`` against the test server with ``extra`` flags (``drop``: flags removed with their value)."""
    out = list(RUN)
    for flag in drop:
        i = out.index(flag)
        del out[i : i + 2]
    return out + list(extra)


V1_RUN = str(Path(__file__).parents[1] / "data" / "results_v1" / "run" / "result.json")  # a result compare reads
LONG_OUT = "{dir}/" + "a" * 300 + "/x"  # a name over the 255 bytes a file name may have


class Case(NamedTuple):
    id: str
    args: list[str]
    error: str  # regex the one Error: line must match (after "Error: ")
    xfail: str | None = None


# The loadgen bugs these cases found are fixed; the names stay so each case says which fix it pins.
C1 = C2 = C3 = C4 = C6 = C7 = C8 = C9 = C10 = None

CASES: list[Case] = [
    Case("cfg-01-timeout-zero", run_with("--timeout", "0s"), r"--timeout", C1),
    Case("cfg-02-connect-timeout-zero", run_with("--connect-timeout", "0"), r"--connect-timeout", C1),
    Case("cfg-03-max-concurrency-zero", run_with("--max-concurrency", "0"), r"--max-concurrency", C2),
    Case("cfg-04-max-concurrency-negative", run_with("--max-concurrency", "-3"), r"--max-concurrency", C2),
    Case("cfg-05-duration-zero", run_with("--duration", "0s", drop=("--requests",)), r"--duration", C3),
    Case("cfg-06-rate-nan", run_with("--rate", "nan", drop=("--rate",)), r"--rate", C4),
    # --rate inf is the max-throughput mode (issue 21 item 7); without a count or a cap it has no batch
    Case(
        "cfg-07-rate-inf-without-a-count",
        run_with("--rate", "inf", "--duration", "5s", drop=("--rate", "--requests")),
        r"--rate inf .*--requests",
        C4,
    ),  # fmt: skip
    Case("cfg-08-slo-percentile-100", run_with("--slo", "ttft:p100<=1s"), r"--slo.*percentile", C6),
    Case(
        "cfg-09-endpoint-without-scheme", run_with("--endpoint", "127.0.0.1:9", drop=("--endpoint",)), r"--endpoint", C7
    ),
    Case(
        "cfg-10-endpoint-bad-port",
        run_with("--endpoint", "http://127.0.0.1:99999", drop=("--endpoint",)),
        r"--endpoint",
        C7,
    ),
    Case(
        "cfg-11-sim-args-out-of-range",
        run_with("--sim-args", "--fault-429 2", drop=("--endpoint", "--model")),
        r"--sim-args.*--fault-429",
        C8,
    ),
    Case("cfg-12-out-cannot-be-created", run_with("--out", "/proc/self/loadgen-no/x"), r"--out", C9),
    Case("cfg-13-extra-body-nan", run_with("--extra-body", '{"temperature": NaN}'), r"--extra-body", C10),
    Case("cfg-14-workers-zero", run_with("--workers", "0"), r"^--workers '0': expected a positive integer"),
    Case("cfg-15-warmup-bad-unit", run_with("--warmup", "5x"), r"^invalid --warmup '5x'"),
    Case(
        "cfg-16-api-key-env-unset",
        run_with("--api-key-env", "LOADGEN_TEST_UNSET_VAR"),
        r"^--api-key-env LOADGEN_TEST_UNSET_VAR: that environment variable is not set$",
    ),
    Case(
        "cfg-17-header-empty-name",
        run_with("--header", ": v"),
        r"^--header ''\.\.\.: expected 'Name: value' \(the value is not shown\)$",
    ),
    Case(
        "cfg-18-connect-timeout-not-a-duration",
        run_with("--connect-timeout", "fast"),
        r"^invalid --connect-timeout 'fast'",
    ),
    Case("cfg-19-slo-percentile-zero", run_with("--slo", "ttft:p0<=1s"), r"^--slo: .*percentile must be between"),
    Case(
        "cfg-20-gamma-burstiness-zero",
        run_with("--arrival", "gamma", "--burstiness", "0"),
        r"^--burstiness must be > 0$",
    ),
    Case(
        "cfg-21-trace-bad-row",
        run_with("--trace", "{dir}/bad.csv", drop=("--rate",)),
        r"^\S*bad\.csv:2: field 'ContextTokens': not an integer: '48x'$",
    ),
    Case(
        "cfg-22-trace-gzip-bad-row",
        run_with("--trace", "{dir}/bad.csv.gz", drop=("--rate",)),
        r"^\S*bad\.csv\.gz:2: field 'ContextTokens'",
    ),
    Case(
        "cfg-23-trace-missing-file",
        run_with("--trace", "{dir}/nope.csv", drop=("--rate",)),
        r"^trace file not found: \S*nope\.csv$",
    ),
    Case(
        "cfg-24-dataset-bad-row",
        run_with("--dataset", "{dir}/ds.jsonl"),
        r"^\S*ds\.jsonl:2: field 'prompt': must be a non-empty string$",
    ),
    Case(
        "cfg-25-sharegpt-bad-turn",
        run_with("--dataset", "{dir}/sg.json"),
        r"^\S*sg\.json:1: field '\[0\]\.conversations\[0\]'",
    ),
    Case(
        "cfg-26-trace-inspect-empty-file",
        ["trace", "inspect", "{dir}/empty.csv"],
        r"^\S*empty\.csv:1: field 'row': the file is empty$",
    ),
    Case(
        "cfg-27-time-scale-zero",
        run_with("--trace", "builtin:azure-code-2023", "--time-scale", "0", drop=("--rate",)),
        r"time scale must be > 0",
    ),
    # issue 20 item 13: each was a traceback (or an out-of-memory kill) before
    Case("cfg-28-seed-negative", run_with("--seed", "-1"), r"^--seed -1: expected an integer from 0 to 2\*\*63 - 1$"),
    Case("cfg-29-seed-over-64-bits", run_with("--seed", str(2**70)), r"^--seed \d+: expected an integer from 0"),
    Case(
        "cfg-30-schedule-too-large",
        run_with("--rate", "1000000", "--duration", "600m", drop=("--rate", "--requests")),
        r"^a schedule of ~36,000,000,000 requests \(~804\.7 GiB of send times\) is over the limit",
    ),
    Case(
        "cfg-31-input-tokens-absurd",
        run_with("--input-tokens", "2000000000", drop=("--input-tokens",)),
        r"^length spec '2000000000': 2,000,000,000 tokens is over the limit of 10,000,000$",
    ),
    Case(
        "cfg-32-header-crlf",
        run_with("--header", "X-A: b\r\nX-Injected: 1"),
        r"^--header 'X-A': a control character \(CR, LF, \.\.\.\) in a header is refused$",
    ),
    Case(  # issue 20 item 6: was a 41-line traceback
        "cfg-33-dry-run-out-cannot-be-created",
        run_with("--dry-run", "--out", "{dir}/bad.csv/x"),
        r"^--out '\S*bad\.csv/x': cannot create it: Not a directory$",
    ),
    # issue 29 item 2: an --out whose path cannot even be looked at (stat() raises) was a traceback from the
    # run's clean-up (``run``), from reading back the child's result (``locust``) and from ``compare``
    Case(
        "cfg-34-run-out-name-too-long",
        run_with("--out", LONG_OUT),
        r"^--out '\S+': cannot create it: File name too long$",
    ),
    Case(
        "cfg-35-locust-out-name-too-long",
        ["locust", "--endpoint", "{url}", "--headless", "--users", "1", "--run-time", "1s", "--out", LONG_OUT],
        r"^--out '\S+': cannot create it: File name too long$",
    ),
    Case(
        "cfg-36-compare-out-name-too-long",
        ["compare", V1_RUN, V1_RUN, "--force", "--out", LONG_OUT],
        r"^--out '\S+': cannot create it: File name too long$",
    ),
    Case(
        "cfg-37-sessions-not-a-file", run_with("--sessions", "/dev/null"), r"^--sessions /dev/null: not a regular file$"
    ),
    Case(  # issue 32 item 2: a cap on turns in flight is split over the workers, at least one each
        "cfg-38-session-turn-cap-under-workers",
        run_with("--sessions", "synthetic,turns=2", "--workers", "2", "--max-concurrency", "1"),
        r"^--max-concurrency 1 is split over --workers 2: each needs at least one turn in flight",
    ),
    # issue 32 items 3-4: each was silently overridden or ignored before
    Case(
        "cfg-39-session-header-clashes-with-header",
        run_with("--sessions", "synthetic,turns=2", "--session-header", "X-Session", "--header", "x-session: 1"),
        r"^--session-header X-Session clashes with a --header of that name",
    ),
    Case(
        "cfg-40-trace-option-with-sessions",
        run_with("--sessions", "synthetic,turns=2", "--trace-spread", "uniform"),
        r"^--trace-spread is a request trace's option: it does not apply to --sessions",
    ),
    Case(
        "cfg-41-trace-time-scale-with-synthetic-sessions",
        run_with("--sessions", "synthetic,turns=2", "--trace-time-scale", "10"),
        r"^--trace-time-scale with --sessions sets a session file's speedup",
    ),
    Case(
        "cfg-42-sessions-speedup-and-time-scale",
        run_with("--sessions", "{dir}/sessions.jsonl,speedup=10,time_scale=0.1"),
        r"time_scale= and speedup= clash",
    ),
    # issue 35 item 5: a binary --config was a UnicodeDecodeError traceback
    Case(
        "cfg-43-config-binary", run_with("--config", "{dir}/binary.toml"), r"^--config \S+binary\.toml: not UTF-8 text"
    ),
    Case(  # the binary bytes were printed as the field's name
        "cfg-44-trace-binary",
        ["trace", "inspect", "{dir}/binary.toml"],
        r"^\S+binary\.toml:1: field 'row': unknown columns",
    ),
]
MINIMUM = 12


def _write_data(d: Path) -> None:
    bad = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,48x,10\n"
    (d / "bad.csv").write_text(bad)
    (d / "bad.csv.gz").write_bytes(gzip.compress(bad.encode()))
    (d / "ds.jsonl").write_text('{"prompt": "hi", "output_tokens": 3}\n{"prompt": 5}\n')
    (d / "sg.json").write_text('[{"conversations": [{"from": "human", "value": 5}]}]')
    (d / "empty.csv").write_text("")
    (d / "binary.toml").write_bytes(b"\xe2\x28\xa1" * 50)
    (d / "sessions.jsonl").write_text('{"session_id": "a", "turns": [{"new_tokens": 5, "output_tokens": 2}]}\n')


def _cli(args: list[str], out: Path) -> subprocess.CompletedProcess[str]:
    """``loadgen ARGS`` in the case's directory; ``run`` writes into ``out`` unless the case names its own."""
    return cli_run(
        *args,
        out=out if args[0] == "run" and "--out" not in args else None,
        cwd=out.parent,
        env={"LOADGEN_TEST_UNSET_VAR": None},
    )


class _Cases:
    """The cases' outcomes, each run when a test first asks for it: a worker runs only the cases of the tests
    it is given (xdist spreads them), never the whole corpus once a worker (a module fixture did: xdist's
    ``loadgroup`` no longer groups on pytest 9, whose node ids it cannot suffix)."""

    def __init__(self, root: Path, url: str) -> None:
        self.root, self.url = root, url
        self.done: dict[str, tuple[subprocess.CompletedProcess[str], Path]] = {}

    def __getitem__(self, case_id: str) -> tuple[subprocess.CompletedProcess[str], Path]:
        if case_id not in self.done:
            c = next(c for c in CASES if c.id == case_id)
            d = self.root / c.id
            d.mkdir()
            args = [a.replace("{url}", self.url).replace("{dir}", str(self.root)) for a in c.args]
            self.done[case_id] = (_cli(args, d / "out"), d / "out")
        return self.done[case_id]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Cases]:
    root = tmp_path_factory.mktemp("badcli")
    _write_data(root)
    ok = {"kind": "ok", "tokens": 4, "first_s": 0.001, "itl_s": 0.001}
    with FaultServer({"mode": "raw", "default": ok}) as srv:
        yield _Cases(root, srv.url)
    shutil.rmtree(root, ignore_errors=True)


def _params() -> list[Any]:
    return [
        pytest.param(c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else [])
        for c in CASES
    ]


@pytest.mark.parametrize("case", _params())
def test_bad_config_input(case: Case, results: _Cases) -> None:
    p, out = results[case.id]
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    written = sorted(x.name for x in out.iterdir()) if out.exists() else []
    assert not {"result.json", "requests.jsonl", "schedule.jsonl", "histograms.hlog"} & set(written), written
    assert p.returncode == 2, (p.returncode, p.stderr[-600:])
    assert p.stdout == ""
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1, p.stderr
    msg = errors[0][len("Error: ") :]
    assert re.search(case.error, msg), msg


def test_cli_corpus_counts(capsys: pytest.CaptureFixture[str]) -> None:
    assert len({c.id for c in CASES}) == len(CASES) >= MINIMUM
    data = sum(1 for c in CASES if "{dir}" in " ".join(c.args))
    with capsys.disabled():
        print(
            f"\nbad-input corpus (configuration): cfg {len(CASES)} (data files {data}, flags {len(CASES) - data}; "
            f"xfail {sum(1 for c in CASES if c.xfail)})"
        )
    assert Counter(c.id[:3] for c in CASES) == {"cfg": len(CASES)}

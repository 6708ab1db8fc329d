"""Length specs: parsing, seeded sampling, moments, clipping, empirical columns."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core.errors import ConfigError
from loadgen.workload.lengths import parse_length_spec
from loadgen.workload.traces import read_trace

N = 40_000


def _draw(spec: str, seed: int = 0, column: str = "input") -> np.ndarray:
    return parse_length_spec(spec, column=column).sample(N, np.random.default_rng(seed))


def test_fixed() -> None:
    s = parse_length_spec(128)
    assert s.kind == "fixed" and s.at(0, 0, "input") == 128 == s.at(10**6, 5, "x")
    assert (_draw("7") == 7).all()


def test_uniform_inclusive_and_mean() -> None:
    x = _draw("uniform:10,20")
    assert x.min() == 10 and x.max() == 20
    assert abs(x.mean() - 15) < 0.1


def test_normal_mean_sd_and_clipping() -> None:
    x = _draw("normal:300,50")
    assert abs(x.mean() - 300) < 2 and abs(x.std() - 50) < 2
    y = _draw("normal:5,50")
    assert y.min() == 1  # clipped to >= 1


def test_lognormal_is_parameterised_by_the_lengths_mean_and_sd() -> None:
    x = _draw("lognormal:1000,400", seed=3)
    assert abs(x.mean() - 1000) / 1000 < 0.02
    assert abs(x.std() - 400) / 400 < 0.05
    assert (_draw("lognormal:50,0") == 50).all()


def test_empirical_samples_the_trace_column() -> None:
    tr = read_trace("builtin:azure-code-2023")
    x = _draw("empirical:builtin:azure-code-2023", column="input")
    assert set(np.unique(x)) <= set(tr.input_tokens.tolist())
    assert abs(x.mean() - tr.input_tokens.mean()) / tr.input_tokens.mean() < 0.05
    y = _draw("empirical:builtin:azure-code-2023", column="output")
    assert set(np.unique(y)) <= set(tr.output_tokens.tolist())


def test_seeded_and_order_independent() -> None:
    s = parse_length_spec("lognormal:200,100")
    forward = [s.at(i, 42, "input") for i in range(5000)]
    t = parse_length_spec("lognormal:200,100")
    backward = [t.at(i, 42, "input") for i in reversed(range(5000))][::-1]
    assert forward == backward
    assert forward != [s.at(i, 43, "input") for i in range(5000)]
    assert forward != [s.at(i, 42, "output") for i in range(5000)]


@pytest.mark.parametrize(
    "bad",
    ["0", "-3", "abc", "uniform:5", "uniform:9,3", "uniform:1.5,3", "normal:0,1", "normal:10,-1",
     "lognormal:x,1", "poisson:3", "normal:nan,1", "empirical:/nonexistent/file.csv"],
)  # fmt: skip
def test_bad_specs_raise_config_error(bad: str) -> None:
    with pytest.raises(ConfigError):
        parse_length_spec(bad)


@settings(max_examples=30, deadline=None)
@given(lo=st.integers(1, 5000), width=st.integers(0, 5000), seed=st.integers(0, 2**31))
def test_uniform_always_in_range(lo: int, width: int, seed: int) -> None:
    x = parse_length_spec(f"uniform:{lo},{lo + width}").sample(200, np.random.default_rng(seed))
    assert x.min() >= lo and x.max() <= lo + width and x.dtype == np.int64

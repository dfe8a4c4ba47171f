"""The stopping rule's statistics, against numpy and against their definitions."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from srifty import stats

floats = st.floats(min_value=0.01, max_value=1e4, allow_nan=False, allow_infinity=False)


@given(st.lists(floats, min_size=1, max_size=200))
def test_median_and_quantiles_match_numpy(xs: list[float]) -> None:
    assert stats.median(xs) == pytest.approx(float(np.median(xs)))
    for q in (0.1, 0.5, 0.9):
        assert stats.quantile(xs, q) == pytest.approx(float(np.quantile(xs, q)))


@given(st.lists(floats, min_size=3, max_size=300))
def test_median_ci_brackets_the_median(xs: list[float]) -> None:
    lo, hi = stats.median_ci(xs)
    assert min(xs) <= lo <= stats.median(xs) <= hi <= max(xs)


def test_median_ci_covers_the_true_median_about_95_percent() -> None:
    rng = random.Random(7)
    hits, trials = 0, 2000
    for _ in range(trials):
        xs = [rng.lognormvariate(0.0, 0.5) for _ in range(40)]  # skewed, median exactly 1.0
        lo, hi = stats.median_ci(xs)
        hits += lo <= 1.0 <= hi
    assert 0.93 <= hits / trials <= 0.99


def test_relative_halfwidth_shrinks_with_more_samples() -> None:
    rng = random.Random(3)
    small = [rng.gauss(100, 5) for _ in range(20)]
    large = small + [rng.gauss(100, 5) for _ in range(380)]
    assert stats.relative_ci_halfwidth(large) < stats.relative_ci_halfwidth(small)


def test_mser_drops_a_slow_start_and_keeps_a_steady_series() -> None:
    rng = random.Random(11)
    steady = [100 + rng.gauss(0, 2) for _ in range(60)]
    warm = [400, 250, 180, 140, 120] + steady
    d = stats.mser_truncation(warm)
    assert 5 <= d <= 8
    assert stats.mser_truncation(steady) <= 10  # nothing much to drop: at most noise-level trimming
    assert stats.mser_truncation([5.0]) == 1


@given(st.lists(floats, min_size=2, max_size=100))
@settings(max_examples=50)
def test_mser_stays_in_bounds(xs: list[float]) -> None:
    d = stats.mser_truncation(xs)
    assert 1 <= d <= max(1, len(xs) // 2)


def test_summary_fields() -> None:
    s = stats.Summary.of([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s.median == 3.0 and s.n == 5 and s.mean == pytest.approx(22.0)
    assert s.ci_low <= s.median <= s.ci_high
    assert math.isfinite(s.relative_ci_halfwidth)
    with pytest.raises(ValueError):
        stats.Summary.of([])

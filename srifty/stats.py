"""Small, dependency-free statistics for deciding when a measurement is good enough.

Used inside every profiled worker (so no numpy here) and by the profile summaries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

Z95 = 1.959963984540054


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of an empty sequence")
    s = sorted(values)
    n = len(s)
    mid = n // 2
    return s[mid] if n % 2 else 0.5 * (s[mid - 1] + s[mid])


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default), q in [0, 1]."""
    if not values:
        raise ValueError("quantile of an empty sequence")
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median_ci(values: Sequence[float], z: float = Z95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median from order statistics.

    The number of samples below the median is Binomial(n, 1/2); the interval runs
    between the order statistics at n/2 -/+ z*sqrt(n)/2 (normal approximation, with
    the usual +1 on the upper rank). Iteration times are skewed by stragglers, so no
    normality is assumed. Needs at least 3 values; with few values the interval is
    simply the whole range.
    """
    n = len(values)
    if n < 3:
        raise ValueError("a median confidence interval needs at least 3 values")
    s = sorted(values)
    half = z * math.sqrt(n) / 2.0
    lo_rank = max(1, math.floor(n / 2.0 - half))
    hi_rank = min(n, math.ceil(n / 2.0 + half) + 1)
    return s[lo_rank - 1], s[hi_rank - 1]


def relative_ci_halfwidth(values: Sequence[float], z: float = Z95) -> float:
    """Half-width of the median's confidence interval, relative to the median."""
    lo, hi = median_ci(values, z)
    m = median(values)
    if m <= 0:
        return math.inf
    return (hi - lo) / 2.0 / m


def mser_truncation(values: Sequence[float], min_drop: int = 1, max_fraction: float = 0.5) -> int:
    """Number of leading warm-up values to drop, by the MSER rule (White, 1997).

    MSER picks the truncation point d that minimises the squared standard error of the
    mean of what is left, sum((x_i - mean)^2) / (n - d)^2, searched over the first
    ``max_fraction`` of the series. It needs no threshold and removes a slow start
    (lazy initialisation, allocator growth, DDP's bucket rebuild) without trimming a
    stationary series. At least ``min_drop`` values are always dropped: a training
    job's first iteration carries one-off work.
    """
    n = len(values)
    if n <= min_drop:
        return n
    limit = max(min_drop, int(n * max_fraction))
    # suffix sums so that each candidate d costs O(1)
    suffix_sum = [0.0] * (n + 1)
    suffix_sq = [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix_sum[i] = suffix_sum[i + 1] + values[i]
        suffix_sq[i] = suffix_sq[i + 1] + values[i] * values[i]
    best_d, best_score = min_drop, math.inf
    for d in range(min_drop, min(limit, n - 2) + 1):
        k = n - d
        mean = suffix_sum[d] / k
        sse = max(0.0, suffix_sq[d] - k * mean * mean)
        score = sse / (k * k)
        if score < best_score - 1e-15:
            best_d, best_score = d, score
    return best_d


@dataclass(frozen=True)
class Summary:
    """Robust summary of a series of measurements (milliseconds in profiles)."""

    median: float
    p10: float
    p90: float
    mean: float
    n: int
    ci_low: float
    ci_high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> "Summary":
        vals = list(values)
        if not vals:
            raise ValueError("cannot summarise an empty series")
        if len(vals) >= 3:
            lo, hi = median_ci(vals)
        else:
            lo, hi = min(vals), max(vals)
        return cls(
            median=median(vals),
            p10=quantile(vals, 0.10),
            p90=quantile(vals, 0.90),
            mean=sum(vals) / len(vals),
            n=len(vals),
            ci_low=lo,
            ci_high=hi,
        )

    @property
    def relative_ci_halfwidth(self) -> float:
        return (self.ci_high - self.ci_low) / 2.0 / self.median if self.median > 0 else math.inf

"""One worker's compute time against its per-worker batch, from measured points (:class:`ComputeCurve`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterable


@dataclass(frozen=True)
class ComputeCurve:
    """Per-worker compute time (ms) at a per-worker batch, from measured points. ``shape``: how
    the step grows with the batch on this device when something says so (the operator model of
    a GPU profile that counted its operators, :meth:`with_shape`); it carries a measured point to
    batches beyond the measured ones instead of proportion."""

    batches: tuple[float, ...]
    times_ms: tuple[float, ...]
    shape: Callable[[float], float] | None = field(default=None, compare=False)

    def with_shape(self, shape: Callable[[float], float]) -> "ComputeCurve":
        return replace(self, shape=shape)

    @classmethod
    def from_points(cls, points: Iterable[tuple[float, float]]) -> "ComputeCurve":
        by_b: dict[float, list[float]] = {}
        for b, t in points:
            by_b.setdefault(float(b), []).append(float(t))
        bs = sorted(by_b)
        ts = [sorted(by_b[b])[len(by_b[b]) // 2] for b in bs]
        return cls(tuple(bs), tuple(ts))

    def at(self, batch: float) -> float:
        """Linear between measured batches. Outside them: with a ``shape``, the nearest measured
        point carried by the shape's ratio; without one, the nearest segment's line, or from a
        single measured batch, proportional to the batch (right for a saturated device, the top
        of the bounds above the measured batch: docs/latency-model.md, "Compute at another
        batch", has how far it misses elsewhere); either kept within :meth:`bounds`."""
        bs, ts = self.batches, self.times_ms
        if self.shape is not None and not self.covers(batch):
            i = 0 if batch < bs[0] else len(bs) - 1
            low, high = self.bounds(batch)
            return min(max(ts[i] * self.shape(batch) / self.shape(bs[i]), low), high)
        if len(bs) == 1:
            return ts[0] * batch / bs[0]
        if batch <= bs[0]:
            i = 0
        elif batch >= bs[-1]:
            i = len(bs) - 2
        else:
            i = max(j for j in range(len(bs) - 1) if bs[j] <= batch)
        slope = (ts[i + 1] - ts[i]) / (bs[i + 1] - bs[i])
        value = ts[i] + slope * (batch - bs[i])
        floor = min(ts) * min(1.0, batch / bs[0]) * 0.5  # never below half the per-sample rate seen
        value = max(value, floor, 1e-6)
        if self.covers(batch):
            return value
        low, high = self.bounds(batch)
        return min(max(value, low), high)

    def covers(self, batch: float) -> bool:
        """Whether ``batch`` lies within the measured batches (measured or interpolated)."""
        return self.batches[0] <= batch <= self.batches[-1]

    def bounds(self, batch: float) -> tuple[float, float]:
        """(least, most) compute time at ``batch``. A larger batch never takes less time than a
        smaller one, nor more time per sample (the device is at least as busy): above the largest
        measured batch b1 (time t1) the time lies in [t1, t1 * batch / b1], below the smallest, b0
        (t0), in [t0 * batch / b0, t0], and between two measured batches within both neighbours'
        bounds (widened to take in the interpolated time where noisy measurements contradict them)."""
        bs, ts = self.batches, self.times_ms
        if batch > bs[-1]:
            return ts[-1], ts[-1] * batch / bs[-1]
        if batch < bs[0]:
            return ts[0] * batch / bs[0], ts[0]
        i = max(j for j in range(len(bs)) if bs[j] <= batch)
        if bs[i] == batch:
            return ts[i], ts[i]
        low = max(ts[i], ts[i + 1] * batch / bs[i + 1])
        high = min(ts[i] * batch / bs[i], ts[i + 1])
        value = self.at(batch)
        return min(low, high, value), max(low, high, value)

    @property
    def batch_range(self) -> tuple[float, float]:
        return self.batches[0], self.batches[-1]

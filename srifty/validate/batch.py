"""The batch-scaling check: a job's compute measured alone at two per-worker batches on one
device, the time at one batch predicted from the other's alone by srifty's one-batch rule
(:class:`BatchCheck`, :func:`validate_batch_scaling`), summarised per batch ratio
(:func:`batch_scaling_summary`) and rendered as its section of docs/ACCURACY.md
(:func:`render_batch_scaling`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from srifty.features import JobProfile
from srifty.model.residual import REPEAT_SCATTER
from srifty.validate.gpu_transfer import read_gavel


# --------------------------------------------------------------------------- compute at another batch

BATCH_RATIO_BINS = ((1.0, 2.0), (2.0, 4.0), (4.0, float("inf")))  # larger / smaller batch


def _ratio_bin(lo: float, hi: float) -> str:
    return f"{lo:g}-{hi:g}" if hi != float("inf") else f"{lo:g}+"


@dataclass
class BatchCheck:
    """One job's compute measured alone at two per-worker batches on one device: the time at
    ``target_batch`` predicted from the time at ``batch`` alone."""

    dataset: str
    group: str  # model on device
    batch: float
    ms: float
    target_batch: float
    target_ms: float

    @property
    def ratio(self) -> float:
        return max(self.batch, self.target_batch) / min(self.batch, self.target_batch)

    def proportional_ape(self) -> float:
        """|error| (%) of srifty's one-batch rule: time proportional to the batch."""
        return abs(self.ms * self.target_batch / self.batch / self.target_ms - 1.0) * 100

    def inside_bounds(self) -> bool:
        """Whether the measured time lies within the bounds, each end widened by the scatter of
        repeated measurements, as a one-worker prediction's interval is (LatencyModel.predict_interval)."""
        import math

        from srifty.features import ComputeCurve

        lo, hi = ComputeCurve.from_points([(self.batch, self.ms)]).bounds(self.target_batch)
        return lo * math.exp(-REPEAT_SCATTER) <= self.target_ms <= hi * math.exp(REPEAT_SCATTER)


def validate_batch_scaling(jobs_by_dataset: dict[str, Sequence[JobProfile]], gavel: str | Path | None = None
                           ) -> list[BatchCheck]:
    """Every pair of batches one job was measured at alone on one device: single-worker compute
    of the corpora's jobs (step minus sync and optimizer, what srifty's compute curve reads) and
    Gavel's single-GPU rates (K80/P100/V100, iterations/s at each batch in the job's name)."""
    from srifty.model import ROOT

    times: dict[tuple[str, str], dict[float, float]] = {}
    for dataset, jobs in jobs_by_dataset.items():
        for job in jobs:
            for t in job.instance_types:
                curve = job.compute_curve(t)
                if curve is not None and any(r.world_size == 1 for r in job.runs if r.instance_type == t):
                    times[(dataset, f"{job.model} on {t}")] = dict(zip(curve.batches, curve.times_ms))
    path = Path(gavel) if gavel else ROOT / "data" / "traces" / "gavel_throughputs.csv"
    if path.exists():
        single, _ = read_gavel(path)
        for (model, batch, gpu), rate in single.items():
            if batch != "-" and rate > 0:
                times.setdefault(("gavel", f"{model} on {gpu}"), {})[float(batch)] = 1e3 / rate
    out = []
    for (dataset, group), by_batch in sorted(times.items()):
        for b in sorted(by_batch):
            for tb in sorted(by_batch):
                if tb != b:
                    out.append(BatchCheck(dataset, group, b, by_batch[b], tb, by_batch[tb]))
    return out


def batch_scaling_summary(checks: Sequence[BatchCheck]) -> dict[str, dict[str, dict[str, float]]]:
    """Per dataset and batch-ratio bin ('1-2', '2-4', '4+'): pairs, the proportional rule's mean and
    median |error| (%) and the share of measured times inside the bounds."""
    import numpy as np

    out: dict[str, dict[str, dict[str, float]]] = {}
    for dataset in sorted({c.dataset for c in checks}):
        for lo, hi in BATCH_RATIO_BINS:
            sub = [c for c in checks if c.dataset == dataset and lo < c.ratio <= hi]
            if sub:
                e = np.array([c.proportional_ape() for c in sub])
                out.setdefault(dataset, {})[_ratio_bin(lo, hi)] = {
                    "pairs": len(sub), "jobs": len({c.group for c in sub}), "proportional_mape": float(e.mean()),
                    "proportional_median": float(np.median(e)),
                    "inside_bounds": sum(c.inside_bounds() for c in sub) / len(sub)}
    return out


def render_batch_scaling(checks: Sequence[BatchCheck]) -> str:
    if not checks:
        return ""
    lines = ["", "## Compute at another batch: one profiled batch, another predicted", "",
             "Every pair of per-worker batches at which a job was measured alone on one device (the corpora's "
             "single-worker runs, the H200 profiles of the examples in profiles/h200, and Gavel's single-GPU rates "
             "per batch): the time at one batch predicted from the other's alone. srifty's point estimate from a "
             "single batch is proportional to the batch; a prediction at a batch outside the profiled ones also "
             "gets the bounds of `ComputeCurve.bounds` in its interval (a larger batch takes no less time, and no "
             "more per sample), and a warning. 'inside' counts measured times within those bounds, each end widened "
             f"by the scatter of repeated measurements (×e^±{REPEAT_SCATTER:g}, `REPEAT_SCATTER`), as the interval "
             "of one worker on its profiled type is.",
             "",
             "| data | jobs | " + " | ".join(f"batch ×{_ratio_bin(lo, hi)}: pairs, proportional MAPE % (median), inside"
                                           for lo, hi in BATCH_RATIO_BINS) + " |",
             "|---|---:|" + "---|" * len(BATCH_RATIO_BINS)]
    summary = batch_scaling_summary(checks)
    for dataset, bins in summary.items():
        cells = []
        for lo, hi in BATCH_RATIO_BINS:
            b = bins.get(_ratio_bin(lo, hi))
            cells.append(f"{b['pairs']}: {b['proportional_mape']:.0f} ({b['proportional_median']:.0f}), "
                         f"{b['inside_bounds']:.0%}" if b else "–")
        lines.append(f"| {dataset} | {len({c.group for c in checks if c.dataset == dataset})} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"

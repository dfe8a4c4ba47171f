"""A CPU profile's gradient timeline on a GPU cluster: does it carry?

A profile srifty records on a CPU states its DDP buckets and when each became ready during
backward. A GPU runs backward's layers at other relative speeds, so the prediction for GPUs sets
those ready times aside (``FeatureBuilder.recorded_ready``). This check measures that choice on
the Pollux trace, whose models also have CPU profiles (profiles/cpu, examples/pollux_models.py):
each model is held out as in ``lomo-1gpu`` (known by its single-GPU runs), given its CPU
profile's buckets, ready times and backward share, and its multi-GPU runs are predicted twice,
as srifty takes that profile on GPUs and with the CPU's ready times taken as they were recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from srifty.features import AllreduceRow, CollectivePoint, JobProfile, load_corpus
from srifty.validate.folds import run_fold
from srifty.validate.results import REGIMES, SplitResult, group_cells, regime_of

if TYPE_CHECKING:  # pragma: no cover
    from srifty.catalog import Catalog

SPLIT = "lomo-1gpu, CPU timeline"


@dataclass
class TimelineCheck:
    model: str
    cpu_profile: str  # the directory of the model's CPU profiles
    taken: SplitResult  # the held-out runs as srifty predicts them (the CPU's ready times set aside on GPUs)
    as_recorded: SplitResult  # ... and with the CPU's ready times taken as they were recorded

    def cells(self) -> dict[str, dict[str, float]]:
        """Per way of taking the timeline: rows, MAPE %, signed median % (negative: too fast), share
        inside the interval %, and that share over the communication-bound rows (:func:`group_cells`,
        as the accuracy page's tables pool them)."""
        import numpy as np

        out = {}
        for name, r in (("taken", self.taken), ("as_recorded", self.as_recorded)):
            (whole,) = group_cells([r], lambda f: np.zeros(f.n, dtype=int), ["all"])
            comm = next((c for c in group_cells([r], regime_of, [label for label, _ in REGIMES])
                         if c["group"] == REGIMES[-1][0]), None)
            out[name] = {"rows": whole["rows"], "mape": whole["model_mape"], "signed": whole["model_signed_median"],
                         "inside": whole["inside_interval"] * 100, "comm_rows": comm["rows"] if comm else 0,
                         "comm_inside": comm["inside_interval"] * 100 if comm else float("nan")}
        return out


def with_cpu_timeline(view: JobProfile, cpu: JobProfile) -> JobProfile:
    """``view`` with the gradient buckets, their ready times (and the device they were recorded
    on) and backward's share of ``cpu``, a CPU profile of the same model."""
    return replace(view, bucket_bytes=cpu.bucket_bytes, ready_fractions=cpu.ready_fractions,
                   ready_device=cpu.ready_device, backward_fraction=cpu.backward_fraction)


def validate_cpu_timeline(jobs: Sequence[JobProfile], catalog: "Catalog", cpu_dir: str | Path, quick: bool = False,
                          collectives: Sequence[CollectivePoint] = (), allreduce: Sequence[AllreduceRow] = (),
                          progress: Callable[[str], None] | None = None) -> list[TimelineCheck]:
    """For each of ``jobs`` (one corpus) with multi-GPU runs and a CPU profile that recorded its
    ready times under ``cpu_dir``/<model>: its :class:`TimelineCheck`."""
    say = progress or (lambda _: None)
    checks = []
    for held in jobs:
        path = Path(cpu_dir) / held.model
        if not path.is_dir() or not any(r.world_size >= 2 for r in held.runs):
            continue
        cpu = load_corpus([str(path)])[0]
        if cpu.ready_fractions is None or cpu.ready_device != "cpu":
            continue
        say(f"cpu-timeline: holding out {held.model}, with its CPU profile's gradient timeline")
        view = with_cpu_timeline(held.restricted(lambda r: r.world_size == 1), cpu)
        others = [j for j in jobs if j is not held]
        folds = [run_fold(SPLIT, held.model, others, [held], {held.model: v}, lambda j, r: r.world_size >= 2, None,
                          catalog, quick, collectives, allreduce)
                 for v in (view, replace(view, ready_device=None))]  # no device stated: taken as recorded
        if folds[0] is not None and folds[1] is not None:
            checks.append(TimelineCheck(held.model, str(path), folds[0], folds[1]))
    return checks


def timeline_summary(checks: Sequence[TimelineCheck]) -> list[dict[str, Any]]:
    """``srifty validate --json``'s figures of the check, one entry per model."""
    return [{"model": c.model, **c.cells()} for c in checks]


def render_cpu_timeline(checks: Sequence[TimelineCheck]) -> str:
    if not checks:
        return ""
    lines = ["", "## A CPU profile's gradient timeline on a GPU cluster", "",
             "A profile recorded on a CPU states when each gradient bucket became ready during backward; a GPU runs "
             "backward's layers at other relative speeds. Each Pollux model is held out as in `lomo-1gpu` (known by "
             "its single-GPU runs; the residual trains on the other models), given the buckets, ready times and "
             "backward share of its CPU profile (profiles/cpu, examples/pollux_models.py), and its multi-GPU runs are "
             "predicted twice: as srifty takes such a profile on GPUs (DDP's usual overlap over the recorded buckets, "
             "the interval reaching the step with none of the allreduce hidden; `overlap_source` "
             "`recorded-on-cpu`), and with the CPU's ready times taken as they were recorded. Signed: the median of "
             "predicted over measured, less 1 (negative: too fast); inside: the share of rows inside the 5–95% "
             "interval, and of the communication-bound ones (>40% beyond compute).", "",
             "| model | rows | as srifty takes it: MAPE % | signed % | inside % | communication-bound inside % "
             "| CPU's ready times as recorded: MAPE % | signed % | inside % | communication-bound inside % |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in checks:
        got = c.cells()
        row = [c.model, str(got["taken"]["rows"])]
        for name in ("taken", "as_recorded"):
            g = got[name]
            comm = f"{g['comm_inside']:.0f} ({g['comm_rows']} rows)" if g["comm_rows"] else "–"
            row += [f"{g['mape']:.1f}", f"{g['signed']:+.1f}", f"{g['inside']:.0f}", comm]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"

"""When an imported trace's gradients become ready, read off its measured sync times.

A profile srifty recorded carries DDP's buckets and the time each became ready during backward.
An imported trace (Pollux, a user's CSV) states step times and, per multi-worker run, the time
the step spent synchronising gradients beyond its compute (``sync_ms``: the exposed
communication). The simulator then lets the buckets become ready evenly over backward
(``simulate.DEFAULT_BACKWARD_FRACTION`` of the compute), and backward hides most of a large
allreduce. A run that hides little (Pollux's deepspeech2 on T4s hides none, though on a CPU its
gradients become ready evenly over backward) says so in its measured sync times: they stay near
the whole allreduce while the default hides it.

:func:`fit_overlap` simulates the job's multi-worker runs with sync times at each window of
:data:`OVERLAP_WINDOWS` (the share of the compute at whose end the buckets become ready, evenly
over it) and keeps the one whose exposed communication is closest to the measured sync times
(median absolute log error, with 1 ms added to both so that a fully hidden allreduce counts).
:func:`with_fitted_overlap` applies it only where the default misses the measured sync times by
more than ×2 (median; ``DEFAULT_MISS``) and the window misses them by at least a quarter less
(``MARGIN``). A smaller miss of the default could be the link's speed, which the network fit
owns, and a window a few per cent better is the noise of the runs.

A trace of step times only reads the same way where it has single-worker runs of the type
(:func:`derived_sync`): a multi-worker run's step less the single-worker step at its batch is
what data parallelism added to the compute, the exposed communication with whatever else it
costs, which the thresholds above leave to the network fit and the residual unless the default
misses it by more than ×2.

A trace that states no gradient size (no ``param_count`` or ``grad_bytes``) gets one the same way
(:func:`estimate_gradient_size`): its single-node multi-worker runs with a stated sync time are
simulated at every size of :data:`GRADIENT_SIZE_GRID` and every window, with the ring inside one
node that the simulator gives them, and the size of the pair closest to the sync times is kept,
marked as estimated. Where backward hides the allreduce, the sync times hardly depend on the size
and the estimate says little; where it does not, they are the allreduce itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence, TypeVar

from srifty import simulate
from srifty.features.builder import FeatureBuilder
from srifty.features.curve import ComputeCurve
from srifty.features.job import JobProfile, Run, run_config
from srifty.features.links import LinkScale

if TYPE_CHECKING:
    from srifty.catalog import Catalog

T = TypeVar("T")

OVERLAP_WINDOWS = (0.05, 0.1, 0.2, 0.33, 0.5, simulate.DEFAULT_BACKWARD_FRACTION, 0.85, 1.0)
MAX_OVERLAP_RUNS = 150  # runs simulated per window (a seeded sample beyond it)
SYNC_FLOOR_MS = 1.0  # added to the simulated and the measured exposed time before their ratio
# the gradient sizes an estimate from sync times tries (bytes): 1 MB to 4.1 GB, a quarter octave apart
GRADIENT_SIZE_GRID = tuple(int(1e6 * 2 ** (k / 4)) for k in range(49))
DEFAULT_MISS = 2.0  # the default window must miss the sync times by more than this factor (median) ...
MARGIN = 0.25  # ... and a window by this share less than the default, to replace it


@dataclass(frozen=True)
class OverlapFit:
    """The overlap window that best explains a job's measured sync times."""

    window: float
    error: float  # median |log((simulated exposed + 1 ms) / (measured sync + 1 ms))| at ``window``
    default_error: float  # the same at simulate.DEFAULT_BACKWARD_FRACTION
    runs: int  # multi-worker runs with sync times simulated
    derived: int = 0  # of them, runs whose sync time is their step less the single-worker step (derived_sync)

    @property
    def applies(self) -> bool:
        """Whether the default misses the measured sync times by more than DEFAULT_MISS and
        ``window`` is another, MARGIN closer to them."""
        return self.default_error > math.log(DEFAULT_MISS) and self.window != simulate.DEFAULT_BACKWARD_FRACTION

    @property
    def default_kept_because(self) -> str:
        """Why the default window stays, where it does (said in the prediction's note)."""
        if self.default_error <= math.log(DEFAULT_MISS):
            return f"within x{DEFAULT_MISS:g}, which the link's speed can explain"
        return f"but no other window comes {MARGIN:.0%} closer"


@dataclass(frozen=True)
class GradientSizeFit:
    """The gradient size that best explains a job's single-node sync times."""

    grad_bytes: int
    window: float  # the overlap window it was simulated with
    error: float  # median |log((simulated exposed + 1 ms) / (measured sync + 1 ms))|
    runs: int  # single-node multi-worker runs with a stated sync time


def derived_sync(job: JobProfile) -> dict[int, float]:
    """Sync times of the job's multi-worker runs that state none, by index in ``job.runs``: the
    run's step less its type's single-worker step at its batch (measured there, or interpolated
    between measured batches), which is what data parallelism added to the compute. Runs mixing
    types, and runs of a type without a single-worker run whose batches reach theirs, get none."""
    singles: dict[str, list[tuple[float, float]]] = {}
    for r in job.runs:
        if r.world_size == 1 and not r.mixed:
            singles.setdefault(r.instance_type, []).append((r.local_batch_size, r.step_ms))
    curves = {t: ComputeCurve.from_points(pts) for t, pts in singles.items()}
    out = {}
    for i, r in enumerate(job.runs):
        curve = curves.get(r.instance_type)
        if (r.world_size > 1 and r.sync_ms is None and not r.mixed and curve is not None
                and curve.covers(r.local_batch_size)):
            out[i] = max(r.step_ms - curve.at(r.local_batch_size), 0.0)
    return out


def _at_most(items: list[T], n: int) -> list[T]:
    """``items``, or a seeded sample of ``n`` of them (in their order) where there are more."""
    if len(items) <= n:
        return items
    import numpy as np

    return [items[i] for i in sorted(np.random.default_rng(0).choice(len(items), n, replace=False))]


def sync_runs(job: JobProfile) -> tuple[list[Run], int]:
    """The multi-worker runs with a sync time that an overlap fit simulates: each run's measured
    sync time, else its :func:`derived_sync` (a seeded sample of MAX_OVERLAP_RUNS beyond that many);
    and how many of them have a derived one."""
    derived = derived_sync(job)
    runs = [(r, False) if i not in derived else (replace(r, sync_ms=derived[i]), True)
            for i, r in enumerate(job.runs)
            if r.world_size > 1 and (r.sync_ms is not None or i in derived) and r.step_ms > 0]
    runs = _at_most(runs, MAX_OVERLAP_RUNS)
    return [r for r, _ in runs], sum(d for _, d in runs)


def sync_error(job: JobProfile, catalog: "Catalog", link_scale: LinkScale | None, window: float,
               runs: Sequence[Run] | None = None) -> float:
    """Median |log((simulated exposed + 1 ms) / (measured sync + 1 ms))| over ``runs`` (default:
    ``job``'s :func:`sync_runs`), its buckets ready evenly over the last ``window`` of the compute."""
    import numpy as np

    builder = FeatureBuilder(replace(job, backward_fraction=window), catalog, link_scale)
    logs = []
    for r in sync_runs(job)[0] if runs is None else runs:
        est = builder.estimate(run_config(r), r.local_batch_size)
        exposed = max(est.sim_ms - est.compute_ms, 0.0)
        logs.append(math.log((exposed + SYNC_FLOOR_MS) / (float(r.sync_ms) + SYNC_FLOOR_MS)))
    return float(np.median(np.abs(logs)))


def estimate_gradient_size(job: JobProfile, catalog: "Catalog",
                           link_scale: LinkScale | None) -> GradientSizeFit | None:
    """For a job that states no gradient size: the size of :data:`GRADIENT_SIZE_GRID` which, with
    the window of :data:`OVERLAP_WINDOWS` that suits it best (or the job's stated backward share),
    simulates its single-node multi-worker runs' stated sync times most closely
    (:func:`sync_error`; the smallest size and the default window among equals). None when the
    job states a size, or has no such run (sync times across nodes would tie the size to the
    network the fit is for)."""
    if job.grad_bytes or job.param_count:
        return None
    runs = [r for r in job.runs
            if r.nodes == 1 and r.world_size > 1 and not r.mixed and r.sync_ms is not None and r.step_ms > 0]
    if not runs:
        return None
    runs = _at_most(runs, MAX_OVERLAP_RUNS)
    default_window = simulate.DEFAULT_BACKWARD_FRACTION
    windows = ((job.backward_fraction,) if job.backward_fraction is not None
               else (default_window,) + tuple(w for w in OVERLAP_WINDOWS if w != default_window))
    best: tuple[float, int, float] | None = None
    for w in windows:
        for size in GRADIENT_SIZE_GRID:
            err = sync_error(replace(job, grad_bytes=size), catalog, link_scale, w, runs)
            if best is None or err < best[0]:
                best = (err, size, w)
    assert best is not None
    return GradientSizeFit(best[1], best[2], best[0], len(runs))


def with_estimated_gradient_size(job: JobProfile, catalog: "Catalog", link_scale: LinkScale | None) -> JobProfile:
    """``job`` with the gradient size its single-node sync times show (:func:`estimate_gradient_size`),
    marked as estimated (``grad_bytes_estimated``), where it states none and has such runs; otherwise
    ``job`` itself."""
    fit = estimate_gradient_size(job, catalog, link_scale)
    return job if fit is None else replace(job, grad_bytes=fit.grad_bytes, grad_bytes_estimated=True)


def fit_overlap(job: JobProfile, catalog: "Catalog", link_scale: LinkScale | None) -> OverlapFit | None:
    """The window of :data:`OVERLAP_WINDOWS` whose simulated exposed communication best matches
    ``job``'s measured sync times (:func:`sync_error`) by MARGIN over the default's, else the
    default. None when the job records its ready times or states its backward share, when its
    gradient size is unknown, or when no multi-worker run has a sync time, stated or derived."""
    if job.ready_fractions is not None or job.backward_fraction is not None:
        return None
    runs, derived = sync_runs(job)
    if not (job.grad_bytes or job.param_count) or not runs:
        return None
    default_window = simulate.DEFAULT_BACKWARD_FRACTION
    errors = {w: sync_error(job, catalog, link_scale, w, runs) for w in OVERLAP_WINDOWS}
    better = [w for w in OVERLAP_WINDOWS if errors[w] < errors[default_window] * (1.0 - MARGIN)]
    best = min(better, key=lambda w: errors[w]) if better else default_window
    return OverlapFit(best, errors[best], errors[default_window], len(runs), derived)


def with_fitted_overlap(job: JobProfile, catalog: "Catalog", link_scale: LinkScale | None,
                        estimate_size: bool = True) -> JobProfile:
    """``job`` with the overlap window its sync times show (:func:`fit_overlap`) where the default
    cannot explain them (:attr:`OverlapFit.applies`), else with that read as ``overlap_check``, and
    (``estimate_size``) the gradient size they show where it states none
    (:func:`with_estimated_gradient_size`); ``job`` itself where nothing could be read."""
    if estimate_size:
        job = with_estimated_gradient_size(job, catalog, link_scale)
    fit = fit_overlap(job, catalog, link_scale)
    if fit is None:
        return job
    if not fit.applies:
        return replace(job, overlap_check=fit)
    return replace(job, backward_fraction=fit.window, overlap_fit=fit)

"""The learned latency model: a calibrated simulator plus a gradient-boosted residual.

1. :class:`CommModel` fits how much of the catalog's link bandwidth DDP achieves (and a
   latency multiplier) on measured multi-worker runs whose gradient size is known: a grid
   search minimising the median absolute log error of the simulator on those runs.
2. :class:`LatencyModel` (scikit-learn estimator contract) predicts log(measured / simulated)
   with a HistGradientBoostingRegressor on the features of :mod:`srifty.features`, and
   quantile models (loss='quantile') give an interval.
3. :class:`Predictor` bundles both with the training metadata and answers predictions for
   a job; :func:`save` / :func:`load` persist it with ``skops.io`` (never pickle): loading
   builds only the exact types of MODEL_FILE_TYPES (srifty.safe_skops).
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from srifty import __version__, safe_skops
from srifty.comm import CommModel, measured_allreduce
from srifty.configspec import ClusterConfig
from srifty.errors import SriftyError
from srifty.features import (FEATURES, LOOSE_PROFILE_CI, REGIME_FEATURES, RESIDUAL_FEATURES, AllreduceRow,
                             CollectivePoint, FeatureBuilder, JobProfile, LinkScale, RowEstimate, Run, run_config)

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd

    from srifty.catalog import Catalog
    from srifty.gpuspeed import TransferError

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = ("profiles/pollux", "profiles/lambda", "profiles/emulated")
SHIPPED_MODEL = Path(__file__).resolve().parent / "data" / "latency-model.skops"  # `make model` writes it
TREND_ALPHA = 1.0  # HuberRegressor's L2 penalty on the log(nodes) slope of the residual
EXTRAPOLATION_WIDEN = 2.0  # interval half-width (in log space) multiplier outside the training range


class ModelError(SriftyError):
    """A latency model that cannot be trained, loaded or used as asked."""


# --------------------------------------------------------------------------- training rows


@dataclass
class Table:
    """Feature rows of measured multi-worker runs, with targets and groups for validation."""

    X: "pd.DataFrame"
    y_ms: "np.ndarray"
    model: list[str]
    runs: list[Run]


def table_for(jobs: Sequence[JobProfile], catalog: "Catalog", link_scale: LinkScale | None = None,
              keep: Any = None, min_world: int = 2, views: dict[str, JobProfile] | None = None) -> Table:
    """Rows for every run of ``jobs`` with ``min_world`` or more workers (and ``keep(job, run)``).

    ``views`` maps a model to the (restricted) profile the features may read — in validation,
    what the predictor is allowed to know about a held-out model.
    """
    import numpy as np
    import pandas as pd

    frames, ys, models, runs = [], [], [], []
    for job in jobs:
        chosen = [r for r in job.runs if r.world_size >= min_world and (keep is None or keep(job, r))]
        if not chosen:
            continue
        fb = FeatureBuilder((views or {}).get(job.model, job), catalog, link_scale)
        frames.append(fb.frame([(run_config(r), r.local_batch_size) for r in chosen]))
        ys.extend(r.step_ms for r in chosen)
        models.extend([job.model] * len(chosen))
        runs.extend(chosen)
    if not frames:
        return Table(pd.DataFrame(columns=FEATURES + ["sim_ms", "compute_ms"]), np.array([]), [], [])
    return Table(pd.concat(frames, ignore_index=True), np.array(ys, dtype=float), models, runs)



# --------------------------------------------------------------------------- the estimator


MIN_RESIDUAL_ROWS = 10  # fewer rows of a regime than this: no residual model for it (the simulator alone)
NO_RESIDUAL_HALF_WIDTH = 0.15  # log-space interval half-width without a residual model (about ±15%)
SHRINK_GRID = tuple(i / 10 for i in range(11))  # shares of the learned residual tried on held-out groups
REGIMES = ("real", "emulated")


@dataclass
class ResidualPart:
    """The residual model of one regime: centre and quantile estimators, and the feature range seen."""

    model: Any
    lower: Any
    upper: Any
    feature_min: "np.ndarray"
    feature_max: "np.ndarray"
    n_rows: int
    # 5% / 95% quantiles of the log error on groups (models) held out of the fit: how wrong the
    # centre is on a model it never saw (None: fitted without groups, or fewer than 2 of them)
    held_out_error: tuple[float, float] | None = None
    # lowest / highest log(measured / compute alone) over the multi-worker training runs: how
    # much slower than its own compute a data-parallel run of this regime has been. It bounds
    # the interval of a row whose gradient size is unknown (communication not simulated).
    multi_worker_slowdown: tuple[float, float] | None = None
    # how much of the learned residual to apply (0..1): chosen on the same held-out groups, where
    # a residual learned from the other models helps a model it never saw only in part
    shrink: float = 1.0
    # (intercept, slope) of the residual's trend in log(nodes), fitted before the trees, which
    # then model what is left: trees are flat beyond the largest cluster seen, the trend is not
    trend: tuple[float, float] = (0.0, 0.0)


class LatencyModel:
    """Iteration time = simulator × exp(learned residual); quantile models give an interval.

    ``fit(X, y)``: X is a feature table from :class:`srifty.features.FeatureBuilder` (the
    FEATURES columns plus ``sim_ms``), y the measured iteration times in ms.

    Real clusters and emulated hosts are separate regimes (the ``emulated`` column): each gets
    its own residual model, fitted on its own rows only, because what the simulator misses on
    GPUs over EC2 networks says nothing about CPU-throttled hosts over shaped links. A regime
    with fewer than MIN_RESIDUAL_ROWS rows gets none: its prediction is the simulator's.
    """

    def __init__(self, max_iter: int = 200, learning_rate: float = 0.05, max_leaf_nodes: int = 15,
                 min_samples_leaf: int = 20, l2_regularization: float = 1.0,
                 quantiles: tuple[float, float] = (0.05, 0.95), random_state: int = 0) -> None:
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.quantiles = quantiles
        self.random_state = random_state

    @staticmethod
    def _log_nodes(A: "np.ndarray") -> "np.ndarray":
        """log(nodes) of residual-feature rows (the "nodes" column of either regime's features)."""
        import numpy as np

        return np.log(np.maximum(A[:, RESIDUAL_FEATURES.index("nodes")], 1.0))

    def _fit_trend(self, A: "np.ndarray", r: "np.ndarray") -> tuple[float, float]:
        """A robust line through the residual against log(nodes) (HuberRegressor; (0, 0) when
        every row has one node count, so that there is no slope to learn).

        The slope is never negative: the simulator already carries how the allreduce scales
        with the cluster, and what a larger cluster adds beyond it (contention in the shared
        network, more stragglers to wait for) only slows a step. A falling line through clusters
        of a few nodes (the traces' 2-node rows are their slowest) would predict a larger cluster
        faster than its own ring; a flat one (the residual's robust centre) is kept instead."""
        import numpy as np
        from sklearn.linear_model import HuberRegressor

        x = self._log_nodes(A)
        if np.ptp(x) == 0:
            return 0.0, 0.0
        line = HuberRegressor(alpha=TREND_ALPHA).fit(x[:, None], r)
        if line.coef_[0] < 0:
            flat = HuberRegressor(alpha=0.0, fit_intercept=False).fit(np.ones((len(r), 1)), r)
            return float(flat.coef_[0]), 0.0
        return float(line.intercept_), float(line.coef_[0])

    def _trend(self, A: "np.ndarray", trend: tuple[float, float]) -> "np.ndarray":
        return trend[0] + trend[1] * self._log_nodes(A)

    def _detrend(self, A: "np.ndarray", r: "np.ndarray") -> tuple[tuple[float, float], "np.ndarray"]:
        """The log(nodes) line through the residual ``r`` and what it leaves for the trees."""
        trend = self._fit_trend(A, r)
        return trend, r - self._trend(A, trend)

    def _hgb(self, **kw: Any) -> Any:
        from sklearn.ensemble import HistGradientBoostingRegressor

        return HistGradientBoostingRegressor(
            max_iter=self.max_iter, learning_rate=self.learning_rate, max_leaf_nodes=self.max_leaf_nodes,
            min_samples_leaf=self.min_samples_leaf, l2_regularization=self.l2_regularization,
            random_state=self.random_state, **kw)

    def _check_X(self, X: "pd.DataFrame", fitting: bool = False) -> "np.ndarray":
        import numpy as np

        missing = [c for c in FEATURES + ["sim_ms"] if c not in getattr(X, "columns", [])]
        if missing:
            raise ModelError(f"X lacks the feature column(s) {', '.join(missing)}; "
                             f"LatencyModel is expecting {len(FEATURES)} features plus sim_ms.",
                             "Build X with srifty.features.FeatureBuilder.frame().")
        if not fitting:
            self._check_fitted()
        return np.asarray(X[RESIDUAL_FEATURES], dtype=float)

    @staticmethod
    def _A(X: "pd.DataFrame", name: str, mask: "np.ndarray") -> "np.ndarray":
        import numpy as np

        return np.asarray(X.loc[mask, REGIME_FEATURES[name]] if mask is not None else X[REGIME_FEATURES[name]],
                          dtype=float)

    @staticmethod
    def _regime(X: "pd.DataFrame") -> "np.ndarray":
        import numpy as np

        return np.where(np.asarray(X["emulated"], dtype=float) > 0.5, 1, 0)

    def _check_fitted(self) -> None:
        if not hasattr(self, "parts_"):
            raise ModelError("This LatencyModel is not fitted yet.", "Call fit(X, y) first (or `srifty fit`).")

    def fit(self, X: "pd.DataFrame", y: Sequence[float], groups: Sequence[str] | None = None) -> "LatencyModel":
        """``groups``: the model (job) of each row. When given, each regime's interval is also
        calibrated on held-out groups: every group in turn is predicted by a centre model fitted
        on the others, and the 5%/95% quantiles of those errors bound the interval
        (:meth:`predict_interval`), because the quantile models, fitted on the training models'
        own rows, are too narrow for a model never seen."""
        import numpy as np

        A = self._check_X(X, fitting=True)
        y = np.asarray(y, dtype=float)
        if len(y) != len(A):
            raise ModelError(f"X has {len(A)} rows but y has {len(y)}.")
        if len(y) < MIN_RESIDUAL_ROWS:
            raise ModelError(f"Too few measured multi-worker runs to fit on ({len(y)}; at least "
                             f"{MIN_RESIDUAL_ROWS} needed).",
                             "Add profiles with several workers (srifty import, or srifty profile on a cluster).")
        if np.any(~np.isfinite(y)) or np.any(y <= 0):
            raise ModelError("y must hold positive, finite iteration times (ms).")
        r = np.log(y / np.asarray(X["sim_ms"], dtype=float))
        reg = self._regime(X)
        self.feature_names_in_ = np.array(RESIDUAL_FEATURES, dtype=object)
        self.n_features_in_ = len(RESIDUAL_FEATURES)
        self.parts_: dict[str, ResidualPart | None] = {}
        for i, name in enumerate(REGIMES):
            m = reg == i
            if not m.any():
                continue
            if m.sum() < MIN_RESIDUAL_ROWS:
                self.parts_[name] = None
                continue
            Ai, ri = self._A(X, name, m), r[m]
            finite = np.where(np.isfinite(Ai), Ai, np.nan)
            with np.errstate(all="ignore"):
                fmin, fmax = np.nanmin(finite, axis=0), np.nanmax(finite, axis=0)
            n = int(m.sum())
            held_out, shrink = self._held_out(Ai, ri, np.asarray(groups, dtype=object)[m]) \
                if groups is not None else (None, 1.0)
            trend, rest = self._detrend(Ai, ri)
            self.parts_[name] = ResidualPart(
                self._hgb().fit(Ai, rest), self._hgb(loss="quantile", quantile=self.quantiles[0]).fit(Ai, rest),
                self._hgb(loss="quantile", quantile=self.quantiles[1]).fit(Ai, rest), fmin, fmax, n, held_out,
                self._slowdown(X, y, m), shrink, trend)
        self.n_rows_ = len(y)
        return self

    def _slowdown(self, X: "pd.DataFrame", y: "np.ndarray", mask: "np.ndarray") -> tuple[float, float] | None:
        """(lowest, highest) log(measured / compute alone) over the rows of ``mask`` with several
        workers (None without a ``compute_ms`` column or such rows). The whole range, not its 5/95%
        quantiles: it bounds a model whose gradient size is unknown, which may sit anywhere in it
        or past it, and quantiles pooled over rows understate how far models differ (Pollux ncf held
        out: 36% of its rows fell inside the quantiles of the other three models)."""
        import numpy as np

        if "compute_ms" not in getattr(X, "columns", []):
            return None
        compute = np.asarray(X["compute_ms"], dtype=float)
        multi = mask & (np.asarray(X["world_size"], dtype=float) > 1) & np.isfinite(compute) & (compute > 0)
        if not multi.any():
            return None
        r = np.log(y[multi] / compute[multi])
        return float(np.min(r)), float(np.max(r))

    def _held_out(self, A: "np.ndarray", r: "np.ndarray", groups: "np.ndarray") -> tuple[tuple[float, float] | None, float]:
        """Each group predicted by a centre model fitted on the others: the share of the residual
        to apply (SHRINK_GRID value with the least mean absolute error per group, groups weighted
        equally) and the 5%/95% quantiles of the log errors with it. ((None, 1.0) with fewer than
        2 groups or too few rows outside one.)"""
        import numpy as np

        names = sorted(set(groups))
        if len(names) < 2:
            return None, 1.0
        pred = np.empty(len(r))
        for g in names:
            test = groups == g
            if (~test).sum() < MIN_RESIDUAL_ROWS:
                return None, 1.0
            trend, rest = self._detrend(A[~test], r[~test])
            pred[test] = self._trend(A[test], trend) + self._hgb().fit(A[~test], rest).predict(A[test])

        def error(k: float) -> float:
            return float(np.mean([np.mean(np.abs(np.expm1(r[groups == g] - k * pred[groups == g]))) for g in names]))

        shrink = min(SHRINK_GRID, key=error)
        err = r - shrink * pred
        return (float(np.quantile(err, self.quantiles[0])), float(np.quantile(err, self.quantiles[1]))), shrink

    def _each(self, X: "pd.DataFrame") -> list[tuple[str, "np.ndarray", ResidualPart | None]]:
        """(regime, row mask, its part) for the regimes present in X."""
        reg = self._regime(X)
        return [(name, reg == i, self.parts_.get(name)) for i, name in enumerate(REGIMES) if (reg == i).any()]

    def residual(self, X: "pd.DataFrame") -> "np.ndarray":
        """Predicted log(measured / simulated) per row (0 where the regime has no residual model)."""
        import numpy as np

        A = self._check_X(X)
        out = np.zeros(len(A))
        for name, m, part in self._each(X):
            if part is not None:
                Am = self._A(X, name, m)
                out[m] = part.shrink * (self._trend(Am, part.trend) + part.model.predict(Am))
        return out

    def predict(self, X: "pd.DataFrame") -> "np.ndarray":
        """Predicted iteration time (ms) for every row of X."""
        import numpy as np

        return np.asarray(X["sim_ms"], dtype=float) * np.exp(self.residual(X))

    def out_of_range(self, X: "pd.DataFrame") -> list[list[str]]:
        """For each row, the features outside the range its regime saw in training."""
        import numpy as np

        A = self._check_X(X)
        out: list[list[str]] = [[] for _ in range(len(A))]
        for name, m, part in self._each(X):
            idx = np.nonzero(m)[0]
            if part is None:
                for i in idx:
                    out[i] = [f"regime '{name}' (too few training runs for a residual model)"]
                continue
            Am = self._A(X, name, m)
            with np.errstate(invalid="ignore"):
                low = (Am < part.feature_min - 1e-9) & np.isfinite(Am)
                high = (Am > part.feature_max + 1e-9) & np.isfinite(Am)
            for k, i in enumerate(idx):
                out[i] = [REGIME_FEATURES[name][j] for j in np.nonzero(low[k] | high[k])[0]]
        return out

    @staticmethod
    def communication_unknown(X: "pd.DataFrame") -> "np.ndarray":
        """Rows with several workers whose gradient size is unknown (their communication is not
        simulated, so the simulator's figure is compute alone)."""
        import numpy as np

        return ~np.isfinite(np.asarray(X["log_grad_mb"], dtype=float)) & (np.asarray(X["world_size"], dtype=float) > 1)

    def predict_interval(self, X: "pd.DataFrame") -> tuple["np.ndarray", "np.ndarray"]:
        """(low, high) ms: the quantile models, widened outside the training range."""
        import numpy as np

        self._check_X(X)  # raises on a table that is not the model's
        center = self.residual(X)
        lo, hi = center - NO_RESIDUAL_HALF_WIDTH, center + NO_RESIDUAL_HALF_WIDTH
        for name, m, part in self._each(X):
            if part is not None:
                Am = self._A(X, name, m)
                trend = self._trend(Am, part.trend)
                lo[m] = np.minimum(trend + part.lower.predict(Am), center[m])
                hi[m] = np.maximum(trend + part.upper.predict(Am), center[m])
                if part.held_out_error is not None:  # no narrower than the error on unseen models
                    lo[m] = np.minimum(lo[m], center[m] + part.held_out_error[0])
                    hi[m] = np.maximum(hi[m], center[m] + part.held_out_error[1])
                blind = m & self.communication_unknown(X)
                if part.multi_worker_slowdown is not None and blind.any():
                    # no gradient size, so sim_ms is the compute alone: anywhere from there to
                    # the slowdowns the training corpus's multi-worker runs reached
                    lo[blind] = np.minimum(lo[blind], part.multi_worker_slowdown[0])
                    hi[blind] = np.maximum(hi[blind], part.multi_worker_slowdown[1])
        # one worker on a profiled type: the estimate is the type's compute curve (Predictor.predict,
        # ModelOracle), no residual, so none of the residual's interval: only the curve's own
        # bounds below. A transferred one keeps the residual's widened interval: the transfer
        # spread was measured between GPUs, and a CPU-profiled job carried to a GPU misses further
        transferred = np.asarray(X["transferred"], dtype=float) > 0
        # a step from the operator model carries its own interval (batch_low/high), measured on GPUs
        by_operators = np.asarray(X["by_operators"], dtype=float) > 0 if "by_operators" in X.columns \
            else np.zeros(len(X), dtype=bool)
        single = (np.asarray(X["world_size"], dtype=float) == 1) & (~transferred | by_operators)
        center, lo, hi = (np.where(single, 0.0, a) for a in (center, lo, hi))
        outside = np.array([bool(x) for x in self.out_of_range(X)]) & ~single
        widen = np.where(outside, EXTRAPOLATION_WIDEN, 1.0)
        lo = center - (center - lo) * widen - np.where(outside, 0.1, 0.0)
        hi = center + (hi - center) * widen + np.where(outside, 0.1, 0.0)
        spread = gpu_transfer_error()
        moved = transferred & ~by_operators & (np.asarray(X["emulated"], dtype=float) == 0)
        if spread is not None and moved.any():
            # compute carried to a GPU nobody profiled misses by as much as measured transfers did
            # (srifty.gpuspeed.TransferError), independently of the residual's error: in quadrature
            lo = np.where(moved, center - np.hypot(center - lo, min(spread.q05, 0.0)), lo)
            hi = np.where(moved, center + np.hypot(hi - center, max(spread.q95, 0.0)), hi)
        sim = np.asarray(X["sim_ms"], dtype=float)
        low, high = sim * np.exp(lo), sim * np.exp(hi)
        if "batch_low" in X.columns:
            # the compute could be anywhere within its bounds at this batch (ComputeCurve.bounds: a
            # point where measured, narrow where interpolated, wide outside the profiled batches),
            # taken on the whole predicted step
            pred = sim * np.exp(center)
            low = np.minimum(low, pred * np.asarray(X["batch_low"], dtype=float))
            high = np.maximum(high, pred * np.asarray(X["batch_high"], dtype=float))
        return low, high


# --------------------------------------------------------------------------- the predictor


@dataclass
class Prediction:
    config: str
    local_batch_size: int
    iteration_ms: float
    interval_ms: tuple[float, float]
    throughput_samples_per_s: float
    source: str  # measured | predicted | transferred
    warnings: list[str] = field(default_factory=list)
    parts: dict[str, Any] = field(default_factory=dict)  # PredictionTable.parts: compute, communication, sources

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["interval_ms"] = [round(self.interval_ms[0], 4), round(self.interval_ms[1], 4)]
        d["iteration_ms"] = round(self.iteration_ms, 4)
        d["throughput_samples_per_s"] = round(self.throughput_samples_per_s, 4)
        return d


def corpus_hash(jobs: Sequence[JobProfile]) -> str:
    h = hashlib.sha256()
    for j in sorted(jobs, key=lambda j: j.model):
        h.update(json.dumps([j.model, j.param_count, j.grad_bytes,
                             [(r.instance_type, r.workers_per_node, r.local_batch_size, r.step_ms) for r in j.runs]],
                            default=str).encode())
    return h.hexdigest()


def allreduce_hash(rows: Sequence[AllreduceRow]) -> str:
    return hashlib.sha256(json.dumps([asdict(r) for r in rows]).encode()).hexdigest()


def library_versions() -> dict[str, str]:
    import numpy
    import sklearn

    out = {"python": platform.python_version(), "numpy": numpy.__version__, "scikit-learn": sklearn.__version__,
           "srifty": __version__}
    try:
        import skops

        out["skops"] = skops.__version__
    except ImportError:  # pragma: no cover
        pass
    return out


class Predictor:
    """A trained latency model (communication + residual) ready to answer predictions."""

    def __init__(self, latency: LatencyModel, link_scale: LinkScale, meta: dict[str, Any]) -> None:
        self.latency = latency
        self.link_scale = link_scale
        self.meta = meta

    @classmethod
    def train(cls, jobs: Sequence[JobProfile], catalog: "Catalog", quick: bool = False,
              cv_score: dict[str, Any] | None = None, collectives: Sequence[CollectivePoint] = (),
              allreduce: Sequence[AllreduceRow] | None = None) -> "Predictor":
        """``allreduce``: measured allreduces for the NVLink/EFA efficiencies (default: the
        shipped nccl-tests rows, :func:`measured_allreduce`)."""
        if not jobs:
            raise ModelError("The training corpus holds no training profiles.",
                             "Give profile files or directories (e.g. profiles/pollux), or import a trace first.")
        if allreduce is None:
            allreduce = measured_allreduce()[0]
        comm = CommModel(max_rows=250 if quick else 600).fit(jobs, catalog, collectives, allreduce)
        table = table_for(jobs, catalog, comm.link_scale_)
        latency = LatencyModel(max_iter=120 if quick else 200).fit(table.X, table.y_ms, groups=table.model)
        meta = {
            "data_sha256": corpus_hash(jobs), "models": [j.model for j in jobs],
            "instance_types": sorted({t for j in jobs for t in j.instance_types}),
            # the types whose TCP network (runs across nodes) and PCIe (several workers on a node)
            # the fitted link efficiencies have seen: srifty.model.network_source
            "multi_node_types": sorted({r.instance_type for j in jobs for r in j.runs
                                        if len(r.workers_per_node) > 1 and not r.mixed}),
            "multi_worker_node_types": sorted({r.instance_type for j in jobs for r in j.runs
                                               if max(r.workers_per_node) > 1 and not r.mixed}),
            "rows": len(table.y_ms), "max_nodes": int(table.X["nodes"].max()),
            "residual_rows": {k: (v.n_rows if v is not None else 0) for k, v in latency.parts_.items()},
            "comm_rows": comm.n_rows_, "comm_median_abs_log_error": comm.score_,
            "sweep_points": comm.n_sweep_points_, "allreduce_rows": comm.n_allreduce_rows_,
            "allreduce_sha256": allreduce_hash(allreduce),
            "link_scale": asdict(comm.link_scale_), "code_version": __version__, "libraries": library_versions(),
            "cv": cv_score or {},
        }
        return cls(latency, comm.link_scale_, meta)

    def builder(self, job: JobProfile, catalog: "Catalog") -> FeatureBuilder:
        return FeatureBuilder(job, catalog, self.link_scale)

    def in_placement_group(self, on: bool = True) -> "Predictor":
        """This predictor for nodes in a cluster placement group (LinkScale.placement_group: each
        TCP flow carries 10 Gbit/s, not 5); itself when ``on`` is false."""
        return Predictor(self.latency, replace(self.link_scale, placement_group=True), self.meta) if on else self

    def predict(self, job: JobProfile, catalog: "Catalog", rows: Sequence[tuple[ClusterConfig, int]]) -> list[Prediction]:
        """Predictions for (resolved configuration, per-worker batch) rows, with each row's warnings
        (:func:`predict_table` gives the figures)."""
        import numpy as np

        table = predict_table(self, self.builder(job, catalog), rows)
        out = []
        for i, (config, b) in enumerate(rows):
            est = table.estimates[i]
            it = float(table.iteration_ms[i])
            if not np.isfinite(it):
                raise ModelError(f"No estimate for {config.format()} at batch {b}.")
            warnings = list(est.notes)
            if table.source[i] == "measured":
                warnings = [w for w in warnings if w not in est.loose_notes]
                ci = table.measured_rel_ci[i]
                if ci > LOOSE_PROFILE_CI:
                    warnings.append(f"measured to ±{ci:.0%} only (95% CI): the interval is that CI")
            elif table.out_of_range[i] and (config.world_size > 1 or est.transferred):
                warnings.append("far outside the training data (" + ", ".join(table.out_of_range[i]) +
                                "): the interval is widened; treat the figure as a rough estimate")
            out.append(Prediction(config.format(), int(b), it, (float(table.low_ms[i]), float(table.high_ms[i])),
                                  config.world_size * b / (it / 1e3), str(table.source[i]), warnings,
                                  table.parts(i)))
        return out


@dataclass
class PredictionTable:
    """Predictions for many rows at once (:func:`predict_table`), one entry per row."""

    iteration_ms: "np.ndarray"
    low_ms: "np.ndarray"
    high_ms: "np.ndarray"
    source: "np.ndarray"  # measured | predicted | transferred
    measured_rel_ci: "np.ndarray"  # the measured run's own 95% CI (0 where not measured)
    features: "pd.DataFrame"  # the builder's feature table (sim_ms, compute_ms, batch bounds included)
    estimates: list[RowEstimate]
    out_of_range: list[list[str]]  # the features far outside the training data, per row
    compute_source: "np.ndarray"  # COMPUTE_SOURCES: where the row's compute comes from
    network_source: "np.ndarray"  # NETWORK_SOURCES: where its communication comes from

    def parts(self, i: int) -> dict[str, Any]:
        """Row ``i``'s step split into the slowest worker's compute alone and the rest (exposed
        communication and what else data parallelism costs), with where each came from."""
        compute = float(self.features["compute_ms"].iloc[i])
        return {"compute_ms": round(compute, 4), "compute_source": str(self.compute_source[i]),
                "communication_ms": round(max(float(self.iteration_ms[i]) - compute, 0.0), 4),
                "network_source": str(self.network_source[i])}


# Where a prediction's compute comes from: the profile's own run of this configuration; the type's
# profile at this per-worker batch; the type's profile at other batches (interpolated, or
# extrapolated with bounds); another type's profile, carried over by device specs.
COMPUTE_SOURCES = ("measured", "profiled", "profiled-other-batch", "transferred")
# Where its communication comes from: nothing to communicate (one worker); nothing known (no
# gradient size); the profile's own run; emulated links fitted on allreduce sweeps; link
# efficiencies fitted on runs or nccl-tests of these instance types; or a prior: the catalog's
# link figures with efficiencies fitted on other types.
NETWORK_SOURCES = ("none", "unknown", "measured", "emulated-sweeps", "fitted-on-type", "prior")


def fitted_link_types(predictor: "Predictor | None", link_scale: LinkScale) -> dict[str, frozenset[str]]:
    """Per kind of link within a node, the instance types whose efficiency for it was fitted on
    their own measurements: PCIe on several workers on a node (the model's corpus), NVLink on
    nccl-tests (``link_scale.fast_links``). Networks between nodes: LinkScale.network_measured."""
    meta = predictor.meta if predictor is not None else {}
    return {"pcie": frozenset(meta.get("multi_worker_node_types", ())),
            "nvlink": frozenset(t for t, *_ in link_scale.fast_links)}


def network_source(builder: FeatureBuilder, config: ClusterConfig, fitted: dict[str, frozenset[str]]) -> str:
    """Where the communication of ``config`` (resolved) comes from (NETWORK_SOURCES, less
    "measured", which the caller knows). ``fitted``: :func:`fitted_link_types`."""
    if config.world_size == 1:
        return "none"
    if not builder.grad_bytes:
        return "unknown"
    hws = [builder.hardware(g.instance_type) for g in config.groups]
    if all(h.emulated for h in hws):
        return "emulated-sweeps"
    if config.nodes > 1:  # the network between nodes: measured on these types (LinkScale) or a prior
        return "fitted-on-type" if all(builder.link_scale.network_measured(h) for h in hws) else "prior"
    mine = all(g.instance_type in fitted.get(h.intra_kind, frozenset()) for g, h in zip(config.groups, hws))
    return "fitted-on-type" if mine else "prior"


def predict_table(predictor: "Predictor | None", builder: FeatureBuilder,
                  rows: Sequence[tuple[ClusterConfig, float]]) -> PredictionTable:
    """The one prediction path: every command's figures come from here.

    Rows are (resolved configuration, per-worker batch). A row the profile measured gets that
    run's step time and its own 95% CI; one worker gets the compute curve itself (its interval
    stretched to hold it); others get the latency model (``predictor``) over the simulator, or,
    with ``predictor`` None, the simulator alone (the interval is then the point). A loose
    profile's uncertainty widens every interval built on it. The model runs once over all rows.
    """
    import numpy as np

    estimates = [builder.row_estimate(config, b) for config, b in rows]
    X = builder.frame_of(estimates)
    sim = X["sim_ms"].to_numpy(dtype=float)
    if predictor is not None:
        it = np.asarray(predictor.latency.predict(X), dtype=float)
        lo, hi = (np.asarray(a, dtype=float) for a in predictor.latency.predict_interval(X))
        out_of_range = predictor.latency.out_of_range(X)
    else:
        it, lo, hi = sim.copy(), sim.copy(), sim.copy()
        out_of_range = [[] for _ in rows]
    it = np.where(X["world_size"].to_numpy(dtype=float) == 1, sim, it)  # one worker: the compute curve
    alone = (X["world_size"].to_numpy(dtype=float) == 1) & (X["by_operators"].to_numpy(dtype=float) > 0)
    # one worker from the operator model: no residual, so the residual's training range says nothing
    out_of_range = [[] if alone[i] else names for i, names in enumerate(out_of_range)]
    widen = np.array([e.compute_rel_ci for e in estimates], dtype=float)
    lo, hi = np.minimum(lo, it) * (1 - widen), np.maximum(hi, it) * (1 + widen)
    source = np.where(X["transferred"].to_numpy() > 0.5, "transferred", "predicted").astype(object)
    measured_ci = np.zeros(len(rows))
    fitted = fitted_link_types(predictor, builder.link_scale)
    compute_source = np.array([
        "transferred" if e.transferred else "profiled" if e.batch_bounds == (1.0, 1.0) else "profiled-other-batch"
        for e in estimates], dtype=object)
    net_source = np.array([network_source(builder, config, fitted) for config, _ in rows], dtype=object)
    for i, (config, b) in enumerate(rows):
        run = builder.job.measured_run(config, int(b)) if float(b).is_integer() else None
        if run is not None:  # measured: the point, and the run's own CI
            ci = measured_ci[i] = builder.job.measured_rel_ci(run)
            it[i], lo[i], hi[i], source[i] = run.step_ms, run.step_ms * (1 - ci), run.step_ms * (1 + ci), "measured"
            compute_source[i] = "measured"
            net_source[i] = "measured" if config.world_size > 1 else "none"
    return PredictionTable(it, lo, hi, source, measured_ci, X, estimates, out_of_range, compute_source, net_source)


# --------------------------------------------------------------------------- persistence


_NUMPY_SCALARS = ("bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                  "float32", "float64")
# The exact (skops loader, type) pairs a saved latency model holds: scikit-learn's gradient-boosted
# trees and their losses, numpy arrays and the containers around them. Nothing else is built on load.
MODEL_FILE_TYPES: safe_skops.AllowList = frozenset({
    *safe_skops.pairs("JsonNode", ("builtins.str", "builtins.int", "builtins.float", "builtins.bool",
                                   "builtins.NoneType")),
    *safe_skops.pairs("TypeNode", ("builtins.str", "builtins.int", "builtins.float")),
    ("DictNode", "builtins.dict"), ("ListNode", "builtins.list"), ("TupleNode", "builtins.tuple"),
    *safe_skops.pairs("NdArrayNode", ("numpy.ndarray", *(f"numpy.{t}" for t in _NUMPY_SCALARS))),
    *safe_skops.pairs("NumpyScalarNode", (f"numpy.{t}" for t in _NUMPY_SCALARS)),
    ("RandomGeneratorNode", "numpy.random._generator.Generator"),
    *safe_skops.pairs("LossNode", ("sklearn._loss._loss.CyHalfSquaredError", "sklearn._loss._loss.CyPinballLoss")),
    *safe_skops.pairs("ObjectNode", (
        "sklearn._loss.link.IdentityLink", "sklearn._loss.link.Interval", "sklearn._loss.loss.HalfSquaredError",
        "sklearn._loss.loss.PinballLoss", "sklearn.ensemble._hist_gradient_boosting.binning._BinMapper",
        "sklearn.ensemble._hist_gradient_boosting.gradient_boosting.HistGradientBoostingRegressor",
        "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor")),
})


def save(predictor: Predictor, path: str | Path) -> None:
    """Write the predictor with skops (no pickle): estimators plus JSON metadata."""

    lm = predictor.latency
    state: dict[str, Any] = {
        "format": "srifty-latency-model", "version": 2,
        "meta_json": json.dumps({**predictor.meta, "link_scale": asdict(predictor.link_scale),
                                 "params": {k: getattr(lm, k) for k in ("max_iter", "learning_rate", "max_leaf_nodes",
                                                                        "min_samples_leaf", "l2_regularization",
                                                                        "random_state")},
                                 "quantiles": list(lm.quantiles), "n_rows": lm.n_rows_,
                                 "regimes": {k: (v.n_rows if v is not None else None) for k, v in lm.parts_.items()},
                                 "held_out_error": {k: v.held_out_error for k, v in lm.parts_.items() if v is not None},
                                 "multi_worker_slowdown": {k: v.multi_worker_slowdown for k, v in lm.parts_.items()
                                                           if v is not None},
                                 "shrink": {k: v.shrink for k, v in lm.parts_.items() if v is not None},
                                 "trend": {k: v.trend for k, v in lm.parts_.items() if v is not None}}),
    }
    for name, part in lm.parts_.items():
        if part is not None:
            state.update({f"{name}_model": part.model, f"{name}_lower": part.lower, f"{name}_upper": part.upper,
                          f"{name}_feature_min": part.feature_min, f"{name}_feature_max": part.feature_max})
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    safe_skops.dump(state, tmp, MODEL_FILE_TYPES)
    card = {"data_sha256": predictor.meta.get("data_sha256"), "features": list(RESIDUAL_FEATURES),
            "revision": MODEL_REVISION,
            "allreduce_sha256": predictor.meta.get("allreduce_sha256"),
            "libraries": predictor.meta.get("libraries", {}), "rows": predictor.meta.get("rows")}
    card_tmp = card_path(target).with_name(f".{card_path(target).name}.tmp")
    card_tmp.write_text(json.dumps(card, indent=1) + "\n")
    tmp.replace(target)
    card_tmp.replace(card_path(target))


def card_path(model_path: str | Path) -> Path:
    """The small JSON written beside a model file: what it was trained on, with which libraries."""
    p = Path(model_path)
    return p.with_name(p.stem + ".card.json")


def read_card(model_path: str | Path) -> dict[str, Any] | None:
    try:
        card = json.loads(card_path(model_path).read_text())
    except (OSError, ValueError):
        return None
    return card if isinstance(card, dict) else None


def installed_versions() -> dict[str, str]:
    """Versions of the libraries a saved model depends on, read without importing them."""
    from importlib import metadata

    out = {}
    for name in ("scikit-learn", "skops", "numpy"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:  # pragma: no cover
            pass
    return out


# The version of what a trained model answers, besides its corpus. Raise it with any change to
# the features, the simulator, the model or the GPU data it reads that moves a prediction:
# the golden-prediction test (tests/test_golden.py) fails until it is raised, the shipped model
# re-fitted and the golden predictions written again (`make model`). A saved or cached model
# whose card names another revision is stale. Edits that move no prediction (a comment, a
# rename) change nothing.
MODEL_REVISION = 3

# The code and data the predictions depend on besides the model file: recommend's on-disk cache of
# predictions is keyed by their bytes (srifty.oracle.PREDICTION_CODE).
MODEL_CODE = tuple(Path(__file__).resolve().parent / f
                   for f in ("features/builder.py", "features/hardware.py", "features/job.py", "features/links.py",
                             "features/measured.py", "simulate.py", "model.py", "opmodel.py", "data/gpu_step_model.json",
                             "data/gpu_specs.csv",
                             "data/gpu_speed_corrections.csv", "data/gpu_transfer_error.json"))


@lru_cache(maxsize=1)
def gpu_transfer_error() -> "TransferError | None":
    """How far GPU-to-GPU compute transfers have missed (srifty/data/gpu_transfer_error.json,
    `make gpu-speed`); None without the file."""
    from srifty.catalog import DATA_DIR, TRANSFER_ERROR_JSON
    from srifty.gpuspeed import read_transfer_error

    return read_transfer_error(DATA_DIR / TRANSFER_ERROR_JSON)


def card_is_current(card: dict[str, Any] | None, data_sha256: str | None = None) -> bool:
    """True when a model with this card loads and answers as if trained here and now: same
    feature list and MODEL_REVISION, same scikit-learn/skops/numpy versions, and (when given)
    the same corpus."""
    if not card or card.get("features") != list(RESIDUAL_FEATURES) or card.get("revision") != MODEL_REVISION:
        return False
    libs = card.get("libraries") or {}
    if any(libs.get(k) != v for k, v in installed_versions().items()):
        return False
    return data_sha256 is None or card.get("data_sha256") == data_sha256


def shipped_model() -> Path | None:
    """The model trained on the shipped corpus and shipped with srifty, when this installation
    can load it exactly (same library versions); else None and the caller trains one."""
    if SHIPPED_MODEL.exists() and card_is_current(read_card(SHIPPED_MODEL)):
        return SHIPPED_MODEL
    return None


def load(path: str | Path) -> Predictor:
    """Load a predictor written by :func:`save`, building only the types in MODEL_FILE_TYPES."""
    import numpy as np

    p = Path(path)
    try:
        state = safe_skops.load(p, MODEL_FILE_TYPES)
    except safe_skops.UntrustedModelFile as exc:
        raise ModelError(exc.message, exc.hint) from None
    if not isinstance(state, dict) or state.get("format") != "srifty-latency-model":
        raise ModelError(f"{p} is not a srifty latency model.", "Write one with `srifty fit --out MODEL`.")
    meta = json.loads(state["meta_json"])
    params = meta.pop("params")
    lm = LatencyModel(quantiles=tuple(meta.pop("quantiles")), **params)
    if state.get("version") != 2:
        raise ModelError(f"{p} was written by an older srifty (model format {state.get('version')}).",
                         "Refit it with `srifty fit --out MODEL`.")
    lm.parts_ = {}
    held_out = meta.pop("held_out_error", {})
    slowdown = meta.pop("multi_worker_slowdown", {})
    shrink = meta.pop("shrink", {})
    trend = meta.pop("trend", {})
    for name, n_rows in meta.pop("regimes").items():
        err, slow = held_out.get(name), slowdown.get(name)
        lm.parts_[name] = None if n_rows is None else ResidualPart(
            state[f"{name}_model"], state[f"{name}_lower"], state[f"{name}_upper"],
            np.asarray(state[f"{name}_feature_min"]), np.asarray(state[f"{name}_feature_max"]), int(n_rows),
            tuple(err) if err else None, tuple(slow) if slow else None, float(shrink.get(name, 1.0)),
            tuple(trend.get(name, (0.0, 0.0))))
    lm.feature_names_in_ = np.array(RESIDUAL_FEATURES, dtype=object)
    lm.n_features_in_ = len(RESIDUAL_FEATURES)
    lm.n_rows_ = meta.pop("n_rows")
    link = dict(meta["link_scale"])
    link["fast_links"] = tuple(tuple(x) for x in link.get("fast_links", ()))
    link["emulated_goodput_by_mbit"] = tuple(tuple(x) for x in link.get("emulated_goodput_by_mbit", ()))
    link["emulated_mixed_ring"] = tuple(link.get("emulated_mixed_ring", (1.0, 1.0)))
    link["tcp_links"] = tuple(tuple(x) for x in link.get("tcp_links", ()))
    return Predictor(lm, LinkScale(**link), meta)


def corpus_paths(extra: Sequence[str] = ()) -> list[str]:
    """The given corpus paths, or the shipped ones that exist (profiles/pollux, profiles/lambda, profiles/emulated)."""
    if extra:
        return list(extra)
    return [str(ROOT / p) for p in DEFAULT_CORPUS if (ROOT / p).exists() and any((ROOT / p).rglob("*.json"))]


def emulated_catalog_path() -> Path:
    return ROOT / "configs" / "emulated.yaml"


def catalog_for_jobs(jobs: Sequence[JobProfile], catalog: "Catalog | None" = None) -> "Catalog":
    """The EC2 catalog, joined with the emulated one when a job ran on emulated hosts."""
    from srifty.catalog import Catalog

    cat = catalog or Catalog.default()
    types = {t for j in jobs for t in j.instance_types}
    if any(t.startswith("emu.") for t in types) and emulated_catalog_path().exists():
        return CombinedCatalog(cat, Catalog.from_emulated_spec(emulated_catalog_path()))
    return cat


class CombinedCatalog:
    """Two catalogs answered as one (EC2 types first, then emulated)."""

    def __init__(self, first: "Catalog", second: "Catalog") -> None:
        self.first, self.second = first, second

    def has(self, name: str) -> bool:
        return self.first.has(name) or self.second.has(name)

    def get(self, name: str) -> Any:
        for catalog in (self.first, self.second):
            if catalog.has(name):
                return catalog.get(name)
        from srifty.catalog import did_you_mean

        known = list(self.first.df["instance_type"]) + list(self.second.df["instance_type"])
        raise SriftyError(f"Unknown instance type {name!r}.{did_you_mean(name, known)}",
                          "To see what the catalog has: srifty catalog list.")

    def gpu_spec(self, gpu_name: str) -> Any:
        return self.first.gpu_spec(gpu_name)

    @property
    def speed_corrections(self) -> list[Any]:
        return self.first.speed_corrections

    def with_speed_corrections(self, corrections: Sequence[Any]) -> "CombinedCatalog":
        return CombinedCatalog(self.first.with_speed_corrections(corrections), self.second)

    @property
    def warnings(self) -> list[str]:
        return self.first.warnings


@lru_cache(maxsize=4)
def _default_predictor_cached(paths: tuple[str, ...], quick: bool) -> tuple[Predictor, Any]:
    from srifty.features import load_allreduce_rows, load_collectives, load_corpus

    jobs = load_corpus(list(paths))
    cat = catalog_for_jobs(jobs)
    return Predictor.train(jobs, cat, quick=quick, collectives=load_collectives(list(paths)),
                           allreduce=measured_allreduce()[0] + load_allreduce_rows(list(paths))), cat


def default_predictor(paths: Sequence[str] = (), quick: bool = False) -> Predictor:
    """Trained on the shipped corpus (retrained on load, cached in this process)."""
    found = tuple(corpus_paths(paths))
    if not found:
        raise ModelError("No training corpus found (profiles/pollux is shipped with srifty).",
                         "Give corpus paths, or run `srifty import data/traces/pollux_g4dn12xlarge.import.csv "
                         "--out profiles/pollux`.")
    return _default_predictor_cached(found, quick)[0]



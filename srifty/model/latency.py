"""The learned residual over the simulator, and its calibrated intervals.

:class:`LatencyModel` (scikit-learn estimator contract) predicts log(measured / simulated) with
a HistGradientBoostingRegressor on the features of :mod:`srifty.features`, one
:class:`srifty.model.residual.ResidualPart` per regime (real clusters, emulated hosts); quantile
models (loss='quantile'), widened by the error on held-out models and outside the training range,
give an interval. The fitted trees are kept as arrays (:class:`srifty.trees.TreeEnsemble`, which
predicts exactly what the estimator does), so that a loaded model needs no scikit-learn.
:class:`ModelError` is the model's one error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from srifty.errors import SriftyError
from srifty.features import FEATURES, REGIME_FEATURES, RESIDUAL_FEATURES
from srifty.model.residual import (BIN_MIN_HALF_WIDTH, EXPOSED_SHARE_EDGES, MIN_BIN_ROWS, REPEAT_SCATTER, HeldOut,
                                   ResidualPart, compute_share, flagged, gpu_transfer_error, share_bin)
from srifty.trees import TreeEnsemble

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd

    from srifty.model.table import Table

TREND_ALPHA = 1.0  # HuberRegressor's L2 penalty on the log(nodes) slope of the residual
EXTRAPOLATION_WIDEN = 2.0  # interval half-width (in log space) multiplier outside the training range
# outside the training range in these alone, a row's interval is not widened: the residual's trend in
# log(nodes) carries the residual beyond the largest cluster seen (ResidualPart.trend), where trees are flat
TREND_FEATURES = ("nodes",)


class ModelError(SriftyError):
    """A latency model that cannot be trained, loaded or used as asked."""


MIN_RESIDUAL_ROWS = 10  # fewer rows of a regime than this: no residual model for it (the simulator alone)
NO_RESIDUAL_HALF_WIDTH = 0.15  # log-space interval half-width without a residual model (about ±15%)
UNCALIBRATED_NOTE = (
    "the latency model's interval was not calibrated on a model it never saw: its corpus has runs of one model "
    "in this regime, so the interval comes from that model's own runs (at most their node counts held out of "
    "the fit in turn) and may be too narrow for another; fit it on the runs of two or more models (`srifty fit`)")
SHRINK_GRID = tuple(i / 10 for i in range(11))  # shares of the learned residual tried on held-out groups
REGIMES = ("real", "emulated")


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

    def fit(self, X: "pd.DataFrame", y: Sequence[float], groups: Sequence[str] | None = None,
            unread: "Table | None" = None) -> "LatencyModel":
        """``groups``: the model (job) of each row. When given, each regime's interval is also
        calibrated on held-out groups: every group in turn is predicted by a centre model fitted
        on the others, and the 5%/95% quantiles of those errors bound the interval
        (:meth:`predict_interval`), because the quantile models, fitted on the training models'
        own rows, are too narrow for a model never seen. ``unread``: the same runs with every
        overlap read off sync times back at the default (srifty.model.unread_overlap_table); rows
        whose overlap was neither recorded nor read (the table's ``overlap_unknown``) are
        calibrated on it the same way, since a model nobody read misses as the training models
        did unread."""
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
        if unread is not None and groups is not None:
            X_unread, y_unread, groups_unread = unread.X, unread.y_ms, unread.model
            r_unread = np.log(np.asarray(y_unread, dtype=float) / np.asarray(X_unread["sim_ms"], dtype=float))
            reg_unread = self._regime(X_unread)
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
            held, held_by = HeldOut(), "models"
            if groups is not None:
                by = np.asarray(groups, dtype=object)[m]
                if len(set(by)) < 2:
                    # one model: nothing measures how far another misses, but how far the fit
                    # misses a cluster size it did not see is measured by holding each out
                    held_by, by = "node counts", np.asarray(Ai[:, RESIDUAL_FEATURES.index("nodes")], dtype=object)
                mu = reg_unread == i if unread is not None and held_by == "models" else None
                held = self._held_out(
                    (Ai, ri, by, compute_share(X)[m]),
                    None if mu is None else (self._A(X_unread, name, mu), r_unread[mu],
                                             np.asarray(groups_unread, dtype=object)[mu],
                                             compute_share(X_unread)[mu]))
            trend, rest = self._detrend(Ai, ri)
            # kept as arrays (srifty.trees): the estimators' own predictions, without scikit-learn
            centre, lower, upper = (TreeEnsemble.from_estimator(e.fit(Ai, rest)) for e in (
                self._hgb(), self._hgb(loss="quantile", quantile=self.quantiles[0]),
                self._hgb(loss="quantile", quantile=self.quantiles[1])))
            self.parts_[name] = ResidualPart(centre, lower, upper, fmin, fmax, n, held.error, self._slowdown(X, y, m),
                                             held.shrink, trend, held_by, held.error_unread, held.by_share,
                                             held.unread_by_share)
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

    def _held_out(self, rows: "tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]",
                  unread: "tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None" = None) -> "HeldOut":
        """Each group predicted by a centre model fitted on the others: the share of the residual
        to apply (SHRINK_GRID value with the least mean absolute error per group, groups weighted
        equally) and, with it, the lowest 5% and the highest 95% quantile of any one group's log
        errors, over all its rows and per bin of their predicted share beyond compute (groups with
        at least MIN_BIN_ROWS rows in the bin, when two or more have). Each held-out model misses
        in its own direction, so quantiles pooled over the rows (the large models' rows, mostly)
        understate how far a new model can miss (docs/latency-model.md, "Errors on models never
        seen"). ``rows`` and ``unread``: (A, r, groups, compute share) of the runs, and of the same
        runs as a model whose overlap nobody read would see them; each group's rows there are
        predicted by the same centre model. (An empty HeldOut with fewer than 2 groups or too few
        rows outside one.)"""
        import numpy as np

        A, r, groups, share = rows
        names = sorted(set(groups))
        if len(names) < 2:
            return HeldOut()
        pred = np.empty(len(r))
        A_u, r_u, groups_u, share_u = unread if unread is not None else (A[:0], r[:0], groups[:0], share[:0])
        pred_u = np.zeros(len(r_u))
        for g in names:
            test, test_u = groups == g, groups_u == g
            if (~test).sum() < MIN_RESIDUAL_ROWS:
                return HeldOut()
            trend, rest = self._detrend(A[~test], r[~test])
            centre = self._hgb().fit(A[~test], rest)
            pred[test] = self._trend(A[test], trend) + centre.predict(A[test])
            if test_u.any():
                pred_u[test_u] = self._trend(A_u[test_u], trend) + centre.predict(A_u[test_u])

        def error(k: float) -> float:
            return float(np.mean([np.mean(np.abs(np.expm1(r[groups == g] - k * pred[groups == g]))) for g in names]))

        def bounds(err: "np.ndarray", by: "np.ndarray", least: int = 1, groups_needed: int = 1
                   ) -> tuple[float, float] | None:
            present = [g for g in names if (by == g).sum() >= least]
            if len(present) < groups_needed:
                return None
            return (min(float(np.quantile(err[by == g], self.quantiles[0])) for g in present),
                    max(float(np.quantile(err[by == g], self.quantiles[1])) for g in present))

        def by_share(err: "np.ndarray", by: "np.ndarray", bins: "np.ndarray"
                     ) -> tuple[tuple[float, float] | None, ...]:
            return tuple(bounds(err[bins == b], by[bins == b], MIN_BIN_ROWS, 2)
                         for b in range(len(EXPOSED_SHARE_EDGES) + 1))

        shrink = min(SHRINK_GRID, key=error)
        err, err_u = r - shrink * pred, r_u - shrink * pred_u
        has_unread = unread is not None and len(r_u) > 0
        return HeldOut(bounds(err, groups), shrink, bounds(err_u, groups_u) if has_unread else None,
                       by_share(err, groups, share_bin(share, shrink * pred)),
                       by_share(err_u, groups_u, share_bin(share_u, shrink * pred_u)) if has_unread else None)

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

    def predict(self, X: "pd.DataFrame", residual: "np.ndarray | None" = None) -> "np.ndarray":
        """Predicted iteration time (ms) for every row of X (``residual``: :meth:`residual` of X,
        where the caller has it)."""
        import numpy as np

        return np.asarray(X["sim_ms"], dtype=float) * np.exp(self.residual(X) if residual is None else residual)

    def out_of_range(self, X: "pd.DataFrame") -> list[list[str]]:
        """For each row, the features outside the range its regime saw in training; ``transferred``
        not where the compute came from the same GPU (the table's same_gpu_transfer): no training row is
        transferred, so the residual does not read it, and such a compute carries no ratio's error."""
        import numpy as np

        A = self._check_X(X)
        same_gpu = flagged(X, "same_gpu_transfer")
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
                names = [REGIME_FEATURES[name][j] for j in np.nonzero(low[k] | high[k])[0]]
                out[i] = [f for f in names if not (same_gpu[i] and f == "transferred")]
        return out

    def uncalibrated_regimes(self) -> list[str]:
        """The regimes whose interval could not be calibrated on models held out (:meth:`fit`'s
        ``groups``): their training rows come from one model (calibrated, at most, on its node
        counts held out), or too few are left outside one."""
        self._check_fitted()
        return [name for name, part in self.parts_.items()
                if part is not None and (part.held_out_error is None or part.held_out_groups != "models")]

    def uncalibrated(self, X: "pd.DataFrame") -> "np.ndarray":
        """Rows with several workers in a regime of :meth:`uncalibrated_regimes`: their interval is
        the training model's own quantiles, likely too narrow for a model never seen."""
        import numpy as np

        out = np.zeros(len(X), dtype=bool)
        names = set(self.uncalibrated_regimes())
        for name, m, _ in self._each(X):
            if name in names:
                out |= m
        return out & (np.asarray(X["world_size"], dtype=float) > 1)

    @staticmethod
    def communication_unknown(X: "pd.DataFrame") -> "np.ndarray":
        """Rows with several workers whose gradient size is unknown (their communication is not
        simulated, so the simulator's figure is compute alone)."""
        import numpy as np

        return ~np.isfinite(np.asarray(X["log_grad_mb"], dtype=float)) & (np.asarray(X["world_size"], dtype=float) > 1)

    def held_out_bounds(self, X: "pd.DataFrame", residual: "np.ndarray | None" = None,
                        unread: bool = True) -> "np.ndarray":
        """(low, high) log error per row that the interval spans at least about the centre: how far
        the centre missed groups held out of the fit (ResidualPart.held_out_error), in the row's bin
        of predicted share beyond compute (no narrower there than ±BIN_MIN_HALF_WIDTH, the scatter
        of repeated measurements) or pooled where its bin has none or its compute is unknown; the
        unread variant for a row whose overlap nobody read (``unread``: False, the read one for every
        row). NaN where the row's regime has none. ``residual``: :meth:`residual` of X, where the
        caller has it."""
        import numpy as np

        self._check_X(X)
        out = np.full((len(X), 2), np.nan)
        bins = share_bin(compute_share(X), self.residual(X) if residual is None else residual)
        unread_rows = flagged(X, "overlap_unknown") & unread
        for _, m, part in self._each(X):
            if part is None or part.held_out_error is None:
                continue
            for rows, pooled, by_share in ((m, part.held_out_error, part.held_out_error_by_share),
                                           (m & unread_rows, part.held_out_error_unread,
                                            part.held_out_error_unread_by_share)):
                if pooled is None:
                    continue
                out[rows] = pooled
                for b, bound in enumerate(by_share or ()):
                    if bound is not None:
                        out[rows & (bins == b)] = (min(bound[0], -BIN_MIN_HALF_WIDTH),
                                                   max(bound[1], BIN_MIN_HALF_WIDTH))
        return out

    def predict_interval(self, X: "pd.DataFrame", residual: "np.ndarray | None" = None,
                         outside: list[list[str]] | None = None) -> tuple["np.ndarray", "np.ndarray"]:
        """(low, high) ms: the quantile models, widened outside the training range. ``residual``
        and ``outside``: :meth:`residual` and :meth:`out_of_range` of X, where the caller has them."""
        import numpy as np

        self._check_X(X)  # raises on a table that is not the model's
        center = self.residual(X) if residual is None else np.array(residual, dtype=float)
        # no narrower than the error on unseen models: each row's (the unread one where nobody read
        # its overlap), and the read one, which the step's bounds below complete for such a row
        unread = flagged(X, "overlap_unknown")
        held_out = self.held_out_bounds(X, center)
        held_read = self.held_out_bounds(X, center, unread=False) if unread.any() else held_out
        # the upper end twice (row 0 with each row's held-out error, row 1 with the read one)
        lo, hi = center - NO_RESIDUAL_HALF_WIDTH, np.vstack([center, center]) + NO_RESIDUAL_HALF_WIDTH
        for name, m, part in self._each(X):
            if part is not None:
                Am = self._A(X, name, m)
                trend = self._trend(Am, part.trend)
                lo[m] = np.minimum(trend + part.lower.predict(Am), center[m])
                hi[:, m] = np.maximum(trend + part.upper.predict(Am), center[m])
                if part.held_out_error is not None:
                    lo[m] = np.minimum(lo[m], center[m] + held_out[m, 0])
                    hi[:, m] = np.maximum(hi[:, m], center[m] + np.vstack([held_out[m, 1], held_read[m, 1]]))
                blind = m & self.communication_unknown(X)
                if part.multi_worker_slowdown is not None and blind.any():
                    # no gradient size, so sim_ms is the compute alone: anywhere from there to
                    # the slowdowns the training corpus's multi-worker runs reached
                    lo[blind] = np.minimum(lo[blind], part.multi_worker_slowdown[0])
                    hi[:, blind] = np.maximum(hi[:, blind], part.multi_worker_slowdown[1])
        # one worker on a profiled type: the estimate is the type's compute curve (Predictor.predict,
        # ModelOracle), no residual, so none of the residual's interval: only the curve's own
        # bounds below. A transferred one keeps the residual's widened interval: the transfer
        # spread was measured between GPUs, and a CPU-profiled job carried to a GPU misses further
        transferred = np.asarray(X["transferred"], dtype=float) > 0
        # a step from the operator model carries its own interval (batch_low/high), measured on GPUs
        by_operators = flagged(X, "by_operators")
        single = (np.asarray(X["world_size"], dtype=float) == 1) & (~transferred | by_operators)
        center, lo, hi = (np.where(single, 0.0, a) for a in (center, lo, hi))
        # compute from a type with the same GPU board is not carried by a speed ratio: none of a
        # transfer's spread below (nor is it outside the training range for it: out_of_range)
        same_gpu = flagged(X, "same_gpu_transfer")
        beyond = np.array([widens(x) for x in (self.out_of_range(X) if outside is None else outside)]) & ~single
        widen = np.where(beyond, EXTRAPOLATION_WIDEN, 1.0)
        lo = center - (center - lo) * widen - np.where(beyond, 0.1, 0.0)
        hi = center + (hi - center) * widen + np.where(beyond, 0.1, 0.0)
        spread = gpu_transfer_error()
        moved = transferred & ~by_operators & ~same_gpu & (np.asarray(X["emulated"], dtype=float) == 0)
        if spread is not None and moved.any():
            # compute carried to a GPU nobody profiled misses by as much as measured transfers did
            # (srifty.gpuspeed.TransferError): those with measured speed factors on both GPUs, or
            # by the spec ratio alone; independently of the residual's error: in quadrature
            by_spec = flagged(X, "spec_transfer")
            (spec_q05, spec_q95), (q05, q95) = spread.bounds(True), spread.bounds(False)
            q05, q95 = np.where(by_spec, spec_q05, q05), np.where(by_spec, spec_q95, q95)
            lo = np.where(moved, center - np.hypot(center - lo, np.minimum(q05, 0.0)), lo)
            hi = np.where(moved, center + np.hypot(hi - center, np.maximum(q95, 0.0)), hi)
        if "batch_low" in X.columns:
            # the step could be anywhere within its bounds (RowEstimate.step_bounds: the compute's
            # at this batch, ComputeCurve.bounds, a point where measured and wide outside the
            # profiled batches; a network nobody measured at half and twice its prior; the step
            # with none of the allreduce hidden where a profile does not say when its gradients are
            # ready), whatever the residual's error: in quadrature. Where nobody read the overlap the
            # unread held-out error already holds how far such a model's overlap missed, as the
            # reach to none of the allreduce hidden does: the wider of that error alone and the
            # read one with the step's bounds, not both (the one uncertainty counted twice). The
            # unread error alone reaches no further than the read one and all of the step's reach
            # added up: an overlap nobody read costs at most the whole allreduce exposed, and the
            # models whose unread error sets the bound are communication-heavy ones, whose reach is
            # longer than the row's own where little of its step is communication
            lo = center - np.hypot(center - lo, np.log(np.minimum(np.asarray(X["batch_low"], dtype=float), 1.0)))
            reach = np.log(np.maximum(np.asarray(X["batch_high"], dtype=float), 1.0))
            hi = np.vstack([center + np.hypot(hi[0] - center, reach),
                            np.maximum(np.minimum(hi[0], hi[1] + reach), center + np.hypot(hi[1] - center, reach))])
            hi = np.where(unread, hi[1], hi[0])
            # one worker off its profiled batches: the bounds hold for the true time; a measurement scatters about it
            moved = (np.asarray(X["batch_low"], dtype=float) < 1.0) | (np.asarray(X["batch_high"], dtype=float) > 1.0)
            scatter = np.where(single & ~transferred & moved, REPEAT_SCATTER, 0.0)
            lo, hi = lo - scatter, hi + scatter
        else:
            hi = hi[0]
        sim = np.asarray(X["sim_ms"], dtype=float)
        # a data-parallel step is never shorter than its slowest worker's compute alone: on a real
        # cluster, where that compute was measured on the type (not transferred), the interval starts
        # no lower than it (at the step's lower bound at this batch) less the scatter of repeated
        # measurements. Not on emulated hosts: their runs repeat to ~9% only (docs/REPEATABILITY.md)
        if "compute_ms" in X.columns:
            low_ratio = np.minimum(np.asarray(X["batch_low"], dtype=float), 1.0) if "batch_low" in X.columns else 1.0
            floor = np.log(np.asarray(X["compute_ms"], dtype=float) * low_ratio / sim) - REPEAT_SCATTER
            on_measured = ((np.asarray(X["world_size"], dtype=float) > 1) & ~transferred
                           & (np.asarray(X["emulated"], dtype=float) == 0))
            lo = np.where(on_measured, np.maximum(lo, np.minimum(floor, center)), lo)
        return sim * np.exp(lo), sim * np.exp(hi)


def widens(outside: Sequence[str]) -> bool:
    """Whether a row outside the training range in the features ``outside`` (a row of
    :meth:`LatencyModel.out_of_range`) has its interval widened: not where they are all
    TREND_FEATURES, which the residual's trend carries."""
    return any(f not in TREND_FEATURES for f in outside)

"""Fitted gradient-boosted trees as plain arrays: predicting and saving without scikit-learn.

srifty fits its residual models with scikit-learn's ``HistGradientBoostingRegressor``. What a
fitted one computes is small: a baseline plus, for each tree, the value of the leaf a row falls
in, a row going left at a node when its feature is at most the node's threshold (a missing value
goes where the node says). :class:`TreeEnsemble` holds exactly that, read from the fitted
estimator, and predicts with numpy alone, adding the trees in the estimator's own order so that
the figures are the estimator's to the last bit. A model file is then arrays and JSON
(``numpy.load(..., allow_pickle=False)``): nothing in it names code to run, and using it needs
no scikit-learn, whose import alone would be most of a first ``srifty recommend``.

This module sits at the bottom of srifty: it imports only numpy (lazily) and srifty.errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from srifty.errors import SriftyError

if TYPE_CHECKING:
    import numpy as np

# The per-node arrays of a tree, as scikit-learn's TreePredictor names them.
NODE_FIELDS = ("feature_idx", "num_threshold", "missing_go_to_left", "left", "right", "is_leaf", "value")


class UnsupportedEstimator(SriftyError):
    """An estimator :class:`TreeEnsemble` cannot represent exactly."""


@dataclass(frozen=True)
class TreeEnsemble:
    """A baseline and trees whose nodes are stored one after another (``tree_start[i]`` is the
    first node of tree i; child indices are within their tree)."""

    baseline: float
    n_features: int
    tree_start: "np.ndarray"  # int64, one per tree, plus the total node count at the end
    feature_idx: "np.ndarray"
    num_threshold: "np.ndarray"
    missing_go_to_left: "np.ndarray"
    left: "np.ndarray"
    right: "np.ndarray"
    is_leaf: "np.ndarray"
    value: "np.ndarray"

    @classmethod
    def from_estimator(cls, estimator: Any) -> "TreeEnsemble":
        """The trees of a fitted single-output ``HistGradientBoostingRegressor`` with numerical
        features only, whose loss predicts its raw score (squared error, quantile, absolute
        error); anything else is refused rather than approximated."""
        import numpy as np

        predictors = getattr(estimator, "_predictors", None)
        baseline = np.asarray(getattr(estimator, "_baseline_prediction", np.nan), dtype=float)
        if predictors is None or baseline.size != 1 or any(len(p) != 1 for p in predictors):
            raise UnsupportedEstimator(f"{type(estimator).__name__} is not a fitted single-output gradient-boosted "
                                       "tree regressor.", "Fit a HistGradientBoostingRegressor.")
        if getattr(estimator, "is_categorical_", None) is not None:
            raise UnsupportedEstimator("The estimator has categorical features, which TreeEnsemble does not "
                                       "represent.", "Fit it on numerical features only.")
        if getattr(estimator, "loss", "squared_error") not in ("squared_error", "quantile", "absolute_error"):
            raise UnsupportedEstimator(f"The estimator's loss {estimator.loss!r} maps its score through a link "
                                       "function, which TreeEnsemble does not apply.",
                                       "Use squared_error, quantile or absolute_error.")
        nodes = [p[0].nodes for p in predictors]
        sizes = np.array([0] + [len(n) for n in nodes], dtype=np.int64)
        if nodes:
            joined = np.concatenate(nodes)
            fields = {f: np.ascontiguousarray(joined[f]) for f in NODE_FIELDS}
        else:
            fields = {f: np.zeros(0) for f in NODE_FIELDS}
        return cls(float(baseline.ravel()[0]), int(estimator.n_features_in_), np.cumsum(sizes),
                   fields["feature_idx"].astype(np.int64), fields["num_threshold"].astype(float),
                   fields["missing_go_to_left"].astype(bool), fields["left"].astype(np.int64),
                   fields["right"].astype(np.int64), fields["is_leaf"].astype(bool), fields["value"].astype(float))

    @property
    def n_trees(self) -> int:
        return len(self.tree_start) - 1

    def predict(self, X: "np.ndarray") -> "np.ndarray":
        """The ensemble's prediction for each row of ``X`` (rows × n_features; NaN = missing)."""
        import numpy as np

        X = np.asarray(X, dtype=float)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(f"X has shape {X.shape}; this ensemble reads {self.n_features} features.")
        n = len(X)
        rows = np.arange(n)
        out = np.full(n, self.baseline)
        for t in range(self.n_trees):
            lo, hi = int(self.tree_start[t]), int(self.tree_start[t + 1])
            feature, threshold = self.feature_idx[lo:hi], self.num_threshold[lo:hi]
            missing_left, leaf = self.missing_go_to_left[lo:hi], self.is_leaf[lo:hi]
            left, right = self.left[lo:hi], self.right[lo:hi]
            node = np.zeros(n, dtype=np.int64)
            active = rows
            while True:
                at = node[active]
                inner = ~leaf[at]
                active, at = active[inner], at[inner]
                if not len(active):
                    break
                x = X[active, feature[at]]
                go_left = np.where(np.isnan(x), missing_left[at], x <= threshold[at])
                node[active] = np.where(go_left, left[at], right[at])
            out += self.value[lo:hi][node]  # tree by tree, in order: the estimator's own sums
        return out

    def arrays(self, prefix: str) -> dict[str, "np.ndarray"]:
        """The ensemble as named arrays (for ``numpy.savez``), every name starting with ``prefix``."""
        import numpy as np

        out = {f"{prefix}{f}": getattr(self, f) for f in NODE_FIELDS}
        out[f"{prefix}tree_start"] = self.tree_start
        out[f"{prefix}header"] = np.array([self.baseline, float(self.n_features)])
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, "np.ndarray"], prefix: str) -> "TreeEnsemble":
        """The ensemble :meth:`arrays` wrote under ``prefix``, checked for consistency (a damaged
        or hand-made file is refused, never indexed out of bounds)."""
        import numpy as np

        try:
            header = np.asarray(arrays[f"{prefix}header"], dtype=float)
            fields = {f: np.asarray(arrays[f"{prefix}{f}"]) for f in NODE_FIELDS}
            start = np.asarray(arrays[f"{prefix}tree_start"], dtype=np.int64)
        except KeyError as exc:
            raise UnsupportedEstimator(f"The model file lacks the array {exc.args[0]}.",
                                       "Write it again with `srifty fit --out MODEL`.") from None
        n_nodes = len(fields["value"])
        n_features = int(header[1]) if header.shape == (2,) else -1
        sizes = np.diff(start) if len(start) else np.zeros(0, dtype=np.int64)
        ok = (n_features > 0 and len(start) >= 1 and start[0] == 0 and start[-1] == n_nodes
              and (sizes > 0).all() and all(len(v) == n_nodes for v in fields.values()))
        if ok and n_nodes:
            # a child lies after its node and inside its tree: every walk ends at a leaf
            tree_size = np.repeat(sizes, sizes)
            local = np.arange(n_nodes) - np.repeat(start[:-1], sizes)
            inner = ~fields["is_leaf"].astype(bool)
            left, right, feature = fields["left"], fields["right"], fields["feature_idx"]
            ok = bool((((left > local) & (left < tree_size) & (right > local) & (right < tree_size)
                        & (feature >= 0) & (feature < n_features)) | ~inner).all())
        if not ok:
            raise UnsupportedEstimator(f"The trees under {prefix!r} in the model file are inconsistent "
                                       "(node counts or child indices out of range).",
                                       "Write the model again with `srifty fit --out MODEL`.")
        return cls(float(header[0]), n_features, start, fields["feature_idx"].astype(np.int64),
                   fields["num_threshold"].astype(float), fields["missing_go_to_left"].astype(bool),
                   fields["left"].astype(np.int64), fields["right"].astype(np.int64),
                   fields["is_leaf"].astype(bool), fields["value"].astype(float))

"""srifty.trees: a fitted HistGradientBoostingRegressor read into arrays predicts exactly what the
estimator predicts, saves to and loads from plain arrays, and a damaged file is refused."""

from __future__ import annotations

import io

import numpy as np
import pytest
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

from srifty.trees import TreeEnsemble, UnsupportedEstimator


def _data(n: int = 600, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    y = np.sin(X[:, 0]) + X[:, 1] * X[:, 2] + 0.1 * rng.normal(size=n)
    X[rng.random(X.shape) < 0.05] = np.nan  # missing values take each node's own direction
    return X, y


@pytest.mark.parametrize("kw", [{}, {"loss": "quantile", "quantile": 0.05}, {"loss": "quantile", "quantile": 0.95},
                                {"loss": "absolute_error", "max_leaf_nodes": 31}])
def test_predictions_are_the_estimators_to_the_bit(kw: dict) -> None:
    X, y = _data()
    est = HistGradientBoostingRegressor(max_iter=60, random_state=0, **kw).fit(X, y)
    trees = TreeEnsemble.from_estimator(est)
    X_new, _ = _data(2000, seed=1)
    X_new[:10] *= 100  # far outside the training range
    assert trees.n_trees == est.n_iter_
    np.testing.assert_array_equal(trees.predict(X_new), est.predict(X_new))


def test_saved_arrays_load_back_and_predict_the_same() -> None:
    X, y = _data()
    trees = TreeEnsemble.from_estimator(HistGradientBoostingRegressor(max_iter=30, random_state=0).fit(X, y))
    buf = io.BytesIO()
    np.savez(buf, **trees.arrays("real_model_"))
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as arrays:
        back = TreeEnsemble.from_arrays(dict(arrays), "real_model_")
    np.testing.assert_array_equal(back.predict(X), trees.predict(X))


def test_damaged_arrays_are_refused_not_walked() -> None:
    X, y = _data()
    arrays = TreeEnsemble.from_estimator(HistGradientBoostingRegressor(max_iter=5, random_state=0).fit(X, y)).arrays("m_")
    inner = int(np.flatnonzero(~arrays["m_is_leaf"])[1])
    looped = {**arrays, "m_left": arrays["m_left"].copy()}
    looped["m_left"][inner] = inner  # a node that is its own child would never reach a leaf
    with pytest.raises(UnsupportedEstimator, match="inconsistent"):
        TreeEnsemble.from_arrays(looped, "m_")
    bad_feature = {**arrays, "m_feature_idx": arrays["m_feature_idx"] + 5}
    with pytest.raises(UnsupportedEstimator, match="inconsistent"):
        TreeEnsemble.from_arrays(bad_feature, "m_")
    with pytest.raises(UnsupportedEstimator, match="lacks the array m_value"):
        TreeEnsemble.from_arrays({k: v for k, v in arrays.items() if k != "m_value"}, "m_")


def test_estimators_it_cannot_represent_are_refused() -> None:
    X, y = _data()
    with pytest.raises(UnsupportedEstimator, match="single-output"):
        TreeEnsemble.from_estimator(HistGradientBoostingRegressor())  # not fitted
    clf = HistGradientBoostingClassifier(max_iter=5).fit(np.nan_to_num(X), y > 0)
    with pytest.raises(UnsupportedEstimator):
        TreeEnsemble.from_estimator(clf)
    cat = HistGradientBoostingRegressor(max_iter=5, categorical_features=[0]).fit(
        np.column_stack([np.arange(len(y)) % 4, np.nan_to_num(X[:, 1:])]), y)
    with pytest.raises(UnsupportedEstimator, match="categorical"):
        TreeEnsemble.from_estimator(cat)

"""The learned latency model: a calibrated simulator plus a gradient-boosted residual.

1. :class:`CommModel` fits how much of the catalog's link bandwidth DDP achieves (and a
   latency multiplier) on measured multi-worker runs whose gradient size is known: a grid
   search minimising the median absolute log error of the simulator on those runs.
2. :class:`LatencyModel` (scikit-learn estimator contract) predicts log(measured / simulated)
   with a HistGradientBoostingRegressor on the features of :mod:`srifty.features`, and
   quantile models (loss='quantile') give an interval.
3. :class:`Predictor` bundles both with the training metadata and answers predictions for
   a job; :func:`save` / :func:`load` persist it with ``skops.io`` (never pickle): loading
   accepts only scikit-learn / numpy types.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from srifty import __version__
from srifty.configspec import ClusterConfig
from srifty.errors import SriftyError
from srifty.features import FEATURES, RESIDUAL_FEATURES, FeatureBuilder, JobProfile, LinkScale, Run, run_config

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd

    from srifty.catalog import Catalog

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = ("profiles/pollux", "profiles/emulated")
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


# --------------------------------------------------------------------------- communication model


@dataclass
class CommModel:
    """Achieved link efficiency fitted on measured runs (see module docstring)."""

    inter_grid: tuple[float, ...] = tuple(round(10 ** (-2.5 + 0.25 * i), 5) for i in range(11))
    intra_grid: tuple[float, ...] = (0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0)
    latency_grid: tuple[float, ...] = (1.0, 10.0)
    max_rows: int = 600
    link_scale_: LinkScale | None = None
    score_: float | None = None
    n_rows_: int = 0

    def fit(self, jobs: Sequence[JobProfile], catalog: "Catalog") -> "CommModel":
        import numpy as np

        known = [j for j in jobs if j.grad_bytes or j.param_count]
        pairs = [(j, r) for j in known for r in j.runs if r.world_size >= 2]
        if not pairs:
            self.link_scale_, self.score_, self.n_rows_ = LinkScale(), None, 0
            return self
        rng = np.random.default_rng(0)
        if len(pairs) > self.max_rows:
            pairs = [pairs[i] for i in sorted(rng.choice(len(pairs), self.max_rows, replace=False))]
        y = np.array([r.step_ms for _, r in pairs])
        best = None
        for inter in self.inter_grid:
            for intra in self.intra_grid:
                for lat in self.latency_grid:
                    scale = LinkScale(inter, intra, lat)
                    builders = {j.model: FeatureBuilder(j, catalog, scale) for j in known}
                    sim = np.array([builders[j.model].estimate(run_config(r), r.local_batch_size).sim_ms
                                    for j, r in pairs])
                    err = float(np.median(np.abs(np.log(sim / y))))
                    if best is None or err < best[0]:
                        best = (err, scale)
        self.score_, self.link_scale_ = best
        self.n_rows_ = len(pairs)
        return self


# --------------------------------------------------------------------------- the estimator


class LatencyModel:
    """Iteration time = simulator × exp(learned residual); quantile models give an interval.

    ``fit(X, y)``: X is a feature table from :class:`srifty.features.FeatureBuilder` (the
    FEATURES columns plus ``sim_ms``), y the measured iteration times in ms.
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

    def _check_fitted(self) -> None:
        if not hasattr(self, "model_"):
            raise ModelError("This LatencyModel is not fitted yet.", "Call fit(X, y) first (or `srifty fit`).")

    def fit(self, X: "pd.DataFrame", y: Sequence[float]) -> "LatencyModel":
        import numpy as np

        A = self._check_X(X, fitting=True)
        y = np.asarray(y, dtype=float)
        if len(y) != len(A):
            raise ModelError(f"X has {len(A)} rows but y has {len(y)}.")
        if len(y) < 10:
            raise ModelError(f"Too few measured multi-worker runs to fit on ({len(y)}; at least 10 needed).",
                             "Add profiles with several workers (srifty import, or srifty profile on a cluster).")
        if np.any(~np.isfinite(y)) or np.any(y <= 0):
            raise ModelError("y must hold positive, finite iteration times (ms).")
        r = np.log(y / np.asarray(X["sim_ms"], dtype=float))
        self.feature_names_in_ = np.array(RESIDUAL_FEATURES, dtype=object)
        self.n_features_in_ = len(RESIDUAL_FEATURES)
        self.model_ = self._hgb().fit(A, r)
        self.lower_ = self._hgb(loss="quantile", quantile=self.quantiles[0]).fit(A, r)
        self.upper_ = self._hgb(loss="quantile", quantile=self.quantiles[1]).fit(A, r)
        finite = np.where(np.isfinite(A), A, np.nan)
        self.feature_min_ = np.nanmin(finite, axis=0)
        self.feature_max_ = np.nanmax(finite, axis=0)
        self.n_rows_ = len(y)
        return self

    def predict(self, X: "pd.DataFrame") -> "np.ndarray":
        """Predicted iteration time (ms) for every row of X."""
        import numpy as np

        A = self._check_X(X)
        return np.asarray(X["sim_ms"], dtype=float) * np.exp(self.model_.predict(A))

    def out_of_range(self, X: "pd.DataFrame") -> list[list[str]]:
        """For each row, the features outside the range seen in training."""
        import numpy as np

        A = self._check_X(X)
        with np.errstate(invalid="ignore"):
            low = (A < self.feature_min_ - 1e-9) & np.isfinite(A)
            high = (A > self.feature_max_ + 1e-9) & np.isfinite(A)
        return [[RESIDUAL_FEATURES[j] for j in np.nonzero(low[i] | high[i])[0]] for i in range(len(A))]

    def predict_interval(self, X: "pd.DataFrame") -> tuple["np.ndarray", "np.ndarray"]:
        """(low, high) ms: the quantile models, widened outside the training range."""
        import numpy as np

        A = self._check_X(X)
        center = self.model_.predict(A)
        lo = np.minimum(self.lower_.predict(A), center)
        hi = np.maximum(self.upper_.predict(A), center)
        outside = np.array([bool(x) for x in self.out_of_range(X)])
        widen = np.where(outside, EXTRAPOLATION_WIDEN, 1.0)
        lo = center - (center - lo) * widen - np.where(outside, 0.1, 0.0)
        hi = center + (hi - center) * widen + np.where(outside, 0.1, 0.0)
        sim = np.asarray(X["sim_ms"], dtype=float)
        return sim * np.exp(lo), sim * np.exp(hi)


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
              cv_score: dict[str, Any] | None = None) -> "Predictor":
        if not jobs:
            raise ModelError("The training corpus holds no training profiles.",
                             "Give profile files or directories (e.g. profiles/pollux), or import a trace first.")
        comm = CommModel(max_rows=250 if quick else 600).fit(jobs, catalog)
        table = table_for(jobs, catalog, comm.link_scale_)
        latency = LatencyModel(max_iter=120 if quick else 200).fit(table.X, table.y_ms)
        meta = {
            "data_sha256": corpus_hash(jobs), "models": [j.model for j in jobs],
            "instance_types": sorted({t for j in jobs for t in j.instance_types}),
            "rows": len(table.y_ms), "max_nodes": int(table.X["nodes"].max()),
            "comm_rows": comm.n_rows_, "comm_median_abs_log_error": comm.score_,
            "link_scale": asdict(comm.link_scale_), "code_version": __version__, "libraries": library_versions(),
            "cv": cv_score or {},
        }
        return cls(latency, comm.link_scale_, meta)

    def builder(self, job: JobProfile, catalog: "Catalog") -> FeatureBuilder:
        return FeatureBuilder(job, catalog, self.link_scale)

    def predict(self, job: JobProfile, catalog: "Catalog", rows: Sequence[tuple[ClusterConfig, int]]) -> list[Prediction]:
        """Predictions for (resolved configuration, per-worker batch) rows; measured where the profile has them."""
        import numpy as np

        fb = self.builder(job, catalog)
        X = fb.frame(rows)
        ms = self.latency.predict(X)
        lo, hi = self.latency.predict_interval(X)
        oor = self.latency.out_of_range(X)
        out = []
        for i, (config, b) in enumerate(rows):
            est = fb.estimate(config, b)
            warnings = list(est.notes)
            wpn = config.workers_per_node()
            measured = job.measured(config.groups[0].instance_type, wpn, int(b)) if not config.is_mixed else None
            world = sum(wpn)
            if measured is not None:
                it, interval, source = measured, (measured, measured), "measured"
            else:
                it, interval = float(ms[i]), (float(lo[i]), float(hi[i]))
                source = "transferred" if est.transferred else "predicted"
                if sum(wpn) == 1:  # a single worker: the compute curve is the estimate
                    it = est.sim_ms
                    interval = (min(interval[0], it), max(interval[1], it))
                if oor[i]:
                    warnings.append("far outside the training data (" + ", ".join(oor[i]) +
                                    "): the interval is widened; treat the figure as a rough estimate")
            if not np.isfinite(it):
                raise ModelError(f"No estimate for {config.format()} at batch {b}.")
            out.append(Prediction(config.format(), int(b), float(it), interval, world * b / (it / 1e3), source, warnings))
        return out

    def predict_frame(self, job: JobProfile, catalog: "Catalog", df: "pd.DataFrame") -> "pd.DataFrame":
        """Vectorised over rows of (instance_type, workers_per_node, nodes, local_batch_size):
        the model runs once per distinct row and the results are joined back."""
        import pandas as pd

        from srifty.configspec import NodeGroup

        keys = ["instance_type", "workers_per_node", "nodes", "local_batch_size"]
        missing = [k for k in keys if k not in df.columns]
        if missing:
            raise ModelError(f"predict_frame needs the column(s) {', '.join(missing)}.")
        distinct = df[keys].drop_duplicates().reset_index(drop=True)
        rows = [(ClusterConfig((NodeGroup(int(r.nodes), str(r.instance_type), int(r.workers_per_node)),)),
                 int(r.local_batch_size)) for r in distinct.itertuples()]
        fb = self.builder(job, catalog)
        X = fb.frame(rows)
        distinct["iteration_ms"] = self.latency.predict(X)
        lo, hi = self.latency.predict_interval(X)
        distinct["interval_low_ms"], distinct["interval_high_ms"] = lo, hi
        distinct["throughput_samples_per_s"] = (distinct["workers_per_node"] * distinct["nodes"] *
                                                distinct["local_batch_size"] / (distinct["iteration_ms"] / 1e3))
        return df.merge(distinct, on=keys, how="left")


# --------------------------------------------------------------------------- persistence


TRUSTED_PREFIXES = ("sklearn.", "numpy.", "builtins.", "collections.")


def save(predictor: Predictor, path: str | Path) -> None:
    """Write the predictor with skops (no pickle): estimators plus JSON metadata."""
    import skops.io as sio

    lm = predictor.latency
    state = {
        "format": "srifty-latency-model", "version": 1,
        "meta_json": json.dumps({**predictor.meta, "link_scale": asdict(predictor.link_scale),
                                 "params": {k: getattr(lm, k) for k in ("max_iter", "learning_rate", "max_leaf_nodes",
                                                                        "min_samples_leaf", "l2_regularization",
                                                                        "random_state")},
                                 "quantiles": list(lm.quantiles), "n_rows": lm.n_rows_}),
        "model": lm.model_, "lower": lm.lower_, "upper": lm.upper_,
        "feature_min": lm.feature_min_, "feature_max": lm.feature_max_,
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    sio.dump(state, str(path))


def load(path: str | Path) -> Predictor:
    """Load a predictor written by :func:`save`, trusting only scikit-learn and numpy types."""
    import numpy as np
    import skops.io as sio

    p = Path(path)
    if not p.exists():
        raise ModelError(f"{p}: no such model file.", "Write one with `srifty fit --out MODEL`.")
    try:
        untrusted = sio.get_untrusted_types(file=str(p))
    except Exception as exc:  # noqa: BLE001 - skops raises several kinds for a bad file
        raise ModelError(f"{p} is not a skops model file ({type(exc).__name__}: {exc}).",
                         "Write one with `srifty fit --out MODEL`.") from None
    bad = [t for t in untrusted if not t.startswith(TRUSTED_PREFIXES)]
    if bad:
        raise ModelError(f"{p} holds types srifty does not trust: {', '.join(bad)}. It was not loaded.",
                         "Only load model files written by `srifty fit`.")
    state = sio.load(str(p), trusted=untrusted)
    if not isinstance(state, dict) or state.get("format") != "srifty-latency-model":
        raise ModelError(f"{p} is not a srifty latency model.", "Write one with `srifty fit --out MODEL`.")
    meta = json.loads(state["meta_json"])
    params = meta.pop("params")
    lm = LatencyModel(quantiles=tuple(meta.pop("quantiles")), **params)
    lm.model_, lm.lower_, lm.upper_ = state["model"], state["lower"], state["upper"]
    lm.feature_min_, lm.feature_max_ = np.asarray(state["feature_min"]), np.asarray(state["feature_max"])
    lm.feature_names_in_ = np.array(RESIDUAL_FEATURES, dtype=object)
    lm.n_features_in_ = len(RESIDUAL_FEATURES)
    lm.n_rows_ = meta.pop("n_rows")
    return Predictor(lm, LinkScale(**meta["link_scale"]), meta)


def corpus_paths(extra: Sequence[str] = ()) -> list[str]:
    """The given corpus paths, or the shipped ones that exist (profiles/pollux, profiles/emulated)."""
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

    def get(self, name: str) -> Any:
        try:
            return self.first.get(name)
        except SriftyError:
            pass
        try:
            return self.second.get(name)
        except SriftyError:
            from srifty.catalog import did_you_mean

            known = list(self.first.df["instance_type"]) + list(self.second.df["instance_type"])
            raise SriftyError(f"Unknown instance type {name!r}.{did_you_mean(name, known)}",
                              "To see what the catalog has: srifty catalog list.") from None

    def gpu_spec(self, gpu_name: str) -> Any:
        return self.first.gpu_spec(gpu_name)

    @property
    def warnings(self) -> list[str]:
        return self.first.warnings


@lru_cache(maxsize=4)
def _default_predictor_cached(paths: tuple[str, ...], quick: bool) -> tuple[Predictor, Any]:
    from srifty.features import load_corpus

    jobs = load_corpus(list(paths))
    cat = catalog_for_jobs(jobs)
    return Predictor.train(jobs, cat, quick=quick), cat


def default_predictor(paths: Sequence[str] = (), quick: bool = False) -> Predictor:
    """Trained on the shipped corpus (retrained on load, cached in this process)."""
    found = tuple(corpus_paths(paths))
    if not found:
        raise ModelError("No training corpus found (profiles/pollux is shipped with srifty).",
                         "Give corpus paths, or run `srifty import data/traces/pollux_g4dn12xlarge.import.csv "
                         "--out profiles/pollux`.")
    return _default_predictor_cached(found, quick)[0]



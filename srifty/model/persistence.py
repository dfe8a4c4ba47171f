"""Saving and loading a predictor, its card, and what makes a saved model current.

:func:`save` / :func:`load` keep a :class:`srifty.model.predictor.Predictor` in one numpy
``.npz`` file: the trees of each regime as arrays (srifty.trees) and everything else as JSON,
read back with ``allow_pickle=False`` and checked before use. The file names no type and holds
no object, so loading it runs nothing from it, and a loaded model needs no scikit-learn, whose
import alone would be most of a first ``recommend``. Beside the model file a small JSON card
(:func:`card_path`) says what it was trained on; :func:`card_is_current` compares it with
:data:`MODEL_REVISION`, and :func:`shipped_model` finds the model shipped with srifty when it is
current. :data:`MODEL_CODE` lists the files the predictions depend on besides the model file (the
key of recommend's prediction cache).
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from srifty.features import RESIDUAL_FEATURES, LinkScale
from srifty.model.latency import LatencyModel, ModelError
from srifty.model.predictor import Predictor
from srifty.model.residual import ResidualPart
from srifty.trees import TreeEnsemble, UnsupportedEstimator

SRIFTY_DIR = Path(__file__).resolve().parent.parent
SHIPPED_MODEL = SRIFTY_DIR / "data" / "latency-model.npz"  # `make model` writes it
MODEL_FORMAT = "srifty-latency-model"
FORMAT_VERSION = 3  # 2: skops archives of scikit-learn estimators (srifty before the tree arrays)
TREES = ("model", "lower", "upper")


def _bins(saved: list[list[float] | None] | None) -> tuple[tuple[float, float] | None, ...] | None:
    """ResidualPart's per-share held-out errors as JSON gave them back (lists for tuples)."""
    return None if saved is None else tuple(None if b is None else (float(b[0]), float(b[1])) for b in saved)


def save(predictor: Predictor, path: str | Path) -> None:
    """Write the predictor (atomically) as tree arrays plus JSON metadata."""
    import numpy as np

    lm = predictor.latency
    meta = {**predictor.meta, "link_scale": asdict(predictor.link_scale),
            "params": {k: getattr(lm, k) for k in ("max_iter", "learning_rate", "max_leaf_nodes", "min_samples_leaf",
                                                   "l2_regularization", "random_state")},
            "quantiles": list(lm.quantiles), "n_rows": lm.n_rows_,
            "regimes": {k: (v.n_rows if v is not None else None) for k, v in lm.parts_.items()},
            "held_out_error": {k: v.held_out_error for k, v in lm.parts_.items() if v is not None},
            "multi_worker_slowdown": {k: v.multi_worker_slowdown for k, v in lm.parts_.items() if v is not None},
            "shrink": {k: v.shrink for k, v in lm.parts_.items() if v is not None},
            "trend": {k: v.trend for k, v in lm.parts_.items() if v is not None},
            "held_out_groups": {k: v.held_out_groups for k, v in lm.parts_.items() if v is not None},
            "held_out_error_unread": {k: v.held_out_error_unread for k, v in lm.parts_.items() if v is not None},
            "held_out_error_by_share": {k: v.held_out_error_by_share for k, v in lm.parts_.items() if v is not None},
            "held_out_error_unread_by_share": {k: v.held_out_error_unread_by_share for k, v in lm.parts_.items()
                                               if v is not None}}
    arrays: dict[str, Any] = {"format": np.array(MODEL_FORMAT), "version": np.array(FORMAT_VERSION),
                              "meta_json": np.array(json.dumps(meta))}
    for name, part in lm.parts_.items():
        if part is not None:
            for which in TREES:
                arrays.update(getattr(part, which).arrays(f"{name}_{which}_"))
            arrays[f"{name}_feature_min"], arrays[f"{name}_feature_max"] = part.feature_min, part.feature_max
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    with open(tmp, "wb") as fh:  # a file object: numpy would add ".npz" to a name
        np.savez_compressed(fh, **arrays)
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


# The version of what a trained model answers, besides its corpus. Raise it with any change to
# the features, the simulator, the model or the GPU data it reads that moves a prediction:
# the golden-prediction test (tests/test_golden.py) fails until it is raised, the shipped model
# re-fitted and the golden predictions written again (`make model`). A saved or cached model
# whose card names another revision is stale. Edits that move no prediction (a comment, a
# rename) change nothing.
MODEL_REVISION = 33

# The code and data the predictions depend on besides the model file: recommend's on-disk cache of
# predictions is keyed by their bytes (srifty.oracle.PREDICTION_CODE).
MODEL_CODE = tuple(SRIFTY_DIR / f
                   for f in ("features/builder.py", "features/compute.py", "features/curve.py", "features/rows.py",
                             "features/notes.py", "features/hardware.py", "features/job.py", "features/links.py",
                             "features/measured.py", "features/memory.py", "features/overlap.py", "simulate.py",
                             "model/__init__.py", "model/corpus.py", "model/latency.py", "model/residual.py",
                             "model/persistence.py", "model/predictor.py", "model/table.py", "opmodel.py",
                             "data/gpu_step_model.json", "data/gpu_specs.csv", "data/gpu_speed_corrections.csv",
                             "data/gpu_transfer_error.json"))


def card_is_current(card: dict[str, Any] | None, data_sha256: str | None = None) -> bool:
    """True when a model with this card answers as if trained here and now: same feature list
    and MODEL_REVISION, and (when given) the same corpus. The versions of the libraries it was
    fitted with do not matter once it is saved: its trees are arrays, evaluated by srifty.trees."""
    if not card or card.get("features") != list(RESIDUAL_FEATURES) or card.get("revision") != MODEL_REVISION:
        return False
    return data_sha256 is None or card.get("data_sha256") == data_sha256


def shipped_model() -> Path | None:
    """The model trained on the shipped corpus and shipped with srifty, when it is current
    (:func:`card_is_current`); else None and the caller trains one."""
    if SHIPPED_MODEL.exists() and card_is_current(read_card(SHIPPED_MODEL)):
        return SHIPPED_MODEL
    return None


def load(path: str | Path) -> Predictor:
    """Load a predictor written by :func:`save`: arrays only (no pickle), each tree checked for
    consistency before it is used."""
    import numpy as np

    p = Path(path)
    try:
        with np.load(p, allow_pickle=False) as z:
            skops_archive = "schema.json" in z.files
            arrays = {} if skops_archive else {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ModelError(f"{p} is not a srifty latency model ({type(exc).__name__}: {exc}).",
                         "Write one with `srifty fit --out MODEL`.") from None
    if skops_archive:
        raise ModelError(f"{p} was written by an older srifty (a skops archive; model format 2).",
                         "Refit it with `srifty fit --out MODEL`.")
    if "format" not in arrays or str(arrays["format"]) != MODEL_FORMAT:
        raise ModelError(f"{p} is not a srifty latency model.", "Write one with `srifty fit --out MODEL`.")
    if "version" not in arrays or int(arrays["version"]) != FORMAT_VERSION:
        raise ModelError(f"{p} was written by another srifty (model format {arrays.get('version')}).",
                         "Refit it with `srifty fit --out MODEL`.")
    try:
        meta = json.loads(str(arrays["meta_json"]))
        params = meta.pop("params")
        lm = LatencyModel(quantiles=tuple(meta.pop("quantiles")), **params)
        lm.parts_ = {}
        held_out = meta.pop("held_out_error", {})
        slowdown = meta.pop("multi_worker_slowdown", {})
        shrink = meta.pop("shrink", {})
        trend = meta.pop("trend", {})
        held_by = meta.pop("held_out_groups", {})
        unread = meta.pop("held_out_error_unread", {})
        by_share = meta.pop("held_out_error_by_share", {})
        unread_by_share = meta.pop("held_out_error_unread_by_share", {})
        for name, n_rows in meta.pop("regimes").items():
            err, slow = held_out.get(name), slowdown.get(name)
            lm.parts_[name] = None if n_rows is None else ResidualPart(
                *(TreeEnsemble.from_arrays(arrays, f"{name}_{which}_") for which in TREES),
                np.asarray(arrays[f"{name}_feature_min"], dtype=float),
                np.asarray(arrays[f"{name}_feature_max"], dtype=float), int(n_rows),
                tuple(err) if err else None, tuple(slow) if slow else None, float(shrink.get(name, 1.0)),
                tuple(trend.get(name, (0.0, 0.0))), str(held_by.get(name, "models")),
                tuple(unread[name]) if unread.get(name) else None,
                _bins(by_share.get(name)), _bins(unread_by_share.get(name)))
        lm.feature_names_in_ = np.array(RESIDUAL_FEATURES, dtype=object)
        lm.n_features_in_ = len(RESIDUAL_FEATURES)
        lm.n_rows_ = meta.pop("n_rows")
        link = dict(meta["link_scale"])
        link["fast_links"] = tuple(tuple(x) for x in link.get("fast_links", ()))
        link["emulated_goodput_by_mbit"] = tuple(tuple(x) for x in link.get("emulated_goodput_by_mbit", ()))
        link["emulated_mixed_ring"] = tuple(link.get("emulated_mixed_ring", (1.0, 1.0)))
        link["tcp_links"] = tuple(tuple(x) for x in link.get("tcp_links", ()))
        link["tcp_node_shares"] = tuple(tuple(x) for x in link.get("tcp_node_shares", ()))
        link["tcp_fallback"] = tuple(tuple(x) for x in link.get("tcp_fallback", ()))
        return Predictor(lm, LinkScale(**link), meta)
    except UnsupportedEstimator as exc:
        raise ModelError(f"{p}: {exc.message}", exc.hint) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelError(f"{p} is a damaged srifty latency model ({type(exc).__name__}: {exc}).",
                         "Refit it with `srifty fit --out MODEL`.") from None

"""The latency model: a calibrated simulator plus a gradient-boosted residual, and the one
prediction path every command's figures come from.

- ``table``: the training table (:class:`Table`, :func:`table_for`), feature rows of measured
  multi-worker runs.
- ``latency``: :class:`LatencyModel`, the learned residual over the simulator per regime and its
  held-out-calibrated intervals; :class:`ModelError`.
- ``residual``: one regime's fitted residual (:class:`ResidualPart`), what the groups held out of
  its fit measured, and the share of the step beyond compute each row's interval is binned by.
- ``predictor``: :class:`Predictor` (trained on a corpus with srifty.comm's link efficiencies),
  :class:`Prediction`, :class:`PredictionTable` and :func:`predict_table`, the one prediction
  path, with where each figure came from (:func:`network_source`).
- ``persistence``: :func:`save` / :func:`load` as arrays and JSON (no pickle, no types named in
  the file), the model card, :data:`MODEL_REVISION`, :data:`MODEL_CODE` and the shipped model.
- ``corpus``: the default corpus and catalog (:func:`corpus_paths`, :func:`catalog_for_jobs`,
  :class:`CombinedCatalog`) and :func:`default_predictor`, trained on them.
"""

from srifty.features import FEATURES, REGIME_FEATURES, RESIDUAL_FEATURES
from srifty.model.corpus import (DEFAULT_CORPUS, ROOT, CombinedCatalog, catalog_for_jobs, corpus_paths,
                                 default_predictor, emulated_catalog_path)
from srifty.model.latency import (EXTRAPOLATION_WIDEN, MIN_RESIDUAL_ROWS, NO_RESIDUAL_HALF_WIDTH, REGIMES,
                                  SHRINK_GRID, TREND_ALPHA, UNCALIBRATED_NOTE, LatencyModel, ModelError)
from srifty.model.persistence import (MODEL_CODE, MODEL_REVISION, SHIPPED_MODEL, card_is_current, card_path, load,
                                      read_card, save, shipped_model)
from srifty.model.predictor import (COMPUTE_SOURCES, GRADIENT_SOURCES, NETWORK_SOURCES, OVERLAP_SOURCES, PART_SOURCES,
                                    SOURCE_CERTAINTY, Prediction, PredictionTable, Predictor, allreduce_hash,
                                    corpus_hash, fitted_link_types, gradient_source, least_certain, library_versions,
                                    network_source, predict_table)
from srifty.model.residual import BIN_MIN_HALF_WIDTH, ResidualPart, gpu_transfer_error
from srifty.model.table import Table, table_for, unread_overlap_table

__all__ = [
    "FEATURES", "REGIME_FEATURES", "RESIDUAL_FEATURES",
    "DEFAULT_CORPUS", "ROOT", "CombinedCatalog", "catalog_for_jobs", "corpus_paths", "default_predictor",
    "emulated_catalog_path",
    "BIN_MIN_HALF_WIDTH", "EXTRAPOLATION_WIDEN", "MIN_RESIDUAL_ROWS", "NO_RESIDUAL_HALF_WIDTH", "REGIMES", "SHRINK_GRID",
    "TREND_ALPHA", "UNCALIBRATED_NOTE",
    "LatencyModel", "ModelError", "ResidualPart", "gpu_transfer_error",
    "MODEL_CODE", "MODEL_REVISION", "SHIPPED_MODEL", "card_is_current", "card_path", "load", "read_card", "save",
    "shipped_model",
    "COMPUTE_SOURCES", "GRADIENT_SOURCES", "NETWORK_SOURCES", "OVERLAP_SOURCES", "PART_SOURCES", "SOURCE_CERTAINTY",
    "Prediction", "PredictionTable", "Predictor", "allreduce_hash", "corpus_hash", "fitted_link_types",
    "gradient_source", "least_certain", "library_versions", "network_source", "predict_table",
    "Table", "table_for", "unread_overlap_table",
]

"""The residual model of one regime as fitted (:class:`ResidualPart`), what the groups held out of
its fit measured (:class:`HeldOut`), and what the interval reads of each row: its predicted share of
the step beyond compute and that share's bin (:func:`compute_share`, :func:`share_bin`), and the
feature table's 0/1 flags (:func:`flagged`); the measured spread of GPU-to-GPU compute transfers that
widens the interval of a transferred row (:func:`gpu_transfer_error`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from srifty.trees import TreeEnsemble

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd

    from srifty.gpuspeed import TransferError

# the scatter (log) of repeated measurements of one configuration (Pollux's noise floor, 4.9%:
# docs/ACCURACY.md): how far a measured step may fall below its slowest worker's compute alone, or a
# worker's measured compute outside the bounds at another batch (ComputeCurve.bounds), which hold
# for its true time
REPEAT_SCATTER = 0.05
# the predicted share of the step beyond its slowest worker's compute alone, binned (upper edges):
# compute-bound, mixed, communication-bound. The interval is calibrated per bin, since a model never
# seen misses its hidden communication by less than its exposed one
EXPOSED_SHARE_EDGES = (0.10, 0.40)
BIN_MIN_HALF_WIDTH = 2 * REPEAT_SCATTER
MIN_BIN_ROWS = 20  # a held-out group's rows in a share bin below this: its quantiles there are not used


@dataclass
class ResidualPart:
    """The residual model of one regime: centre and quantile trees, and the feature range seen."""

    model: TreeEnsemble
    lower: TreeEnsemble
    upper: TreeEnsemble
    feature_min: "np.ndarray"
    feature_max: "np.ndarray"
    n_rows: int
    # the lowest 5% and highest 95% quantile of the log error of any one group (model) held out of
    # the fit: how wrong the centre can be on a model it never saw (None: fitted without groups,
    # or fewer than 2 of them)
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
    # what ``held_out_error`` and ``shrink`` held out: "models", or, with the runs of one model only,
    # "node counts" (each node count of it predicted from the others: an error across cluster
    # sizes, not across models)
    held_out_groups: str = "models"
    # ``held_out_error`` measured on the rows as a job whose overlap nobody read would see them
    # (srifty.model.unread_overlap_table), for rows whose overlap is unknown; None: the same
    held_out_error_unread: tuple[float, float] | None = None
    # ``held_out_error`` (and ``held_out_error_unread``) per EXPOSED_SHARE_EDGES bin of the predicted
    # step; None in a bin where fewer than two held-out groups had MIN_BIN_ROWS rows (the pooled one holds)
    held_out_error_by_share: tuple[tuple[float, float] | None, ...] | None = None
    held_out_error_unread_by_share: tuple[tuple[float, float] | None, ...] | None = None


@dataclass(frozen=True)
class HeldOut:
    """What :meth:`LatencyModel._held_out` measured on groups held out of the fit (ResidualPart's
    fields of the same names)."""

    error: tuple[float, float] | None = None
    shrink: float = 1.0
    error_unread: tuple[float, float] | None = None
    by_share: tuple[tuple[float, float] | None, ...] | None = None
    unread_by_share: tuple[tuple[float, float] | None, ...] | None = None


def compute_share(X: "pd.DataFrame") -> "np.ndarray":
    """log(compute alone / simulated step) per row (NaN without a ``compute_ms`` column, or where
    it is not a positive time): with the residual r, the predicted share of the step beyond
    compute is 1 - exp(this - r)."""
    import numpy as np

    if "compute_ms" not in getattr(X, "columns", []):
        return np.full(len(X), np.nan)
    compute = np.asarray(X["compute_ms"], dtype=float)
    with np.errstate(all="ignore"):
        return np.where(compute > 0, np.log(compute / np.asarray(X["sim_ms"], dtype=float)), np.nan)

def share_bin(compute_share: "np.ndarray", residual: "np.ndarray") -> "np.ndarray":
    """The EXPOSED_SHARE_EDGES bin of each row's predicted step (-1 where compute is unknown)."""
    import numpy as np

    with np.errstate(all="ignore"):
        beyond = 1.0 - np.exp(compute_share - residual)
    return np.where(np.isfinite(beyond), np.digitize(beyond, EXPOSED_SHARE_EDGES), -1)


def flagged(X: "pd.DataFrame", column: str) -> "np.ndarray":
    """The rows where the feature table's optional 0/1 ``column`` is set (none where the table
    has no such column: a table built before it existed)."""
    import numpy as np

    return np.asarray(X[column], dtype=float) > 0 if column in X.columns else np.zeros(len(X), dtype=bool)


@lru_cache(maxsize=1)
def gpu_transfer_error() -> "TransferError | None":
    """How far GPU-to-GPU compute transfers have missed (srifty/data/gpu_transfer_error.json,
    `make gpu-speed`); None without the file."""
    from srifty.catalog import DATA_DIR, TRANSFER_ERROR_JSON
    from srifty.gpuspeed import read_transfer_error

    return read_transfer_error(DATA_DIR / TRANSFER_ERROR_JSON)

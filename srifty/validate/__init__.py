"""Grouped validation of the latency model, and the checks of its parts, for docs/ACCURACY.md.

- ``folds``: the cross-validation splits (leave one model, instance type or configuration out;
  extrapolation in node count), one fold at a time, with the Pollux-style baseline.
- ``results``: what a fold yields (:class:`SplitResult`), a corpus's noise floor
  (:class:`ReplicateFloor`) and the :class:`ValidationReport` that pools them.
- ``report``: the Markdown page, its plot, and the README's one-line summary.
- ``allreduce``: measured nccl-tests allreduces against the simulator's link figures.
- ``gpu_transfer``: single-GPU rates carried from one GPU type to another by a speed ratio.
- ``batch``: compute at another per-worker batch, predicted from one measured batch.
- ``holdout``: a trained model on measurements it never saw (each job's runs across nodes from
  its single-node runs).
- ``timeline``: a CPU profile's gradient ready times on a GPU cluster, as srifty takes them and
  as recorded.
"""

from srifty.validate.allreduce import COMM_METHODS, AllreduceCheck, render_allreduce, validate_allreduce
from srifty.validate.batch import (BATCH_RATIO_BINS, BatchCheck, batch_scaling_summary,
                                   render_batch_scaling, validate_batch_scaling)
from srifty.validate.holdout import HeldOutCheck, HeldOutRow, check_held_out
from srifty.validate.folds import catalog_without_gpu_of, fit_pollux, model_regimes, run_fold, validate
from srifty.validate.gpu_transfer import (DLE_GPUS, GAVEL_BATCH, GAVEL_GPUS, TRANSFER_METHODS, TransferCheck,
                                          by_dataset, read_dle_single_gpu, read_gavel, render_gpu_transfer,
                                          transfer_errors, transfer_spread, validate_gpu_transfer)
from srifty.validate.report import (README_END, README_START, floor_sentence, render_breakdown, render_markdown,
                                    render_readme_summary, replace_readme_summary, write_plot)
from srifty.validate.results import (METHODS, NODE_BINS, REGIMES, ReplicateFloor, SplitResult, ValidationReport,
                                     replicate_floor)
from srifty.validate.timeline import TimelineCheck, render_cpu_timeline, timeline_summary, validate_cpu_timeline

__all__ = [
    "COMM_METHODS", "AllreduceCheck", "render_allreduce", "validate_allreduce",
    "BATCH_RATIO_BINS", "BatchCheck", "batch_scaling_summary", "render_batch_scaling",
    "validate_batch_scaling",
    "HeldOutCheck", "HeldOutRow", "check_held_out",
    "catalog_without_gpu_of", "fit_pollux", "model_regimes", "run_fold", "validate",
    "DLE_GPUS", "GAVEL_BATCH", "GAVEL_GPUS", "TRANSFER_METHODS", "TransferCheck", "by_dataset",
    "read_dle_single_gpu", "read_gavel", "render_gpu_transfer", "transfer_errors", "transfer_spread",
    "validate_gpu_transfer",
    "README_END", "README_START", "floor_sentence", "render_breakdown", "render_markdown",
    "render_readme_summary", "replace_readme_summary", "write_plot",
    "METHODS", "NODE_BINS", "REGIMES", "ReplicateFloor", "SplitResult", "ValidationReport", "replicate_floor",
    "TimelineCheck", "render_cpu_timeline", "timeline_summary", "validate_cpu_timeline",
]

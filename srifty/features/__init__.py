"""Features of a (job, cluster configuration, per-worker batch) for the latency model.

A :class:`JobProfile` gathers what srifty knows about one model from its profiles (measured runs,
compute time per worker at each batch on each profiled instance type, gradient bytes and
buckets; ``job``). :class:`FeatureBuilder` turns (configuration, batch) into the simulator's
estimate plus the numbers the learned residual model reads (``builder``; the row's columns and
its :class:`RowEstimate` in ``rows``, what the row is told in ``notes``), over each worker's
compute (``compute``), from the hardware of each type (``hardware``) and what its links achieve
(``links``); measured collectives fit those links (``measured``).

Compute on an instance type comes from single-worker runs on it (interpolated over batch sizes,
bounded beyond them). On a GPU type never profiled it comes from the operator count of a CPU
profile (srifty.opmodel), or is transferred from a profiled GPU type by the ratio of GPU speeds,
or from an emulated type by measured CPU factors, and the row is marked ``transferred``. An
imported trace that does not record when its gradients become ready gets the overlap its sync
times show (``overlap``).
"""

from srifty.features.builder import FeatureBuilder, busy_peers
from srifty.features.compute import LAUNCH_BOUND_PEAK_SHARE, WorkerCompute
from srifty.features.notes import (GRADIENT_UNKNOWN_NOTE, READY_ON_CPU_NOTE, READY_UNKNOWN_NOTE,
                                   accumulation_note, default_batch_note, gradient_estimated_note,
                                   loose_profile_note, several_models_note)
from srifty.features.rows import (COMPUTE_TRANSFERS, FEATURES, OVERLAP_SOURCES, REGIME_FEATURES, RESIDUAL_FEATURES,
                                  RowBatch, RowEstimate, WorkerLayout, common_batch, default_batch, feature_words,
                                  group_batches, samples_per_step, with_type_batches)
from srifty.features.hardware import (DEFAULT_INTRA_GBYTES_PER_S, EFA_MIN_GBPS, EMULATED_INTRA_GBYTES_PER_S,
                                      HALF_PRECISIONS, INTER_LATENCY_US, INTRA_LATENCY_US, PCIE_GBYTES_PER_S,
                                      CONV_FLOPS_WEIGHT, UNKNOWN_CONV_SHARE, Hardware, both_measured, hardware_of,
                                      median_gbytes_per_tflop, transfer_speeds)
from srifty.features.curve import ComputeCurve
from srifty.features.job import (BYTES_PER_PARAM, LOOSE_PROFILE_CI, JobProfile, Run, job_from_profiles, load_corpus,
                                 load_job, run_config)
from srifty.features.links import (FLOW_GBPS, FRAME_GOODPUT, MIN_SHORTFALL, NCCL_AWS_FLOWS, PLACEMENT_GROUP_FLOW_GBPS,
                                   PRIOR_NETWORK_SPREAD, TBF_GOODPUT, LinkScale, mixed_ring_slowest_hosts)
from srifty.features.memory import MemoryFootprint, MemoryNeed, left_out_notes
from srifty.features.measured import AllreduceRow, CollectivePoint, load_allreduce_rows, load_collectives
from srifty.features.overlap import (GRADIENT_SIZE_GRID, OVERLAP_WINDOWS, GradientSizeFit, OverlapFit, derived_sync,
                                     estimate_gradient_size, fit_overlap, sync_error, with_estimated_gradient_size,
                                     with_fitted_overlap)

__all__ = [
    "COMPUTE_TRANSFERS", "FEATURES", "GRADIENT_UNKNOWN_NOTE", "LAUNCH_BOUND_PEAK_SHARE", "OVERLAP_SOURCES",
    "READY_ON_CPU_NOTE", "READY_UNKNOWN_NOTE", "REGIME_FEATURES", "RESIDUAL_FEATURES",
    "FeatureBuilder", "RowBatch", "RowEstimate", "WorkerCompute", "WorkerLayout", "busy_peers", "feature_words",
    "common_batch", "group_batches", "samples_per_step", "with_type_batches",
    "accumulation_note", "default_batch", "default_batch_note", "gradient_estimated_note", "loose_profile_note", "several_models_note",
    "DEFAULT_INTRA_GBYTES_PER_S", "EFA_MIN_GBPS", "EMULATED_INTRA_GBYTES_PER_S", "HALF_PRECISIONS",
    "INTER_LATENCY_US", "INTRA_LATENCY_US", "PCIE_GBYTES_PER_S", "Hardware", "hardware_of",
    "median_gbytes_per_tflop", "transfer_speeds", "both_measured", "CONV_FLOPS_WEIGHT", "UNKNOWN_CONV_SHARE",
    "BYTES_PER_PARAM", "LOOSE_PROFILE_CI", "ComputeCurve",
    "JobProfile", "Run", "job_from_profiles", "load_corpus", "load_job", "run_config", "FLOW_GBPS",
    "FRAME_GOODPUT", "MIN_SHORTFALL", "NCCL_AWS_FLOWS", "PLACEMENT_GROUP_FLOW_GBPS", "PRIOR_NETWORK_SPREAD",
    "TBF_GOODPUT", "LinkScale", "mixed_ring_slowest_hosts", "MemoryFootprint", "MemoryNeed", "left_out_notes",
    "AllreduceRow", "CollectivePoint",
    "load_allreduce_rows", "load_collectives", "GRADIENT_SIZE_GRID", "OVERLAP_WINDOWS", "GradientSizeFit",
    "OverlapFit", "derived_sync", "estimate_gradient_size", "fit_overlap", "sync_error",
    "with_estimated_gradient_size", "with_fitted_overlap",
]

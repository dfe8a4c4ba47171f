"""The feature row of a (configuration, per-worker batch): the columns the residual model reads
(:data:`FEATURES`, :data:`RESIDUAL_FEATURES`), the simulator's estimate with its bounds and
sources (:class:`RowEstimate`), and a configuration's workers and links at one batch
(:class:`WorkerLayout`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence, Union

from srifty.configspec import ClusterConfig, lookup_instance_type
from srifty.errors import SriftyError
from srifty.features.hardware import Hardware
from srifty.simulate import Link

if TYPE_CHECKING:  # pragma: no cover
    from srifty.catalog import Catalog

# a row's per-worker batch: one for every worker, or one per node group of its configuration (a mix
# whose types train at their own batches, as recommend splits a global batch)
RowBatch = Union[float, tuple[float, ...]]


def default_batch(measured: Iterable[int]) -> int | None:
    """The per-worker batch a row takes where none is given (predict's and recommend's alike): of
    the batches the profiles' runs ``measured``, the one the most runs did, the smallest of those
    tied; None without runs."""
    counts = Counter(int(b) for b in measured)
    return min(counts, key=lambda b: (-counts[b], b)) if counts else None


def group_batches(config: ClusterConfig, batch: RowBatch) -> tuple[float, ...]:
    """Each of ``config``'s node groups' per-worker batch in a row at ``batch``."""
    if isinstance(batch, tuple):
        if len(batch) != len(config.groups):
            raise ValueError(f"{len(batch)} batches for the {len(config.groups)} node groups of {config.format()}")
        return tuple(float(b) for b in batch)
    return (float(batch),) * len(config.groups)


def common_batch(config: ClusterConfig, batch: RowBatch) -> float | None:
    """The per-worker batch of a row whose workers all train at one; None where groups differ."""
    batches = set(group_batches(config, batch))
    return batches.pop() if len(batches) == 1 else None


def with_type_batches(rows: Sequence[tuple[ClusterConfig, RowBatch]], type_batches: Mapping[str, float] | None,
                      catalog: "Catalog", per_row: Sequence[Mapping[str, float] | None] = (),
                      where: Sequence[str] = ()) -> list[tuple[ClusterConfig, RowBatch]]:
    """``rows`` (resolved) with every group of a type in ``type_batches`` at that per-worker batch,
    and then in row i every group of a type in ``per_row[i]`` at that one (``where[i]``: what an
    error about row i adds, e.g. " (configs.csv line 3)")."""
    out = _at_type_batches(rows, type_batches, catalog, "") if type_batches else list(rows)
    for i, own in enumerate(per_row):
        if own:
            out[i] = _at_type_batches([out[i]], own, catalog, where[i] if i < len(where) else "")[0]
    return out


def _at_type_batches(rows: Sequence[tuple[ClusterConfig, RowBatch]], type_batches: Mapping[str, float],
                     catalog: "Catalog", where: str) -> list[tuple[ClusterConfig, RowBatch]]:
    named = {lookup_instance_type(catalog, t).name: float(b) for t, b in type_batches.items()}
    held = {g.instance_type for config, _ in rows for g in config.groups}
    if missing := sorted(set(named) - held):
        raise SriftyError(f"A per-type batch names {', '.join(missing)}, which no configuration asked for holds{where}.",
                          "Name only the types of the configurations (--type-batch TYPE=BATCH, or a --configs "
                          "file's batch_split).")
    out: list[tuple[ClusterConfig, RowBatch]] = []
    for config, b in rows:
        batches = tuple(named.get(g.instance_type, gb) for g, gb in zip(config.groups, group_batches(config, b)))
        out.append((config, batches[0] if len(set(batches)) == 1 else batches))
    return out


def samples_per_step(config: ClusterConfig, batch: RowBatch) -> float:
    """The global batch of ``config`` (resolved) at ``batch``: every worker's batch, added up."""
    return sum(g.count * (g.workers_per_node or 0) * b for g, b in zip(config.groups, group_batches(config, batch)))


# how compute profiled on one type is carried to another (FeatureBuilder.transfer_method): as it
# is, from a type with the same GPU board (only the hosts differ); the operator model (a CPU
# profile's operator count, on a GPU); the measured CPU factors of both emulated hosts; the spec
# speeds with both GPUs' measured speed factors; the spec speeds alone
COMPUTE_TRANSFERS = ("same-gpu", "operator-model", "cpu-factors", "gpu-speed-factors", "spec-speed")

# How much of a multi-worker row's allreduce backward hides, by where that comes from: nothing to
# hide (one worker, or no gradient size); the profile's own run (the predictor's measured rows); the
# bucket ready times the profile recorded; a window read off an imported trace's sync times, or off
# its multi-worker steps less its single-worker ones where it states no sync time
# (srifty.features.overlap); DDP's usual overlap where those times were read and did not overturn it;
# DDP's usual overlap on GPUs where the profile recorded its ready times on a CPU, which do not carry
# to a GPU (FeatureBuilder.recorded_ready); or DDP's usual overlap, neither recorded nor read (with
# the last two, the interval reaches the step with none of it hidden). Most certain first.
OVERLAP_SOURCES = ("none", "measured", "recorded", "read-from-sync", "read-from-steps", "default-checked",
                   "recorded-on-cpu", "default")
# the last two: neither recorded for these workers nor read (the feature table's overlap_unknown)
UNREAD_OVERLAP = ("recorded-on-cpu", "default")

FEATURES = [
    "log_sim_ms", "log_compute_ms", "log_allreduce_ms", "comm_to_compute", "exposed_to_compute",
    "nodes", "world_size", "max_workers_per_node", "min_workers_per_node", "imbalance", "n_types",
    "log_grad_mb", "grad_bytes_estimated", "log_local_batch", "log_compute_per_sample_ms",
    "inter_gbytes_per_s", "intra_gbytes_per_s", "gpu_fp32_tflops", "gpu_mem_gbytes_per_s", "transferred",
    "emulated", "cpu_load",
]

# What the residual model reads: scale-free, model-agnostic quantities only. Absolute sizes
# (gradient MB, ms per sample, batch) identify the few training models and do not transfer.
RESIDUAL_FEATURES = [
    "comm_to_compute", "exposed_to_compute", "nodes", "world_size", "max_workers_per_node",
    "min_workers_per_node", "imbalance", "n_types", "inter_gbytes_per_s", "intra_gbytes_per_s",
    "grad_bytes_estimated", "transferred",
]
# Emulated hosts share one machine: the configuration's total CPU share over the machine's cores
# (oversubscription slows every host beyond its quota; docs/emulated-cluster.md, "Limits").
REGIME_FEATURES = {"real": RESIDUAL_FEATURES, "emulated": RESIDUAL_FEATURES + ["cpu_load"]}
# what each residual feature is, in a warning's words
FEATURE_WORDS = {
    "comm_to_compute": "allreduce time against compute",
    "exposed_to_compute": "exposed communication against compute",
    "nodes": "node count", "world_size": "worker count", "max_workers_per_node": "workers per node",
    "min_workers_per_node": "workers per node", "imbalance": "compute imbalance between types",
    "n_types": "instance types in one configuration", "inter_gbytes_per_s": "network bandwidth between nodes",
    "intra_gbytes_per_s": "bandwidth within a node", "grad_bytes_estimated": "a gradient size read off sync times",
    "transferred": "compute carried from another type", "cpu_load": "CPU load of the emulated hosts",
}


def feature_words(names: Sequence[str]) -> str:
    """Features (and anything else :meth:`LatencyModel.out_of_range` lists) in a warning's words,
    each said once."""
    return ", ".join(dict.fromkeys(FEATURE_WORDS.get(n, n) for n in names))

@dataclass
class RowEstimate:
    features: dict[str, float]
    sim_ms: float
    compute_ms: float
    transferred: bool
    notes: list[str]
    compute_rel_ci: float = 0.0  # the loosest measurement behind the compute times used (relative CI half-width)
    loose_notes: tuple[str, ...] = ()  # the notes (among ``notes``) that say so
    # (least, most) compute over the estimate's, as ratios (ComputeCurve.bounds); (1, 1) where every
    # worker's batch was measured
    batch_bounds: tuple[float, float] = (1.0, 1.0)
    by_operators: bool = False  # some worker's compute comes from the operator model (srifty.opmodel)
    # (least, most) step over the estimate's, as ratios, that the interval must hold: the compute's
    # bounds times the spread of a network nobody measured and the reach of an unrecorded gradient
    # timeline (the feature table's batch_low/batch_high)
    step_bounds: tuple[float, float] = (1.0, 1.0)
    # where the share of the allreduce that backward hides comes from (:data:`OVERLAP_SOURCES`)
    overlap_source: str = "none"
    # how the workers' compute that was not profiled on their type was carried there
    # (:data:`COMPUTE_TRANSFERS`, each once, sorted); "spec-speed" among them is the feature table's
    # spec_transfer, which picks the transfer's spread
    compute_transfer: tuple[str, ...] = ()

    @property
    def spec_transfer(self) -> bool:
        return "spec-speed" in self.compute_transfer

    @property
    def overlap_unknown(self) -> bool:
        """Several workers of a job that neither records when its gradients become ready (for these
        workers) nor had that read off its sync times, as a window or DDP's usual overlap confirmed
        (srifty.features.overlap): the feature table's overlap_unknown."""
        return self.overlap_source in UNREAD_OVERLAP

    @property
    def same_gpu_transfer(self) -> bool:
        """Every worker not profiled on its type has its compute from a type with the same GPU
        board: no speed ratio, so none of the spread of one (the feature table's same_gpu_transfer)."""
        return self.compute_transfer == ("same-gpu",)


@dataclass
class WorkerLayout:
    """A configuration's workers at one batch (FeatureBuilder.workers): each node's hardware and
    worker count, each group's (step alone, compute), and the links of their ring."""

    hardware: list[Hardware]  # one per group
    workers_per_node: list[int]  # one per node
    cycles: list[tuple[float, float]]  # (step alone, compute) of each group's worker
    transferred: bool  # some worker's compute was carried from another type
    notes: list[str]
    loosest: float  # the loosest measurement behind the compute times (relative CI half-width; 0: none loose)
    loose_notes: list[str]  # the notes (among ``notes``) that say so
    batch_bounds: tuple[float, float]  # RowEstimate.batch_bounds
    intra: Link
    inter: Link
    emulated: bool
    batch: float  # each worker's

    @property
    def step_alone_ms(self) -> float:
        """The slowest worker's step without communication: compute, then optimizer and other."""
        return max(self.cycles)[0]

    @property
    def compute_ms(self) -> float:
        """The slowest worker's forward and backward."""
        return max(self.cycles)[1]

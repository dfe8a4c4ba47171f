"""The one prediction path: :class:`Predictor` and :func:`predict_table`.

:class:`Predictor` bundles a fitted :class:`srifty.model.latency.LatencyModel` with the link
efficiencies of :class:`srifty.comm.CommModel` and the training metadata (``Predictor.train``
fits both on a corpus). :func:`predict_table` is where every command's figures come from: the
simulator's estimate of each row (:class:`srifty.features.FeatureBuilder`), corrected by the
residual, with its interval and where its compute and communication came from
(:data:`COMPUTE_SOURCES`, :data:`NETWORK_SOURCES`, :func:`network_source`); a measured row keeps
its measurement. ``Predictor.predict`` turns that table into :class:`Prediction` objects.
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from srifty import __version__
from srifty.comm import CommModel, measured_allreduce
from srifty.configspec import ClusterConfig
from srifty.features import (LOOSE_PROFILE_CI, OVERLAP_SOURCES, AllreduceRow, CollectivePoint, FeatureBuilder,
                             JobProfile, LinkScale, MemoryNeed, RowBatch, RowEstimate, common_batch, feature_words,
                             group_batches, samples_per_step, with_fitted_overlap)
from srifty.model.latency import UNCALIBRATED_NOTE, LatencyModel, ModelError, widens
from srifty.model.table import table_for, unread_overlap_table

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd

    from srifty.catalog import Catalog


def batch_figure(batch: float) -> float:
    """A per-worker batch as a prediction reports it: a whole number where it is one, else to 0.01."""
    return int(batch) if float(batch).is_integer() else round(float(batch), 2)


@dataclass
class Prediction:
    config: str
    local_batch_size: float  # a whole number where it is one, else to 0.01
    iteration_ms: float
    interval_ms: tuple[float, float]
    throughput_samples_per_s: float
    source: str  # measured | predicted | transferred
    warnings: list[str] = field(default_factory=list)
    parts: dict[str, Any] = field(default_factory=dict)  # PredictionTable.parts: compute, communication, sources
    memory_gib: float | None = None  # one worker's tensor memory (PredictionTable.memory_gib)
    # each instance type's per-worker batch where they differ (``local_batch_size`` is then their mean)
    batch_split: dict[str, float] | None = None

    def batch_text(self) -> str:
        """The per-worker batch as a reader wants it: one figure, or each type's."""
        if self.batch_split:
            return " / ".join(f"{t} {b}" for t, b in self.batch_split.items())
        return f"{self.local_batch_size:g}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.batch_split is None:
            d.pop("batch_split")
        d["interval_ms"] = [round(self.interval_ms[0], 4), round(self.interval_ms[1], 4)]
        d["iteration_ms"] = round(self.iteration_ms, 4)
        d["throughput_samples_per_s"] = round(self.throughput_samples_per_s, 4)
        d["memory_gib"] = round(self.memory_gib, 4) if self.memory_gib is not None else None
        return d


def corpus_hash(jobs: Sequence[JobProfile]) -> str:
    h = hashlib.sha256()
    for j in sorted(jobs, key=lambda j: j.model):
        h.update(json.dumps([j.model, j.param_count, j.grad_bytes,
                             [(r.instance_type, r.workers_per_node, r.local_batch_size, r.step_ms) for r in j.runs]],
                            default=str).encode())
    return h.hexdigest()


def allreduce_hash(rows: Sequence[AllreduceRow]) -> str:
    return hashlib.sha256(json.dumps([asdict(r) for r in rows]).encode()).hexdigest()


def library_versions() -> dict[str, str]:
    import numpy
    import sklearn

    return {"python": platform.python_version(), "numpy": numpy.__version__, "scikit-learn": sklearn.__version__,
            "srifty": __version__}


class Predictor:
    """A trained latency model (communication + residual) ready to answer predictions."""

    def __init__(self, latency: LatencyModel, link_scale: LinkScale, meta: dict[str, Any]) -> None:
        self.latency = latency
        self.link_scale = link_scale
        self.meta = meta

    @classmethod
    def train(cls, jobs: Sequence[JobProfile], catalog: "Catalog", quick: bool = False,
              cv_score: dict[str, Any] | None = None, collectives: Sequence[CollectivePoint] = (),
              allreduce: Sequence[AllreduceRow] | None = None) -> "Predictor":
        """``allreduce``: measured allreduces for the NVLink/EFA efficiencies (default: the
        shipped nccl-tests rows, :func:`measured_allreduce`)."""
        if not jobs:
            raise ModelError("The training corpus holds no training profiles.",
                             "Give profile files or directories (e.g. profiles/pollux), or import a trace first.")
        if allreduce is None:
            allreduce = measured_allreduce()[0]
        comm = CommModel(max_rows=250 if quick else 600)
        jobs = comm.fit_with_overlap(jobs, catalog, collectives, allreduce)
        table = table_for(jobs, catalog, comm.link_scale_)
        latency = LatencyModel(max_iter=120 if quick else 200).fit(
            table.X, table.y_ms, groups=table.model, unread=unread_overlap_table(jobs, catalog, comm.link_scale_))
        meta = {
            "data_sha256": corpus_hash(jobs), "models": [j.model for j in jobs],
            "instance_types": sorted({t for j in jobs for t in j.instance_types}),
            # the types whose TCP network (runs across nodes) and PCIe (several workers on a node)
            # the fitted link efficiencies have seen: srifty.model.network_source
            "multi_node_types": sorted({r.instance_type for j in jobs for r in j.runs
                                        if len(r.workers_per_node) > 1 and not r.mixed}),
            "multi_worker_node_types": sorted({r.instance_type for j in jobs for r in j.runs
                                               if max(r.workers_per_node) > 1 and not r.mixed}),
            "rows": len(table.y_ms), "max_nodes": int(table.X["nodes"].max()),
            "uncalibrated_regimes": latency.uncalibrated_regimes(),
            "residual_rows": {k: (v.n_rows if v is not None else 0) for k, v in latency.parts_.items()},
            "comm_rows": comm.n_rows_, "comm_median_abs_log_error": comm.score_,
            "sweep_points": comm.n_sweep_points_, "allreduce_rows": comm.n_allreduce_rows_,
            "tcp_on_efa_types": list(comm.tcp_on_efa_types_),
            "allreduce_sha256": allreduce_hash(allreduce),
            # imported traces whose overlap window was read off their sync times (features.overlap)
            "overlap_windows": {j.model: j.backward_fraction for j in jobs if j.overlap_fit is not None},
            "link_scale": asdict(comm.link_scale_), "code_version": __version__, "libraries": library_versions(),
            "cv": cv_score or {},
        }
        return cls(latency, comm.link_scale_, meta)

    def builder(self, job: JobProfile, catalog: "Catalog") -> FeatureBuilder:
        """The features of ``job``'s rows with the fitted links; an imported trace that does not
        record when its gradients become ready gets the overlap its sync times show."""
        return FeatureBuilder(with_fitted_overlap(job, catalog, self.link_scale), catalog, self.link_scale)

    def in_placement_group(self, on: bool = True) -> "Predictor":
        """This predictor for nodes in a cluster placement group (LinkScale.placement_group: each
        TCP flow carries 10 Gbit/s, not 5); itself when ``on`` is false."""
        return Predictor(self.latency, replace(self.link_scale, placement_group=True), self.meta) if on else self

    def predict(self, job: JobProfile, catalog: "Catalog",
                rows: Sequence[tuple[ClusterConfig, RowBatch]]) -> list[Prediction]:
        """Predictions for (resolved configuration, per-worker batch or one per node group) rows,
        with each row's warnings (:func:`predict_table` gives the figures)."""
        import numpy as np

        if not rows:
            return []
        table = predict_table(self, self.builder(job, catalog), rows)
        uncalibrated = self.latency.uncalibrated(table.features)
        out = []
        for i, (config, b) in enumerate(rows):
            est = table.estimates[i]
            it = float(table.iteration_ms[i])
            if not np.isfinite(it):
                raise ModelError(f"No estimate for {config.format()} at batch {b}.")
            warnings = list(est.notes)
            if table.source[i] == "measured":
                warnings = [w for w in warnings if w not in est.loose_notes]
                ci = table.measured_rel_ci[i]
                if ci > LOOSE_PROFILE_CI:
                    warnings.append(f"measured to ±{ci:.0%} only (95% CI): the interval is that CI")
            else:
                outside = table.out_of_range[i]
                if config.world_size == 1 and est.transferred and not est.by_operators and widens(outside):
                    # the residual's features describe runs of several workers: naming them misleads
                    # (LatencyModel.predict_interval widens such a row; not one from the operator model)
                    warnings.append("one worker, its compute carried from another type: the residual model, "
                                    "trained on runs of several workers, is applied outside them, so the "
                                    "interval is widened; treat the figure as a rough estimate")
                elif outside and config.world_size > 1:
                    warnings.append(
                        "far outside the training data (" + feature_words(outside) + "): " +
                        ("the interval is widened; treat the figure as a rough estimate" if widens(outside)
                         else "the residual's trend in cluster size carries the figure there"))
                if uncalibrated[i]:
                    warnings.append(UNCALIBRATED_NOTE)
            warnings += [m.note() for m in table.memory_short(i)] + table.memory_tight_notes(i)
            samples = samples_per_step(config, b)
            split = None if common_batch(config, b) is not None else {
                g.instance_type: batch_figure(gb) for g, gb in zip(config.groups, group_batches(config, b))}
            out.append(Prediction(config.format(), batch_figure(samples / config.world_size), it,
                                  (float(table.low_ms[i]), float(table.high_ms[i])), samples / (it / 1e3),
                                  str(table.source[i]), warnings, table.parts(i), table.memory_gib(i), split))
        return out


@dataclass
class PredictionTable:
    """Predictions for many rows at once (:func:`predict_table`), one entry per row."""

    iteration_ms: "np.ndarray"
    low_ms: "np.ndarray"
    high_ms: "np.ndarray"
    source: "np.ndarray"  # measured | predicted | transferred
    measured_rel_ci: "np.ndarray"  # the measured run's own 95% CI (0 where not measured)
    features: "pd.DataFrame"  # the builder's feature table (sim_ms, compute_ms, batch bounds included)
    estimates: list[RowEstimate]
    out_of_range: list[list[str]]  # the features far outside the training data, per row
    compute_source: "np.ndarray"  # COMPUTE_SOURCES: where the row's compute comes from
    network_source: "np.ndarray"  # NETWORK_SOURCES: where its communication comes from
    overlap_source: "np.ndarray"  # OVERLAP_SOURCES: how much of it backward hides
    gradient_source: "np.ndarray"  # GRADIENT_SOURCES: the gradient size it is simulated with
    # per row, one worker's tensor memory on each group's GPU (srifty.features.memory; empty: unknown)
    memory: list[list[MemoryNeed]] = field(default_factory=list)

    def memory_gib(self, i: int) -> float | None:
        """Row ``i``'s per-worker tensor memory (GiB; the most of its groups'), None where unknown."""
        return max((m.need_gib for m in self.memory[i]), default=None) if self.memory else None

    def memory_short(self, i: int) -> list[MemoryNeed]:
        """Row ``i``'s groups whose GPU cannot hold one worker."""
        return [m for m in self.memory[i] if not m.fits] if self.memory else []

    def memory_tight_notes(self, i: int) -> list[str]:
        """Row ``i``'s groups whose GPU holds one worker with little to spare, each's note
        (MemoryNeed.tight_note)."""
        return [n for m in (self.memory[i] if self.memory else []) if (n := m.tight_note())]

    def sources(self) -> dict[str, "np.ndarray"]:
        """Each row's source of each part (PART_SOURCES), as ``parts`` gives them."""
        return {"compute_source": self.compute_source, "network_source": self.network_source,
                "overlap_source": self.overlap_source, "gradient_source": self.gradient_source}

    def compute_transfer(self, i: int) -> list[str] | None:
        """How row ``i``'s compute was carried from a profiled type (srifty.features.COMPUTE_TRANSFERS),
        where it was; else None."""
        return list(self.estimates[i].compute_transfer) if self.compute_source[i] == "transferred" else None

    def parts(self, i: int) -> dict[str, Any]:
        """Row ``i``'s step split into the slowest worker's compute alone and the rest (exposed
        communication and what else data parallelism costs), with where each came from."""
        compute = float(self.features["compute_ms"].iloc[i])
        carried = self.compute_transfer(i)
        sources = {k: str(v[i]) for k, v in self.sources().items()}
        return {"compute_ms": round(compute, 4), "compute_source": sources["compute_source"],
                "compute_transfer": carried,
                "communication_ms": round(max(float(self.iteration_ms[i]) - compute, 0.0), 4),
                "network_source": sources["network_source"], "overlap_source": sources["overlap_source"],
                "gradient_source": sources["gradient_source"]}


# Each part's sources, from the most certain to the least: a figure composed of several rows (a
# mix of two types in recommend) takes the least certain of theirs (:func:`least_certain`).
# Where a prediction's compute comes from: the profile's own run of this configuration; the type's
# profile at this per-worker batch; the type's profile at other batches (interpolated, or
# extrapolated with bounds); another type's profile, carried over by device specs.
COMPUTE_SOURCES = ("measured", "profiled", "profiled-other-batch", "transferred")
# Where its communication comes from: nothing to communicate (one worker); the profile's own run;
# emulated links fitted on allreduce sweeps; link efficiencies fitted on runs or nccl-tests of these
# instance types; a prior: the catalog's link figures with efficiencies fitted on other types; or
# nothing known (no gradient size).
NETWORK_SOURCES = ("none", "measured", "emulated-sweeps", "fitted-on-type", "prior", "unknown")
# How much of it backward hides: OVERLAP_SOURCES (srifty.features), which the builder's estimate states.
# The gradient size it is simulated with: nothing to communicate (one worker); the profile's own
# run; stated (a parameter count, gradient bytes, or the buckets srifty recorded); read off the
# profile's single-node sync times (srifty.features.overlap.estimate_gradient_size); or none known.
GRADIENT_SOURCES = ("none", "measured", "stated", "read-from-sync", "unknown")
SOURCE_CERTAINTY = {"compute_source": COMPUTE_SOURCES, "network_source": NETWORK_SOURCES,
                    "overlap_source": OVERLAP_SOURCES, "gradient_source": GRADIENT_SOURCES}
PART_SOURCES = tuple(SOURCE_CERTAINTY)  # the parts' source fields, as PredictionTable.parts names them


def least_certain(part: str, sources: Iterable[str]) -> str:
    """The least certain of ``sources`` for ``part`` (a key of SOURCE_CERTAINTY)."""
    order = SOURCE_CERTAINTY[part]
    return max(sources, key=order.index)


def gradient_source(builder: FeatureBuilder, config: ClusterConfig) -> str:
    """Where the gradient size of ``config``'s allreduce comes from (GRADIENT_SOURCES, less
    "measured", which the caller knows)."""
    if config.world_size < 2:
        return "none"
    if not builder.grad_bytes:
        return "unknown"
    return "read-from-sync" if builder.grad_bytes_estimated else "stated"


def fitted_link_types(predictor: "Predictor | None", link_scale: LinkScale) -> dict[str, frozenset[str]]:
    """Per kind of link within a node, the instance types whose efficiency for it was fitted on
    their own measurements: PCIe on several workers on a node (the model's corpus), NVLink on
    nccl-tests (``link_scale.fast_links``). Networks between nodes: LinkScale.network_measured."""
    meta = predictor.meta if predictor is not None else {}
    return {"pcie": frozenset(meta.get("multi_worker_node_types", ())),
            "nvlink": frozenset(t for t, *_ in link_scale.fast_links)}


def network_source(builder: FeatureBuilder, config: ClusterConfig, fitted: dict[str, frozenset[str]]) -> str:
    """Where the communication of ``config`` (resolved) comes from (NETWORK_SOURCES, less
    "measured", which the caller knows). ``fitted``: :func:`fitted_link_types`."""
    if config.world_size == 1:
        return "none"
    if not builder.grad_bytes:
        return "unknown"
    hws = [builder.hardware(g.instance_type) for g in config.groups]
    if all(h.emulated for h in hws):
        return "emulated-sweeps"
    if config.nodes > 1:  # the network between nodes: measured on these types (LinkScale) or a prior
        return "fitted-on-type" if all(builder.link_scale.network_measured(h) for h in hws) else "prior"
    mine = all(g.instance_type in fitted.get(h.intra_kind, frozenset()) for g, h in zip(config.groups, hws))
    return "fitted-on-type" if mine else "prior"


def predict_table(predictor: "Predictor | None", builder: FeatureBuilder,
                  rows: Sequence[tuple[ClusterConfig, RowBatch]]) -> PredictionTable:
    """The one prediction path: every command's figures come from here.

    Rows are (resolved configuration, per-worker batch, or one per node group). A row the profile measured gets that
    run's step time and its own 95% CI; one worker gets the compute curve itself (its interval
    stretched to hold it); others get the latency model (``predictor``) over the simulator, or,
    with ``predictor`` None, the simulator alone (the interval is then the point). A loose
    profile's uncertainty widens every interval built on it. The model runs once over all rows.
    """
    import numpy as np

    estimates = [builder.row_estimate(config, b) for config, b in rows]
    X = builder.frame_of(estimates)
    sim = X["sim_ms"].to_numpy(dtype=float)
    if predictor is not None:
        residual, out_of_range = predictor.latency.residual(X), predictor.latency.out_of_range(X)
        it = np.asarray(predictor.latency.predict(X, residual), dtype=float)
        lo, hi = (np.asarray(a, dtype=float) for a in predictor.latency.predict_interval(X, residual, out_of_range))
    else:
        it, lo, hi = sim.copy(), sim.copy(), sim.copy()
        out_of_range = [[] for _ in rows]
    it = np.where(X["world_size"].to_numpy(dtype=float) == 1, sim, it)  # one worker: the compute curve
    alone = (X["world_size"].to_numpy(dtype=float) == 1) & (X["by_operators"].to_numpy(dtype=float) > 0)
    # one worker from the operator model: no residual, so the residual's training range says nothing
    out_of_range = [[] if alone[i] else names for i, names in enumerate(out_of_range)]
    widen = np.array([e.compute_rel_ci for e in estimates], dtype=float)
    lo, hi = np.minimum(lo, it) * (1 - widen), np.maximum(hi, it) * (1 + widen)
    source = np.where(X["transferred"].to_numpy() > 0.5, "transferred", "predicted").astype(object)
    measured_ci = np.zeros(len(rows))
    fitted = fitted_link_types(predictor, builder.link_scale)
    compute_source = np.array([
        "transferred" if e.transferred else "profiled" if e.batch_bounds == (1.0, 1.0) else "profiled-other-batch"
        for e in estimates], dtype=object)
    net_source = np.array([network_source(builder, config, fitted) for config, _ in rows], dtype=object)
    hidden = np.array([e.overlap_source for e in estimates], dtype=object)
    sized = np.array([gradient_source(builder, config) for config, _ in rows], dtype=object)
    for i, (config, b) in enumerate(rows):
        common = common_batch(config, b)
        run = builder.job.measured_run(config, int(common)) if common is not None and common.is_integer() else None
        if run is not None:  # measured: the point, and the run's own CI
            ci = measured_ci[i] = builder.job.measured_rel_ci(run)
            it[i], lo[i], hi[i], source[i] = run.step_ms, run.step_ms * (1 - ci), run.step_ms * (1 + ci), "measured"
            compute_source[i] = "measured"
            net_source[i] = hidden[i] = sized[i] = "measured" if config.world_size > 1 else "none"
    memory = [[m for g, gb in zip(config.groups, group_batches(config, b))
               if (m := builder.job.memory_need(builder.hardware(g.instance_type), gb))] for config, b in rows]
    return PredictionTable(it, lo, hi, source, measured_ci, X, estimates, out_of_range, compute_source, net_source,
                           hidden, sized, memory)

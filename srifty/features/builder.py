"""The feature row of a (configuration, per-worker batch) for one job: the simulator's estimate
and the numbers the residual model reads (:class:`FeatureBuilder`)."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Sequence

from srifty import simulate
from srifty.configspec import ClusterConfig, NodeGroup
from srifty.errors import SriftyError
from srifty.opmodel import GpuStepModel, StepTerms, shipped_step_model
from srifty.features.hardware import DEFAULT_INTRA_GBYTES_PER_S, Hardware, both_measured, hardware_of, transfer_speeds
from srifty.features.job import LOOSE_PROFILE_CI, ComputeCurve, JobProfile, _bytes_per_param
from srifty.features.links import PRIOR_NETWORK_SPREAD, LinkScale
from srifty.simulate import Link

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from srifty.catalog import Catalog
    from srifty.features.overlap import OverlapFit

# A GPU step below this share of its spec FLOPS (forward + backward = 3 x the counted forward) is
# said to be launch-bound in warnings: on the H200 (profiles/h200, docs/gpu-check.md) cnn_resnet and
# mlp_recsys reach 0.1-3% at every batch and hardly grow with it, transformer_lm 6% at batch 8, 20%
# at 32 and 45% at 128, growing 1.7x from 32 to 128. A judgment for a warning, not a model input.
LAUNCH_BOUND_PEAK_SHARE = 0.10
# how compute profiled on one type is carried to another (FeatureBuilder.transfer_method): as it
# is, from a type with the same GPU board (only the hosts differ); the operator model (a CPU
# profile's operator count, on a GPU); the measured CPU factors of both emulated hosts; the spec
# speeds with both GPUs' measured speed factors; the spec speeds alone
COMPUTE_TRANSFERS = ("same-gpu", "operator-model", "cpu-factors", "gpu-speed-factors", "spec-speed")

FEATURES = [
    "log_sim_ms", "log_compute_ms", "log_allreduce_ms", "comm_to_compute", "exposed_to_compute",
    "nodes", "world_size", "max_workers_per_node", "min_workers_per_node", "imbalance", "n_types",
    "log_grad_mb", "grad_bytes_estimated", "log_local_batch", "log_compute_per_sample_ms",
    "inter_gbytes_per_s", "intra_gbytes_per_s", "gpu_fp32_tflops", "gpu_mem_gbytes_per_s", "transferred",
    "emulated", "cpu_load",
]

# said of a multi-worker estimate for a job whose gradient size srifty cannot know
GRADIENT_UNKNOWN_NOTE = ("gradient size unknown: communication not simulated, so the figure is compute alone and "
                         "the interval spans the slowdowns the training corpus's multi-worker runs showed; give "
                         "param_count or grad_bytes when importing (srifty profile records them)")


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

READY_UNKNOWN_NOTE = (
    "the profile does not record when its gradients become ready during backward (an imported trace): the "
    "prediction lets backward hide the allreduce as DDP's buckets usually allow, and the interval reaches the "
    "step with none of it hidden; `srifty profile` of the training script records it")

# said of a multi-worker estimate on GPUs for a job whose ready times were recorded on a CPU
READY_ON_CPU_NOTE = (
    "the profile recorded when its gradients become ready on a CPU, and a GPU runs backward's layers at other "
    "relative speeds (the same model's buckets ready two to three times earlier or later on an H200 than on a CPU): "
    "the prediction lets backward hide the allreduce as DDP's buckets usually allow, and the interval reaches the "
    "step with none of it hidden; a profile on one GPU records it")


def _derived_runs(fit: "OverlapFit") -> str:
    """How many of an overlap read's runs had a sync time derived from their steps, for its note."""
    return f", {fit.derived} of them a run's step less the single-worker step at its batch" if fit.derived else ""


def overlap_checked_note(job: "JobProfile") -> str:
    """The note of a job whose sync times were read and kept DDP's usual overlap (srifty.features.overlap)."""
    fit = job.overlap_check
    assert fit is not None
    return (f"the profile does not record when {job.model}'s gradients become ready (an imported trace), and its "
            f"measured sync times ({fit.runs} runs{_derived_runs(fit)}) do not overturn DDP's usual overlap, which "
            f"misses them by x{math.exp(fit.default_error):.2f} ({fit.default_kept_because}): the prediction lets "
            "backward hide the allreduce as DDP's buckets usually allow, with the interval of a model whose overlap "
            "was read; `srifty profile` of the training script records it")


def overlap_fitted_note(job: "JobProfile") -> str:
    """The note of a job whose overlap window was read off its sync times (srifty.features.overlap)."""
    fit = job.overlap_fit
    assert fit is not None
    return (f"the profile does not record when {job.model}'s gradients become ready (an imported trace), and its "
            f"measured sync times show that backward hides little of its allreduce: the prediction lets the buckets "
            f"become ready in the last {fit.window:.0%} of its compute (fitted on {fit.runs} runs' sync "
            f"times{_derived_runs(fit)}, which DDP's usual overlap misses by x{math.exp(fit.default_error):.1f}), "
            "and the interval reaches down to the step at that usual overlap; `srifty profile` of the training "
            "script records it")


def gradient_estimated_note(grad_bytes: float) -> str:
    """Said of a multi-worker estimate for a job whose gradient size srifty inferred from its
    single-node sync times (srifty.features.overlap.estimate_gradient_size) instead of reading it."""
    return (f"gradient size estimated from the profile's single-node sync times ({grad_bytes / 1e6:.3g} MB), not "
            "stated: communication is simulated on that estimate, which those times fix only where backward hides "
            "little of the allreduce (Pollux models held out so: deepspeech2, whose allreduce shows, to 9% MAPE, "
            "the other three 15-25% too fast; docs/latency-model.md, section 4); give param_count or grad_bytes "
            "when importing (srifty profile records them)")


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


# how much an assumption has to move the simulated step before a row is told about it (0.5%)
MOVES_THE_STEP = 0.005
# an intra-node link that never holds a ring back (GB/s): the fast end of one no source states
UNBOUNDED_GBYTES_PER_S = 1e6


def readable_ms(ms: float) -> str:
    """A time in a note: whole milliseconds from 100 up, three significant figures below; never in
    exponent form (1,166, not 1.17e+03)."""
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.3g}"


def prior_network_note(prior: Sequence[Hardware], low: float, high: float) -> str:
    """What a row across nodes of ``prior`` (types whose network nobody measured) is told: where
    each network's figure comes from, and how far the interval spans for it (``low``..``high`` of
    the step)."""
    names = ", ".join(dict.fromkeys(h.name for h in prior))
    kinds = {h.inter_kind for h in prior}
    source = " and ".join(k for k in ("the instance's rate and AWS's per-flow limit" if "tcp" in kinds else "",
                                      "the catalog's EFA rate" if "efa" in kinds else "") if k)
    sweep = "`srifty profile --collectives --backend ec2 --nodes 2 --instance-types TYPE`"
    return (f"the network between {names} nodes was never measured: its bandwidth is a prior from {source} "
            f"(latency-model.md, section 3), and the interval spans x{low:.2f} to x{high:.2f} of the step for it"
            + (" (down to TCP, which NCCL runs over without the EFA plugin)" if "efa" in kinds else "")
            + (f"; {sweep} measures it, for a model fitted with that profile in its corpus (`srifty fit`)"
               if "tcp" in kinds else "")
            + (f"; srifty's EC2 backend attaches no EFA interface, so its sweep ({sweep}) measures only that TCP "
               "fallback, the interval's slow end" if "efa" in kinds else ""))


def intra_unstated_note(unstated: Sequence[Hardware], low: float, high: float) -> str:
    """What a row is told whose step depends on the intra-node link of ``unstated`` (types whose
    link no source states and nobody measured): how far the interval spans for it (``low``..``high``
    of the step)."""
    names = ", ".join(dict.fromkeys(h.name for h in unstated))
    return (f"{names}: no source srifty ships states the intra-node link (latency-model.md, section 3), so it "
            f"is taken as PCIe at {DEFAULT_INTRA_GBYTES_PER_S:g} GB/s, and the interval spans x{low:.2f} to "
            f"x{high:.2f} of the step for it (from half that rate to a link that never holds the ring back); "
            "`srifty profile --collectives --backend ec2 --nodes 2 --instance-types TYPE` measures it, for a model "
            "fitted with that profile in its corpus (`srifty fit`)")


def node_share_note(instance_type: str, nodes: int, share: float) -> str:
    """What a row across ``nodes`` nodes of ``instance_type`` is told where its network is taken
    at ``share`` of the type's figure (LinkScale.tcp_node_shares)."""
    return (f"{instance_type}'s network across {nodes} nodes is taken at x{share:.2f} of its fitted figure, as its "
            f"measured runs across {nodes} nodes showed (latency-model.md, section 3, 'The network at each node count')")


def loose_profile_note(model: str, instance_type: str, rel_ci: float) -> str:
    """The warning for a prediction built on a profile looser than LOOSE_PROFILE_CI."""
    return (f"{model}'s profile on {instance_type} knows its step time to ±{rel_ci:.0%} only (95% CI): "
            "intervals built on it are widened by that; re-profile with a longer --max-seconds")


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
        return self.overlap_source in ("recorded-on-cpu", "default")

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

    @property
    def step_alone_ms(self) -> float:
        """The slowest worker's step without communication: compute, then optimizer and other."""
        return max(self.cycles)[0]

    @property
    def compute_ms(self) -> float:
        """The slowest worker's forward and backward."""
        return max(self.cycles)[1]


class FeatureBuilder:
    """Features of (configuration, per-worker batch) rows for one job on one catalog."""

    def __init__(self, job: JobProfile, catalog: "Catalog", link_scale: "LinkScale | None" = None,
                 step_model: GpuStepModel | None = None) -> None:
        self.job = job
        self.catalog = catalog
        self.link_scale = link_scale or LinkScale()
        # carries a CPU profile's operator count to GPUs (srifty.opmodel); the shipped one by default
        self.step_model = step_model or shipped_step_model()
        self._by_operators: dict[str, bool] = {}
        self._workers: dict[tuple[str, float], tuple] = {}
        self._hw: dict[str, Hardware] = {}
        self._node_intra: dict[str, Link] = {}
        self._curves: dict[str, ComputeCurve | None] = {}
        self._sources: dict[str, str | None] = {}
        self._kept: dict[tuple[str, float, str], float] = {}
        self._op_terms: dict[tuple[str, float], StepTerms] = {}
        self._rel_ci: dict[str, float | None] = {}
        self._estimates: dict[tuple[str, float], RowEstimate] = {}
        self._buckets: tuple[list[float], Sequence[float] | None] | None = None
        self.grad_bytes, self.grad_bytes_estimated = self._resolve_grad_bytes()

    def hardware(self, name: str) -> Hardware:
        if name not in self._hw:
            self._hw[name] = self.link_scale.apply(hardware_of(self.catalog, name))
        return self._hw[name]

    def node_intra(self, name: str) -> Link:
        """The intra-node link of a ring that stays on one node of ``name`` (LinkScale.within_node)."""
        if name not in self._node_intra:
            self._node_intra[name] = self.link_scale.within_node(hardware_of(self.catalog, name), self.hardware(name))
        return self._node_intra[name]

    def curve(self, name: str) -> ComputeCurve | None:
        """``name``'s measured compute curve; on a GPU, for a job whose profile counted its
        operators, shaped by the operator model beyond the measured batches (flat while kernel
        launches and the host set the step, rising with the arithmetic after)."""
        if name not in self._curves:
            curve = self.job.compute_curve(name)
            if curve is not None and self._operator_model_on(name):
                curve = curve.with_shape(lambda b: self.step_model.step_ms(self.operator_terms(name, b)))
            self._curves[name] = curve
        return self._curves[name]

    def _resolve_grad_bytes(self) -> tuple[float | None, bool]:
        """(gradient bytes, whether they were estimated rather than stated): the job's grad_bytes
        (read off its sync times where ``job.grad_bytes_estimated``:
        srifty.features.overlap.with_estimated_gradient_size), else its parameter count at its
        precision; (None, True) when neither is known."""
        job = self.job
        if job.grad_bytes:
            return float(job.grad_bytes), job.grad_bytes_estimated
        if job.param_count:
            return float(job.param_count * _bytes_per_param(job.precision)), False
        return None, True

    def _speeds(self, a: str, b: str) -> tuple[float, float] | None:
        """Relative compute speeds of types ``a`` and ``b`` on one basis: the measured CPU factors
        of emulated types when both have one (speed = 1/factor), else the hardware figures."""
        fa, fb = self.job.cpu_factors.get(a), self.job.cpu_factors.get(b)
        if fa and fb:
            return 1.0 / fa, 1.0 / fb
        sa, sb = transfer_speeds(self.hardware(a), self.hardware(b), self.job.precision, self.job.conv_flop_share)
        if sa is None or sb is None:
            return None
        return sa, sb

    def _transfer(self, instance_type: str, batch: float, curve_of: Callable[[str], ComputeCurve | None],
                  part: str | None = None) -> tuple[float, str] | None:
        """(time on ``instance_type``, the profiled type it comes from): the nearest profiled type's
        ``curve_of`` time carried by the speed ratio; with ``part`` ("compute" or "post"), the ratio
        carries only what :meth:`kept_share` of that part does not keep."""
        best = None
        for src in self.job.instance_types:
            sc = curve_of(src)
            sp = self._speeds(src, instance_type)
            if sc is None or sp is None:
                continue
            kept = self.kept_share(src, batch, part) if part else 0.0
            cand = (abs(math.log(sp[0] / sp[1])), src, sc.at(batch) * (kept + (1.0 - kept) * sp[0] / sp[1]))
            best = min(best, cand) if best else cand
        return (best[2], best[1]) if best else None

    def kept_share(self, src: str, batch: float, part: str = "compute") -> float:
        """The share of ``src``'s profiled ``part`` of the step at ``batch`` ("compute": forward and
        backward; "post": the optimizer and loading the next batch) that another GPU leaves as it
        is: the launches and host work of the operator model's step there (srifty.opmodel: its
        host floor, per-kernel cost and host loading against its device time); for the compute, at
        most all but the arithmetic at the spec peak (:meth:`peak_share`). 0 (all carried by the
        ratio) without an operator count, or off a GPU. Once per (type, batch, part): the transfer,
        its bounds and its note each read it."""
        key = (src, float(batch), part)
        if key not in self._kept:
            if not self._operator_model_on(src):
                self._kept[key] = 0.0
            else:
                terms = self.operator_terms(src, batch)
                (fixed, fixed_post), (compute, post) = self.step_model.fixed_ms(terms), self.step_model.split_ms(terms)
                if part == "post":
                    self._kept[key] = fixed_post / post if post > 0 else 0.0
                else:
                    arithmetic = min(self.peak_share(src, batch) or 0.0, 1.0)
                    self._kept[key] = min(fixed / compute, 1.0 - arithmetic) if compute > 0 else 0.0
        return self._kept[key]

    def by_operators(self, instance_type: str) -> bool:
        """Whether ``instance_type``'s compute comes from the operator model (srifty.opmodel): a GPU
        type nobody profiled, for a job profiled on CPUs only whose profile counted its operators
        (a GPU profile is carried to other GPUs by the speed ratio instead, all but what
        :meth:`kept_share` keeps)."""
        if instance_type not in self._by_operators:
            gpu_profiled = any(self.catalog.has(t) and self.catalog.get(t).gpu_count > 0
                               for t in self.job.instance_types)
            self._by_operators[instance_type] = (not gpu_profiled and self.curve(instance_type) is None
                                                 and self._operator_model_on(instance_type))
        return self._by_operators[instance_type]

    def _operator_model_on(self, instance_type: str) -> bool:
        """Whether the operator model can put this job's step on ``instance_type``: an operator
        count, a step model, and a real GPU with spec FLOPS (of the job's precision) and bandwidth."""
        hw = self.hardware(instance_type)
        return bool(self.job.operators is not None and self.step_model is not None and not hw.emulated
                    and hw.peak_tflops(self.job.precision) and hw.mem_gbytes_per_s)

    def operator_terms(self, instance_type: str, batch: float) -> StepTerms:
        """The operator model's terms of this job's step at ``batch`` on ``instance_type``'s spec
        figures (JobProfile.operator_terms), once per (type, batch)."""
        key = (instance_type, float(batch))
        if key not in self._op_terms:
            hw = self.hardware(instance_type)
            self._op_terms[key] = self.job.operator_terms(batch, hw.peak_tflops(self.job.precision),
                                                          hw.mem_gbytes_per_s)
        return self._op_terms[key]

    def operator_step_ms(self, instance_type: str, batch: float) -> tuple[float, float]:
        """(compute, post) ms of one step at ``batch`` on ``instance_type`` by the operator model."""
        return self.step_model.split_ms(self.operator_terms(instance_type, batch))

    def input_window_ratio(self, instance_type: str, batch: float) -> float:
        """The operator model's step at ``batch`` with the host's input window as the profile measured
        it, over the step with that window carried per sample (the estimate). One profiled batch
        cannot say which part of the window is loading, which grows with the batch, and which is
        the loop's and the allocator's own work, which does not: the interval reaches both readings
        (:meth:`batch_bounds`). 1 at the profiled batch, and where profiles at two or more batches
        measured the window's fixed and per-sample parts (JobProfile.host_input_fixed_ms)."""
        if self.job.host_input_fixed_ms is not None:
            return 1.0
        terms = self.operator_terms(instance_type, batch)
        as_profiled = replace(terms, host_input_ms=self.job.host_input_ms_per_sample * self._profiled_batch())
        return self.step_model.step_ms(as_profiled) / self.step_model.step_ms(terms)

    def operator_note(self, instance_type: str, batch: float) -> str:
        gpu = self.catalog.get(instance_type).gpu_name
        (low, high), _ = self.batch_bounds(instance_type, batch)
        fitted = ", ".join(sorted(self.step_model.gpus))
        window = self.input_window_ratio(instance_type, batch)
        return (f"compute on {instance_type} predicted from the operators the CPU profile counted (kernel launches, "
                f"arithmetic and memory traffic on {gpu}'s spec figures; fixed costs fitted on {fitted} measurements"
                + ("" if gpu in self.step_model.gpus else f", none on {gpu}") +
                f"): the interval spans x{low:.2f} to x{high:.2f} of it"
                + (f", reaching the step with the host's input window as profiled, not per sample (x{window:.2f}): "
                   f"profiles at two batches measure how it grows (`srifty profile {self.job.script or 'SCRIPT'} "
                   f"--batch-size {self._profiled_batch()},{batch:g} --out DIR/`)"
                   if abs(math.log(window)) > 0.02 else "")
                + f"; profile on {instance_type} for a measured figure")

    def _profiled_batch(self) -> int:
        """The batch of the profile whose operator count the job keeps."""
        assert self.job.operators is not None
        return self.job.operators.batch_size

    def compute_source(self, instance_type: str) -> str | None:
        """The profiled type whose compute curve ``instance_type``'s compute comes from: itself when
        profiled, else the one it is transferred from (None: neither); once per type, as the
        choice depends on the types' speeds, not on the batch."""
        if instance_type not in self._sources:
            if self.curve(instance_type) is not None:
                self._sources[instance_type] = instance_type
            else:
                got = self._transfer(instance_type, 1.0, self.curve)
                self._sources[instance_type] = got[1] if got else None
        return self._sources[instance_type]

    def profiled_range(self, instance_type: str) -> tuple[float, float]:
        """The least and most batch ``instance_type``'s compute was measured at ((0, 0): none)."""
        src = self.compute_source(instance_type)
        curve = self.curve(src) if src else None
        return curve.batch_range if curve else (0.0, 0.0)

    def profiled_batches(self, instance_type: str) -> str:
        """'batch B profiled on T' / 'batches B0-B1 profiled on T': what ``instance_type``'s compute was measured at."""
        b0, b1 = self.profiled_range(instance_type)
        if not b1:
            return "no profiled batch"
        return (f"batch {b0:g}" if b0 == b1 else f"batches {b0:g}-{b1:g}") + \
            f" profiled on {self.compute_source(instance_type)}"

    def peak_share(self, instance_type: str, batch: float) -> float | None:
        """The share of its GPU's spec FLOPS that ``instance_type``'s compute source reaches at
        ``batch``: forward + backward taken as 3 x the forward FLOPs the profiler counted, over the
        compute curve's time (None: no FLOP count, no curve, or no GPU spec, e.g. CPU hosts)."""
        src = self.compute_source(instance_type)
        fpps = self.job.forward_flops_per_sample
        if src is None or not fpps:
            return None
        peak = self.hardware(src).peak_tflops(self.job.precision)
        if not peak or self.hardware(src).emulated:
            return None
        return 3.0 * fpps * batch / (self.curve(src).at(batch) / 1e3) / (peak * 1e12)

    def launch_bound_note(self, instance_type: str, batch: float) -> str:
        """'' or the clause saying that the profiled step (at the profiled batch nearest ``batch``) is
        far below its GPU's peak."""
        b0, b1 = self.profiled_range(instance_type)
        share = self.peak_share(instance_type, min(max(batch, b0), b1))
        if share is None or share >= LAUNCH_BOUND_PEAK_SHARE:
            return ""
        return (f" (the profiled step reaches {share:.1%} of {self.compute_source(instance_type)}'s spec FLOPS: kernel "
                "launches and the host more than the GPU's arithmetic set its time, so it changes less than a "
                "FLOPS-based ratio or the batch says)")

    def transfer_bounds(self, instance_type: str, batch: float) -> tuple[float, float] | None:
        """(least, most) compute on ``instance_type`` over its estimate, as ratios, for compute
        carried from another GPU by the speed ratio k (None: profiled there, carried otherwise, or
        neither a FLOP nor an operator count). A step is its arithmetic, at least the share u of it at the source's spec
        peak (:meth:`peak_share`), plus launches and host work, which another GPU leaves about as
        they are. So the step lies between the profiled one with only that arithmetic carried,
        1 - u + u k of it, and the whole step carried, k of it; the estimate carries all but
        :meth:`kept_share` (all of it without an operator count), which lies between the two."""
        if self.transfer_method(instance_type) not in ("gpu-speed-factors", "spec-speed"):
            return None
        src = self.compute_source(instance_type)
        speeds = self._speeds(src, instance_type) if src else None
        kept = self.kept_share(src, batch) if src else 0.0
        share = self.peak_share(instance_type, batch)
        if speeds is None or (share is None and not kept):
            return None
        # no FLOP count beside an operator count: nothing says how much arithmetic there is, at least
        k, u = speeds[0] / speeds[1], min(share or 0.0, 1.0)
        estimate = kept + (1.0 - kept) * k
        least, most = sorted((1.0 - u + u * k, k))
        return min(least / estimate, 1.0), max(most / estimate, 1.0)

    def transfer_note(self, instance_type: str, batch: float) -> str:
        """'' or the clause saying what :meth:`kept_share` kept and how far :meth:`transfer_bounds` reach."""
        bounds = self.transfer_bounds(instance_type, batch)
        if bounds is None or (abs(math.log(bounds[0])) < 0.01 and abs(math.log(bounds[1])) < 0.01):
            return ""
        src = self.compute_source(instance_type)
        kept = self.kept_share(src, batch) if src else 0.0
        return ((f"; the operator model puts {kept:.0%} of the profiled compute in kernel launches and host work, "
                 "kept as they are, the rest carried by the ratio" if kept > 0 else "")
                + f"; its interval spans x{bounds[0]:.2f} to x{bounds[1]:.2f} of the figure, from the step with only "
                f"its arithmetic ({min(self.peak_share(instance_type, batch) or 0.0, 1.0):.1%} of it at the spec peak) "
                f"carried from {src} to the whole step carried by the ratio")

    def batch_bounds(self, instance_type: str, batch: float) -> tuple[tuple[float, float], str | None]:
        """(least, most) compute at ``batch`` over the estimate, as ratios (ComputeCurve.bounds of
        ``instance_type``'s curve, or of the type its compute is transferred from), and the warning
        where ``batch`` lies outside the batches measured there."""
        if self.by_operators(instance_type):  # the operator model's own interval, at any batch
            lo, hi = self.step_model.log_bounds(self.catalog.get(instance_type).gpu_name)
            window = self.input_window_ratio(instance_type, batch)
            return (math.exp(lo) * min(window, 1.0), math.exp(hi) * max(window, 1.0)), None
        src = self.compute_source(instance_type)
        curve = self.curve(src) if src else None
        if curve is None:
            return (1.0, 1.0), None
        bounds, at = curve.bounds(batch), curve.at(batch)
        # carried from another GPU, the step may keep its launches and host work, or not (transfer_bounds)
        carried = self.transfer_bounds(instance_type, batch) or (1.0, 1.0)
        ratios = (bounds[0] / at * carried[0], bounds[1] / at * carried[1])
        if curve.covers(batch):
            return ratios, None
        note = (f"per-worker batch {batch:g} is outside the {self.profiled_batches(instance_type)}: its compute is "
                f"extrapolated ({readable_ms(at)} ms there, anywhere from {readable_ms(bounds[0])} to "
                f"{readable_ms(bounds[1])} ms), and the "
                f"interval takes that in; profile at batch {batch:g} for a measured figure"
                # a transferred type's compute note already carries the launch-bound clause
                + (self.launch_bound_note(instance_type, batch) if src == instance_type else ""))
        return ratios, note

    def compute_ms(self, instance_type: str, batch: float) -> tuple[float, bool, str | None]:
        """Per-worker compute at ``batch`` on ``instance_type`` and whether it was transferred.

        A type with a measured (single-worker) profile uses it; only a type never profiled is
        transferred from the nearest profiled one by the speed ratio (see :meth:`_speeds`).
        """
        c = self.curve(instance_type)
        if c is not None:
            return c.at(batch), False, None
        if self.by_operators(instance_type):
            return self.operator_step_ms(instance_type, batch)[0], True, self.operator_note(instance_type, batch)
        got = self._transfer(instance_type, batch, self.curve, "compute")
        if got is None:
            raise SriftyError(
                f"Cannot transfer {self.job.model}'s compute time to {instance_type}: no spec figures to compare "
                f"it with {', '.join(self.job.instance_types)}.",
                f"Profile {self.job.model} on {instance_type} (or a type with the same GPU).")
        method = self.transfer_method(instance_type)
        if method == "same-gpu":
            return got[0], True, (f"compute on {instance_type} taken as profiled on {got[1]}, which has the same GPU "
                                  f"({self.catalog.get(instance_type).gpu_name}); the hosts' CPUs and buses differ, "
                                  f"which the figure does not see; profile on {instance_type} for a measured figure")
        if method == "cpu-factors":
            return got[0], True, f"compute on {instance_type} transferred from {got[1]} by measured CPU factor ratio"
        return got[0], True, (f"compute on {instance_type} transferred from {got[1]} by GPU/CPU spec ratio"
                              + (" with measured GPU speed factors" if method == "gpu-speed-factors" else "")
                              + ", a rough "
                              "estimate (docs/ACCURACY.md, 'Compute transfer across GPUs', shows how far such ratios "
                              f"miss); profile on {instance_type} for a measured figure"
                              + self.launch_bound_note(instance_type, batch) + self.transfer_note(instance_type, batch))

    def transfer_method(self, instance_type: str) -> str | None:
        """How ``instance_type``'s compute is carried from a profiled type (None: profiled there):
        by the operator model, by both types' measured CPU factors (emulated hosts), by the spec
        speeds with both GPUs' measured speed factors, or by the spec speeds alone
        (:data:`COMPUTE_TRANSFERS`)."""
        if self.curve(instance_type) is not None:
            return None
        if self.by_operators(instance_type):
            return "operator-model"
        src = self.compute_source(instance_type)
        if src is None:
            return None
        if self.same_gpu(instance_type, src):
            return "same-gpu"
        if self.job.cpu_factors.get(instance_type) and self.job.cpu_factors.get(src):
            return "cpu-factors"
        if both_measured(self.hardware(instance_type), self.hardware(src), self.job.precision):
            return "gpu-speed-factors"
        return "spec-speed"

    def same_gpu(self, a: str, b: str) -> bool:
        """Whether types ``a`` and ``b`` carry the same GPU board (name and memory), so that a
        worker's compute moves between them unchanged and only the hosts differ."""
        if not (self.catalog.has(a) and self.catalog.has(b)):
            return False
        ta, tb = self.catalog.get(a), self.catalog.get(b)
        return bool(ta.gpu_count and tb.gpu_count and ta.gpu_name and ta.gpu_name == tb.gpu_name
                    and ta.gpu_memory_gib == tb.gpu_memory_gib)

    def post_ms(self, instance_type: str, batch: float) -> float:
        """Optimizer + other time per step after the allreduces (0 where no profile splits it)."""
        c = self.post_ms_curve(instance_type)
        if c is not None:
            return c.at(batch)
        if self.curve(instance_type) is None and self.by_operators(instance_type):
            return self.operator_step_ms(instance_type, batch)[1]
        got = self._transfer(instance_type, batch, self.post_ms_curve, "post")
        return got[0] if got else 0.0

    def rel_ci(self, instance_type: str) -> float | None:
        if instance_type not in self._rel_ci:
            self._rel_ci[instance_type] = self.job.compute_rel_ci(instance_type)
        return self._rel_ci[instance_type]

    def post_ms_curve(self, instance_type: str) -> ComputeCurve | None:
        key = "post:" + instance_type
        if key not in self._curves:
            self._curves[key] = self.job.post_curve(instance_type)
        return self._curves[key]

    def workers(self, config: ClusterConfig, local_batch_size: float) -> WorkerLayout:
        """``config``'s workers at ``local_batch_size`` each, and the links their ring runs on."""
        wpn_all: list[int] = []
        cycles, transferred, notes = [], False, []
        hws = []
        loosest, loose_notes = 0.0, []
        batch_low, batch_high = 1.0, 1.0
        for g in config.groups:
            hw = self.hardware(g.instance_type)
            hws.append(hw)
            wpn = g.workers_per_node or hw.slots
            wpn_all.extend([wpn] * g.count)
            ci = self.rel_ci(g.instance_type)
            if ci is not None and ci > LOOSE_PROFILE_CI:
                loosest = max(loosest, ci)
                note = loose_profile_note(self.job.model, g.instance_type, ci)
                if note not in notes:
                    notes.append(note)
                    loose_notes.append(note)
            c, t, note, post, (low, high), batch_note = self.worker(g.instance_type, local_batch_size)
            cycles.append((c + post, c))
            transferred |= t
            batch_low, batch_high = min(batch_low, low), max(batch_high, high)
            for n in (note, batch_note):
                if n and n not in notes:
                    notes.append(n)
        inter = Link(min(h.inter.gbytes_per_s for h in hws), max(h.inter.latency_us for h in hws))
        if len(wpn_all) == 1:  # one node: its ring never leaves it
            intra = self.node_intra(config.groups[0].instance_type)
        else:
            # a ring's hops between the GPUs of one node are no faster across nodes than in a ring
            # that stays on such a node (a type whose network nobody measured has PCIe at its line
            # rate across nodes, LinkScale.apply, but the single-node efficiency within one)
            intra = Link(min(self.ring_intra_gbytes_per_s(g, h) for g, h in zip(config.groups, hws)),
                         max(h.intra.latency_us for h in hws))
        share = self.link_scale.tcp_node_share([g.instance_type for g in config.groups], len(wpn_all))
        if share != 1.0:  # the type's network as measured across this many nodes (LinkScale.tcp_node_shares)
            inter = Link(inter.gbytes_per_s * share, inter.latency_us / share)
            notes.append(node_share_note(config.groups[0].instance_type, len(wpn_all), share))
        emulated = all(h.emulated for h in hws)
        if emulated and len(wpn_all) > 1:
            rates = [self.catalog.get(g.instance_type).emulation.bandwidth_mbit for g in config.groups
                     for _ in range(g.count)]
            inter = Link(inter.gbytes_per_s * self.link_scale.mixed_ring_factor(rates), inter.latency_us)
        if emulated and max(wpn_all) == 1:
            # CPU workers send from host memory: with one worker per host no intra-host hop is on
            # the ring's path (on a GPU node the PCIe hop between GPU and NIC is)
            intra = inter
        return WorkerLayout(hws, wpn_all, cycles, transferred, notes, loosest, loose_notes,
                            (batch_low, batch_high), intra, inter, emulated)

    def ring_intra_gbytes_per_s(self, group: NodeGroup, hw: Hardware) -> float:
        """GB/s of ``group``'s intra-node hops in a ring across nodes: its type's figure there
        (LinkScale.apply), no faster than in a ring on one such node where it has several workers."""
        if (group.workers_per_node or hw.slots) > 1:
            return min(hw.intra.gbytes_per_s, self.node_intra(group.instance_type).gbytes_per_s)
        return hw.intra.gbytes_per_s

    def buckets(self) -> tuple[list[float], Sequence[float] | None]:
        """The gradient buckets DDP allreduces (the profile's, else the default layout of the
        gradient size) and the share of backward done when each is ready (None: not recorded)."""
        if self._buckets is None:
            gb = self.grad_bytes
            buckets = self.job.bucket_bytes if self.job.bucket_bytes else simulate.bucket_layout(gb)
            if self.job.bucket_bytes and abs(sum(buckets) - gb) > 0.01 * gb:
                buckets = simulate.bucket_layout(gb)
            self._buckets = buckets, (self.job.ready_fractions if (self.job.bucket_bytes is buckets) else None)
        return self._buckets

    def recorded_ready(self, layout: WorkerLayout) -> bool:
        """Whether the job's recorded ready times hold for ``layout``'s workers: not where they were
        recorded on a CPU and the workers are GPUs, whose backward runs the layers at other relative
        speeds (the CPU and H200 profiles of the same examples put a bucket two to three times
        earlier or later in backward, either way: profiles/cpu, profiles/h200)."""
        if self.job.ready_fractions is None:
            return False
        return not (self.job.ready_device == "cpu" and any(h.gpu_name for h in layout.hardware))

    def overlap_source(self, layout: WorkerLayout) -> str:
        """Where the share of ``layout``'s allreduce that backward hides comes from
        (:data:`OVERLAP_SOURCES`, less "measured", which only a measured run knows)."""
        if sum(layout.workers_per_node) < 2 or not self.grad_bytes:
            return "none"
        if self.recorded_ready(layout):
            return "recorded"
        # the job's own sync times (stated or derived) measured how much backward hides where they
        # were read: a window, or DDP's usual overlap confirmed
        fit = self.job.overlap_fit
        if fit is not None:
            return "read-from-steps" if fit.derived == fit.runs else "read-from-sync"
        if self.job.overlap_check is not None:
            return "default-checked"
        return "recorded-on-cpu" if self.job.ready_fractions is not None else "default"

    def simulated(self, config: ClusterConfig, layout: WorkerLayout, inter: Link, tree: bool = False,
                  window: float | None = None) -> simulate.SimResult:
        """The simulator's iteration of ``layout``'s workers (needs the gradient size) with ``inter``
        between nodes, the ring's or (``tree``) NCCL's tree across nodes; ``window``: the share of
        backward over which the buckets become ready, if not the job's. Where the recorded ready times
        do not hold for the workers (:meth:`recorded_ready`), the buckets become ready evenly."""
        buckets, fracs = self.buckets()
        if fracs is not None and not self.recorded_ready(layout):
            fracs = None
        return simulate.simulate_iteration(
            layout.compute_ms, buckets, layout.workers_per_node, layout.intra, inter,
            window or self.job.backward_fraction or simulate.DEFAULT_BACKWARD_FRACTION, fracs,
            optimizer_ms=layout.step_alone_ms - layout.compute_ms,
            overlap_slowdown=(self.link_scale.emulated_overlap_slowdown * busy_peers(config, layout.cycles)
                              if layout.emulated else 0.0),
            hierarchical=all(h.hierarchical_allreduce for h in layout.hardware), tree=tree)

    def sim_ms(self, config: ClusterConfig, local_batch_size: float) -> float:
        """:meth:`estimate`'s ``sim_ms`` alone (what a fit of the link figures reads)."""
        layout = self.workers(config, local_batch_size)
        if not self.grad_bytes:
            return layout.step_alone_ms
        return self.simulated(config, layout, layout.inter).iteration_ms

    def with_link_scale(self, link_scale: LinkScale) -> "FeatureBuilder":
        """This builder with the link figures ``link_scale``: what it worked out of the job's compute
        is kept (links never change it), what depends on the links is worked out afresh."""
        other = copy.copy(self)
        other.link_scale = link_scale
        other._hw, other._node_intra, other._estimates = {}, {}, {}
        return other

    def estimate(self, config: ClusterConfig, local_batch_size: float) -> RowEstimate:
        """Simulator estimate and features of ``config`` (resolved) at ``local_batch_size`` per worker.

        Synchronous data parallelism runs at the pace of the slowest worker: its forward and
        backward set when buckets become ready (a faster worker waits inside its allreduce),
        and its optimizer/other time follows the last allreduce.
        """
        layout = self.workers(config, local_batch_size)
        wpn_all, hws, notes, transferred = layout.workers_per_node, layout.hardware, layout.notes, layout.transferred
        step_alone, compute = layout.step_alone_ms, layout.compute_ms
        intra, inter, emulated = layout.intra, layout.inter, layout.emulated
        batch_low, batch_high = layout.batch_bounds
        gb = self.grad_bytes
        if gb:
            sim = self.simulated(config, layout, inter)
            step_low, step_high = batch_low, batch_high
            if len(wpn_all) > 1 and not emulated:
                # NCCL may run a bucket's allreduce as a tree across nodes where its tuning finds that
                # faster (small messages on many nodes); the simulator prices the ring (gloo, on
                # emulated hosts, has no tree): the step could be as fast as with the tree
                step_low *= self.simulated(config, layout, inter, tree=True).iteration_ms / sim.iteration_ms
            ready_unknown = not self.recorded_ready(layout) and sum(wpn_all) > 1
            read, checked = self.job.overlap_fit is not None, self.job.overlap_check is not None
            overlap = self.overlap_source(layout)
            if overlap in ("recorded-on-cpu", "default"):
                # when the gradients become ready is neither recorded (an imported trace) nor read:
                # backward may hide the allreduce as the simulator assumes, or none of it (as in
                # Pollux's deepspeech2 runs): the step alone, then every bucket's allreduce in turn
                step_high *= (step_alone + sim.allreduce_ms) / sim.iteration_ms
            if ready_unknown and read:
                # a window read off a few sync times may be wrong down to DDP's usual overlap
                usual = self.simulated(config, layout, inter, window=simulate.DEFAULT_BACKWARD_FRACTION)
                step_low *= min(usual.iteration_ms / sim.iteration_ms, 1.0)
            if ready_unknown:
                note = (overlap_fitted_note(self.job) if read else overlap_checked_note(self.job) if checked
                        else READY_ON_CPU_NOTE if overlap == "recorded-on-cpu" else READY_UNKNOWN_NOTE)
                if note not in notes:
                    notes.append(note)
            prior = [h for h in hws if not self.link_scale.network_measured(h)]
            if len(wpn_all) > 1 and prior:
                # a network nobody measured may be PRIOR_NETWORK_SPREAD times slower or faster than
                # its prior (an EFA one as slow as TCP: LinkScale.prior_inter): the step at the slower
                # network, and without that share of its exposed communication at the faster one
                k = PRIOR_NETWORK_SPREAD
                slow = Link(min([inter.gbytes_per_s / k] + [self.link_scale.prior_inter(h).gbytes_per_s
                                                             for h in prior]), inter.latency_us)
                slow_ms = self.simulated(config, layout, slow).iteration_ms
                exposed = max(sim.iteration_ms - step_alone, 0.0) / sim.iteration_ms
                net_low, net_high = 1.0 - exposed * (1.0 - 1.0 / k), slow_ms / sim.iteration_ms
                step_low, step_high = step_low * net_low, step_high * net_high
                note = prior_network_note(prior, net_low, net_high)
                if note not in notes:
                    notes.append(note)
            # the ring's intra-node link (the slowest of its types') where no source states it, nor was
            # it measured: from half the rate it is taken at to a link that never holds the ring back,
            # where that moves the step
            unstated = [h for g, h in zip(config.groups, hws) if not h.intra_stated
                        and not self.link_scale.tcp_measured(h.name)
                        and (len(wpn_all) == 1 or self.ring_intra_gbytes_per_s(g, h) <= intra.gbytes_per_s)]
            if unstated and sum(wpn_all) > 1:
                def with_intra(gbytes_per_s: float) -> float:
                    return self.simulated(config, replace(layout, intra=Link(gbytes_per_s, intra.latency_us)),
                                          inter).iteration_ms / sim.iteration_ms
                intra_high = with_intra(intra.gbytes_per_s / PRIOR_NETWORK_SPREAD)
                if intra_high > 1.0 + MOVES_THE_STEP:
                    intra_low = with_intra(UNBOUNDED_GBYTES_PER_S)
                    step_low, step_high = step_low * intra_low, step_high * intra_high
                    note = intra_unstated_note(unstated, intra_low, intra_high)
                    if note not in notes:
                        notes.append(note)
            if self.grad_bytes_estimated and sum(wpn_all) > 1:
                notes.append(gradient_estimated_note(gb))
        else:
            sim = simulate.SimResult(step_alone, compute, float("nan"), float("nan"))
            step_low, step_high, overlap = batch_low, batch_high, "none"
            if sum(wpn_all) > 1:
                notes.append(GRADIENT_UNKNOWN_NOTE)
        slow = min(hws, key=lambda h: h.speed_for(self.job.precision) or float("inf"))
        compute = step_alone  # features and baselines read the slowest worker's whole step alone
        feats = {
            "log_sim_ms": math.log(sim.iteration_ms),
            "log_compute_ms": math.log(compute),
            "log_allreduce_ms": math.log1p(sim.allreduce_ms),
            "comm_to_compute": sim.allreduce_ms / compute,
            "exposed_to_compute": sim.exposed_comm_ms / compute,
            "nodes": float(len(wpn_all)),
            "world_size": float(sum(wpn_all)),
            "max_workers_per_node": float(max(wpn_all)),
            "min_workers_per_node": float(min(wpn_all)),
            "imbalance": max(wpn_all) / (sum(wpn_all) / len(wpn_all)),
            "n_types": float(len({g.instance_type for g in config.groups})),
            "log_grad_mb": math.log(gb / 2**20) if gb else float("nan"),
            "grad_bytes_estimated": float(self.grad_bytes_estimated) if gb else float("nan"),
            "log_local_batch": math.log(local_batch_size),
            "log_compute_per_sample_ms": math.log(compute / local_batch_size),
            "inter_gbytes_per_s": inter.gbytes_per_s,
            "intra_gbytes_per_s": intra.gbytes_per_s,
            "gpu_fp32_tflops": slow.fp32_tflops if slow.fp32_tflops else float("nan"),
            "gpu_mem_gbytes_per_s": slow.mem_gbytes_per_s if slow.mem_gbytes_per_s else float("nan"),
            "transferred": float(transferred),
            "emulated": float(emulated),  # selects the residual model's regime
            "cpu_load": (sum(h.cpu_share * g.count for h, g in zip(hws, config.groups)) / self.job.machine_cores
                         if all(h.emulated and h.cpu_share for h in hws) and self.job.machine_cores else float("nan")),
        }
        for h in hws:
            notes.extend(n for n in h.notes if n not in notes)
        return RowEstimate(feats, sim.iteration_ms, compute, transferred, notes, layout.loosest,
                           tuple(layout.loose_notes),
                           (batch_low, batch_high), any(self.by_operators(g.instance_type) for g in config.groups),
                           (step_low, step_high), overlap,
                           tuple(sorted({m for g in config.groups
                                         if (m := self.transfer_method(g.instance_type)) is not None})))

    def worker(self, instance_type: str, batch: float) -> tuple[float, bool, str | None, float,
                                                                tuple[float, float], str | None]:
        """One worker of ``instance_type`` at ``batch``: (compute, transferred, its note, post, its
        bounds, their note), once per (type, batch) for this builder (every node count and mix that
        holds the type shares them)."""
        key = (instance_type, float(batch))
        if key not in self._workers:
            c, t, note = self.compute_ms(instance_type, batch)
            self._workers[key] = (c, t, note, self.post_ms(instance_type, batch),
                                  *self.batch_bounds(instance_type, batch))
        return self._workers[key]

    def row_estimate(self, config: ClusterConfig, local_batch_size: float) -> RowEstimate:
        """:meth:`estimate`, once per distinct (configuration, batch) for this builder (its profile,
        catalog and link figures are fixed, so the estimate is too)."""
        key = (config.format(), float(local_batch_size))
        if key not in self._estimates:
            self._estimates[key] = self.estimate(config, local_batch_size)
        return self._estimates[key]

    def frame(self, rows: Sequence[tuple[ClusterConfig, float]]) -> "pd.DataFrame":
        """Feature table (plus sim_ms, compute_ms, transferred) for many rows, each distinct row once."""
        return self.frame_of([self.row_estimate(config, b) for config, b in rows])

    @staticmethod
    def frame_of(estimates: Sequence[RowEstimate]) -> "pd.DataFrame":
        """The feature table of estimates already made (:meth:`row_estimate`), one row each."""
        import pandas as pd

        out = [{**est.features, "sim_ms": est.sim_ms, "compute_ms": est.compute_ms,
                "batch_low": est.step_bounds[0], "batch_high": est.step_bounds[1],
                "by_operators": float(est.by_operators), "overlap_unknown": float(est.overlap_unknown),
                "spec_transfer": float(est.spec_transfer), "same_gpu_transfer": float(est.same_gpu_transfer)}
               for est in estimates]
        return pd.DataFrame(out, columns=FEATURES + ["sim_ms", "compute_ms", "batch_low", "batch_high", "by_operators",
                                                     "overlap_unknown", "spec_transfer", "same_gpu_transfer"])


def busy_peers(config: ClusterConfig, cycles: Sequence[tuple[float, float]]) -> float:
    """How many of the slowest host's peers compute alongside it: each peer counts for the share of
    the slowest host's step it spends computing (its step alone / the slowest one's).
    ``cycles``: (step alone, compute) of each of ``config``'s groups. A peer that has finished its
    backward waits inside the allreduce and leaves the machine's cores to the others, so a fast
    host slows a slow one's overlapped backward less than a peer of its own speed does."""
    steps = [c[0] for g, c in zip(config.groups, cycles) for _ in range(g.count)]
    slowest = max(steps)
    return (sum(steps) - slowest) / slowest

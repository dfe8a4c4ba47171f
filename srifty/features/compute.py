"""One worker's compute for one job on any instance type at any batch (:class:`WorkerCompute`):
measured on the type, interpolated between its profiled batches, from the operator model on a GPU
for a CPU profile, or carried from another type by measured factors or spec speeds, with the
bounds and notes each way carries. :class:`srifty.features.FeatureBuilder` builds on it."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from srifty.errors import SriftyError
from srifty.features.hardware import Hardware, both_measured, hardware_of, transfer_speeds
from srifty.features.curve import ComputeCurve
from srifty.features.job import JobProfile, profile_command
from srifty.features.links import LinkScale
from srifty.features.notes import readable_ms
from srifty.opmodel import GpuStepModel, StepTerms, shipped_step_model
from srifty.simulate import Link

if TYPE_CHECKING:  # pragma: no cover
    from srifty.catalog import Catalog

# A GPU step below this share of its spec FLOPS (forward + backward = 3 x the counted forward) is
# said to be launch-bound in warnings: on the H200 (profiles/h200, docs/gpu-check.md) cnn_resnet and
# mlp_recsys reach 0.1-3% at every batch and hardly grow with it, transformer_lm 6% at batch 8, 20%
# at 32 and 45% at 128, growing 1.7x from 32 to 128. A judgment for a warning, not a model input.
LAUNCH_BOUND_PEAK_SHARE = 0.10


class WorkerCompute:
    """One worker's compute (forward and backward, then optimizer and other) for one job on any
    type of ``catalog`` at any batch, each (type, batch) worked out once."""

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

    def _speeds(self, a: str, b: str) -> tuple[float, float] | None:
        """Relative compute speeds of types ``a`` and ``b`` on one basis: the measured CPU factors
        of emulated types when both have one (speed = 1/factor), else the hardware figures."""
        fa, fb = self.job.cpu_factors.get(a), self.job.cpu_factors.get(b)
        if fa and fb:
            return 1.0 / fa, 1.0 / fb
        if bool(self.hardware(a).gpu_name) != bool(self.hardware(b).gpu_name):
            return None  # no spec figure compares a CPU host with a GPU: the operator count carries one
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
                   "profiles at two batches measure how it grows "
                   f"(`{profile_command(self.job, '--out DIR/', self._profiled_batch(), batch)}`)"
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
        if got is None and self.job.operators is None and self.hardware(instance_type).gpu_name and not any(
                self.hardware(t).gpu_name for t in self.job.instance_types):
            raise SriftyError(
                f"Cannot carry {self.job.model}'s compute from the CPU it was profiled on to {instance_type}'s "
                "GPU: the profile has no operator count (it was recorded before srifty counted operators, or "
                "the script runs torch.compile, whose compiled code srifty does not count).",
                "Profile the script again with this srifty (under TORCHDYNAMO_DISABLE=1 where it uses "
                f"torch.compile: its operators are then counted as they run eagerly), or profile it on {instance_type}.")
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

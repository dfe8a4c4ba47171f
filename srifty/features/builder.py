"""The feature row of a (configuration, per-worker batch) for one job: the simulator's estimate
and the numbers the residual model reads (:class:`FeatureBuilder`, over each worker's compute from
:class:`srifty.features.compute.WorkerCompute`)."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

from srifty import simulate
from srifty.configspec import ClusterConfig, NodeGroup
from srifty.features.compute import WorkerCompute
from srifty.features.hardware import Hardware
from srifty.features.job import LOOSE_PROFILE_CI, JobProfile, _bytes_per_param
from srifty.features.links import PRIOR_NETWORK_SPREAD, LinkScale
from srifty.features.notes import (GRADIENT_UNKNOWN_NOTE, READY_ON_CPU_NOTE, READY_UNKNOWN_NOTE,
                                   gradient_estimated_note, intra_unstated_note, loose_profile_note, node_share_note,
                                   overlap_checked_note, overlap_fitted_note, prior_network_note,
                                   several_models_note, powersgd_note, sharded_optimizer_note, sync_batchnorm_note,
                                   unknown_hook_note)
from srifty.features.rows import FEATURES, UNREAD_OVERLAP, RowBatch, RowEstimate, WorkerLayout, group_batches
from srifty.opmodel import GpuStepModel
from srifty.simulate import Link

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from srifty.catalog import Catalog

# how much an assumption has to move the simulated step before a row is told about it (0.5%)
MOVES_THE_STEP = 0.005
# an intra-node link that never holds a ring back (GB/s): the fast end of one no source states
UNBOUNDED_GBYTES_PER_S = 1e6


@dataclass(frozen=True)
class _ComputePart:
    """A configuration's workers at their batches as the job's compute alone has them (no link
    figure changes it): FeatureBuilder.workers less the links."""

    workers_per_node: tuple[int, ...]
    cycles: tuple[tuple[float, float], ...]
    transferred: bool
    notes: tuple[str, ...]
    loosest: float
    loose_notes: tuple[str, ...]
    batch_bounds: tuple[float, float]
    batch: float


class FeatureBuilder(WorkerCompute):
    """Features of (configuration, per-worker batch) rows for one job on one catalog."""

    def __init__(self, job: JobProfile, catalog: "Catalog", link_scale: "LinkScale | None" = None,
                 step_model: GpuStepModel | None = None) -> None:
        super().__init__(job, catalog, link_scale, step_model)
        self._estimates: dict[tuple[str, tuple[float, ...]], RowEstimate] = {}
        # per (configuration, each group's batch): what workers() reads of the compute alone, shared
        # with every builder of other link figures (with_link_scale)
        self._computes: dict[tuple[ClusterConfig, tuple[float, ...]], _ComputePart] = {}
        self._buckets: tuple[list[float], Sequence[float] | None] | None = None
        self._messages: list[tuple[float, ...]] | None = None  # per bucket, where buckets() keeps the recorded ones
        self.grad_bytes, self.grad_bytes_estimated = self._resolve_grad_bytes()

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

    def workers(self, config: ClusterConfig, local_batch_size: RowBatch) -> WorkerLayout:
        """``config``'s workers at ``local_batch_size`` each (or each group's own), and the links
        their ring runs on."""
        batches = group_batches(config, local_batch_size)
        key = (config, batches)
        if (part := self._computes.get(key)) is None:  # what the links never change: once per row
            part = self._computes[key] = self._compute_part(config, batches)
        hws = [self.hardware(g.instance_type) for g in config.groups]
        wpn_all, cycles, notes = part.workers_per_node, part.cycles, list(part.notes)
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
        return WorkerLayout(hws, list(wpn_all), list(cycles), part.transferred, notes, part.loosest,
                            list(part.loose_notes), part.batch_bounds, intra, inter, emulated, part.batch)

    def _compute_part(self, config: ClusterConfig, batches: tuple[float, ...]) -> "_ComputePart":
        """What :meth:`workers` reads of the job's compute alone, which no link figure changes."""
        wpn_all: list[int] = []
        cycles, transferred, notes = [], False, []
        loosest, loose_notes = 0.0, []
        reach: list[tuple[float, float]] = []  # each group's least and most compute at its batch
        for g, b in zip(config.groups, batches):
            wpn_all.extend([g.workers_per_node or self.hardware(g.instance_type).slots] * g.count)
            ci = self.rel_ci(g.instance_type)
            if ci is not None and ci > LOOSE_PROFILE_CI:
                loosest = max(loosest, ci)
                note = loose_profile_note(self.job.model, g.instance_type, ci)
                if note not in notes:
                    notes.append(note)
                    loose_notes.append(note)
            c, t, note, post, (low, high), batch_note = self.worker(g.instance_type, b)
            cycles.append((c + post, c))
            transferred |= t
            reach.append((c * low, c * high))
            for n in (note, batch_note):
                if n and n not in notes:
                    notes.append(n)
        # the step waits for the slowest worker: its compute lies between the most of the groups' least
        # computes and the most of their most, over the slowest one's estimate
        slowest_ms = max(c for _, c in cycles)
        bounds = ((min(max(lo for lo, _ in reach) / slowest_ms, 1.0), max(max(hi for _, hi in reach) / slowest_ms, 1.0))
                  if slowest_ms > 0 else (1.0, 1.0))
        # the slowest worker that trains on some of the batch (a group given none of it never sets the pace)
        slowest = max([i for i, b in enumerate(batches) if b > 0] or range(len(cycles)), key=lambda i: cycles[i])
        return _ComputePart(tuple(wpn_all), tuple(cycles), transferred, tuple(notes), loosest, tuple(loose_notes),
                            bounds, batches[slowest])

    def ring_intra_gbytes_per_s(self, group: NodeGroup, hw: Hardware) -> float:
        """GB/s of ``group``'s intra-node hops in a ring across nodes: its type's figure there
        (LinkScale.apply), no faster than in a ring on one such node where it has several workers."""
        if (group.workers_per_node or hw.slots) > 1:
            return min(hw.intra.gbytes_per_s, self.node_intra(group.instance_type).gbytes_per_s)
        return hw.intra.gbytes_per_s

    def buckets(self) -> tuple[list[float], Sequence[float] | None]:
        """The bytes DDP allreduces per gradient bucket (the profile's buckets, else the default
        layout of the gradient size; a compressing communication hook's share of them,
        simulate.hook_wire_share) and the share of backward done when each is ready (None: not
        recorded)."""
        if self._buckets is None:
            gb = self.grad_bytes
            buckets = self.job.bucket_bytes if self.job.bucket_bytes else simulate.bucket_layout(gb)
            if self.job.bucket_bytes and abs(sum(buckets) - gb) > 0.01 * gb:
                buckets = simulate.bucket_layout(gb)
            if self.job.ddp_models > 1 and self.job.allreduced_bytes:
                # several models: what a step (a pass of it) handed the hooks, a GAN's critic's gradients twice
                buckets = simulate.bucket_layout(self.job.allreduced_bytes / self.job.synced_passes)
            recorded = self.job.bucket_bytes is buckets
            fracs = self.job.ready_fractions if recorded else None
            per_element = gb / self.job.param_count if self.job.param_count else _bytes_per_param(self.job.precision)
            share = simulate.hook_wire_share(self.job.comm_hook, per_element) or 1.0
            self._buckets = [b * share for b in buckets] if share != 1.0 else buckets, fracs
            # what a compressing hook (PowerSGD) sends for each recorded bucket, where the profile says; in
            # half precision where DDP's fp16/bf16 wrapper wraps it
            self._messages = ([tuple(m * share for m in sent) for sent in self.job.bucket_messages]
                              if recorded and self.job.bucket_messages else None)
        return self._buckets

    def bucket_messages(self) -> list[tuple[float, ...]] | None:
        """What a compressing hook (PowerSGD) sends for each of :meth:`buckets`, where the profile
        recorded it for the buckets the simulator takes (None: the buckets themselves are sent)."""
        self.buckets()
        return self._messages

    def messages(self, buckets: list[float], fracs: Sequence[float] | None) -> tuple[list[float], Sequence[float] | None]:
        """The allreduces of ``buckets`` ready at ``fracs`` (None: evenly through backward): the
        buckets themselves, or where the profile recorded what the script's hook sends for each
        (PowerSGD: the uncompressed gradients, then the two factors), those messages in turn,
        each ready with its bucket."""
        recorded = self.bucket_messages()
        if recorded is None or len(recorded) != len(buckets):
            return buckets, fracs
        ready = list(fracs) if fracs is not None else [(i + 1) / len(buckets) for i in range(len(buckets))]
        sent = [(float(m), f) for sizes, f in zip(recorded, ready) for m in sizes if m > 0]
        return [m for m, _ in sent], [f for _, f in sent]

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
                  window: float | None = None, sync_bn: str = "tree", sharded: bool = True) -> simulate.SimResult:
        """The simulator's iteration of ``layout``'s workers (needs the gradient size) with ``inter``
        between nodes, the ring's or (``tree``) NCCL's tree across nodes; ``sync_bn``: SyncBatchNorm's
        small collectives at the faster of the two ("tree", as NCCL's tuning picks for small
        messages), the ring's ("ring") or left out ("none"); ``sharded``: a sharded optimizer's
        parameter all-gather included; ``window``: the share of
        backward over which the buckets become ready, if not the job's. Where the recorded ready times
        do not hold for the workers (:meth:`recorded_ready`), the buckets become ready evenly; where
        one-worker profiles at several batches recorded them, the nearest batch's hold (with its
        backward share: JobProfile.ready_times_at). A step of several backwards (a job that
        accumulates gradients, a GAN) runs them one after another, allreducing in as many as its
        profile saw (JobProfile.synced_passes); SyncBatchNorm layers synchronise their statistics in
        every pass, and a sharded optimizer steps 1/world of the parameters (its time where a profile
        timed it apart, JobProfile.optimizer_share) and gathers them after."""
        buckets, fracs = self.buckets()
        backward = self.job.backward_fraction
        if fracs is not None and not self.recorded_ready(layout):
            fracs = None
        elif fracs is not None and (nearest := self.job.ready_times_at(layout.batch)) is not None:
            fracs, backward = nearest.fractions, nearest.backward_fraction  # recorded nearest this batch
        buckets, fracs = self.messages(buckets, fracs)
        # the backwards of a step, one after another: an accumulating step's passes, a GAN's two networks' steps
        passes = max(self.job.accumulation, self.job.synced_passes)
        optimizer_ms = layout.step_alone_ms - layout.compute_ms
        if self.job.sharded_optimizer and self.job.optimizer_share:
            # the profile's workers each stepped 1/optimizer_world of the parameters; these step 1/world
            world = sum(layout.workers_per_node)
            optimizer_ms -= optimizer_ms * self.job.optimizer_share * (1.0 - self.job.optimizer_world / world)
        hierarchical = all(h.hierarchical_allreduce for h in layout.hardware)
        one_pass = simulate.simulate_iteration(
            layout.compute_ms / passes, buckets, layout.workers_per_node, layout.intra, inter,
            window or backward or simulate.DEFAULT_BACKWARD_FRACTION, fracs,
            optimizer_ms=optimizer_ms if passes == 1 else 0.0,
            overlap_slowdown=(self.link_scale.emulated_overlap_slowdown * busy_peers(config, layout.cycles)
                              if layout.emulated else 0.0),
            hierarchical=hierarchical, tree=tree)
        step = one_pass if passes == 1 else simulate.accumulated_step(one_pass, passes, self.job.synced_passes,
                                                                     optimizer_ms)
        if sync_bn != "none" and self.syncs_batchnorm(layout):
            step = simulate.with_sync_batchnorm(step, self.job.sync_batchnorm, layout.workers_per_node,
                                                layout.intra, inter, hierarchical, sync_bn == "tree", passes)
        if sharded and self.job.sharded_optimizer:  # one worker alone gathers nothing (allreduce_ms: 0)
            step = simulate.with_parameter_gather(step, self.grad_bytes, layout.workers_per_node, layout.intra,
                                                  inter, hierarchical)
        return step

    def syncs_batchnorm(self, layout: WorkerLayout) -> bool:
        """Whether ``layout``'s workers synchronise the job's SyncBatchNorm layers: several GPU
        workers (PyTorch runs SyncBatchNorm on GPUs only; on CPU hosts srifty runs it as plain
        batch norm, srifty.profiling.instrument.sync_batchnorm_forward)."""
        return (bool(self.job.sync_batchnorm) and sum(layout.workers_per_node) > 1
                and all(h.gpu_name for h in layout.hardware))

    def sim_ms(self, config: ClusterConfig, local_batch_size: RowBatch) -> float:
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

    def estimate(self, config: ClusterConfig, local_batch_size: RowBatch) -> RowEstimate:
        """Simulator estimate and features of ``config`` (resolved) at ``local_batch_size`` per worker
        (or per node group: :data:`srifty.features.rows.RowBatch`; the batch features are the slowest
        worker's).

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
            overlap = self.overlap_source(layout)
            if overlap in UNREAD_OVERLAP:
                # when the gradients become ready is neither recorded (an imported trace) nor read:
                # backward may hide the allreduce as the simulator assumes, or none of it (as in
                # Pollux's deepspeech2 runs): the step alone, then every bucket's allreduce in turn
                step_high *= (step_alone + sim.allreduce_ms) / sim.iteration_ms
            if overlap in ("read-from-sync", "read-from-steps"):
                # a window read off a few sync times may be wrong down to DDP's usual overlap
                usual = self.simulated(config, layout, inter, window=simulate.DEFAULT_BACKWARD_FRACTION)
                step_low *= min(usual.iteration_ms / sim.iteration_ms, 1.0)
            if overlap not in ("none", "recorded"):  # the recorded ready times do not hold for these workers
                note = (overlap_fitted_note(self.job) if overlap in ("read-from-sync", "read-from-steps")
                        else overlap_checked_note(self.job) if overlap == "default-checked"
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
            if self.job.ddp_models > 1 and sum(wpn_all) > 1:
                notes.append(several_models_note(self.job.model, self.job.ddp_models))
            if self.job.powersgd and (sent := self.bucket_messages()) and sum(wpn_all) > 1:
                notes.append(powersgd_note(self.job.model, self.job.powersgd, sum(map(sum, sent)), gb))
            elif not simulate.knows_hook(self.job.comm_hook) and sum(wpn_all) > 1:
                notes.append(unknown_hook_note(self.job.model, self.job.comm_hook))
            if self.job.sharded_optimizer and sum(wpn_all) > 1:
                gathered = sim.iteration_ms - self.simulated(config, layout, inter, sharded=False).iteration_ms
                notes.append(sharded_optimizer_note(self.job.model, self.job.sharded_optimizer, gathered))
            if self.syncs_batchnorm(layout):
                # how long the statistics' small collectives take is not measured: from none of it to the ring's
                none, ring = (self.simulated(config, layout, inter, sync_bn=s).iteration_ms for s in ("none", "ring"))
                step_low *= min(none / sim.iteration_ms, 1.0)
                step_high *= max(ring / sim.iteration_ms, 1.0)
                notes.append(sync_batchnorm_note(self.job.model, len(self.job.sync_batchnorm), sim.iteration_ms - none))
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
            "log_local_batch": math.log(layout.batch),
            "log_compute_per_sample_ms": math.log(compute / layout.batch),
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

    def row_estimate(self, config: ClusterConfig, local_batch_size: RowBatch) -> RowEstimate:
        """:meth:`estimate`, once per distinct (configuration, batch) for this builder (its profile,
        catalog and link figures are fixed, so the estimate is too)."""
        key = (config.format(), group_batches(config, local_batch_size))
        if key not in self._estimates:
            self._estimates[key] = self.estimate(config, local_batch_size)
        return self._estimates[key]

    def frame(self, rows: Sequence[tuple[ClusterConfig, RowBatch]]) -> "pd.DataFrame":
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

"""Features of a (job, cluster configuration, per-worker batch) for the latency model.

A :class:`JobProfile` gathers what srifty knows about one model from its profiles
(measured runs, compute time per worker at each batch on each profiled instance type,
gradient bytes and buckets). :class:`FeatureBuilder` turns (configuration, batch) into
the simulator's estimate plus the numbers the learned residual model reads.

Compute on an instance type comes from single-worker runs on it (step − sync time,
interpolated over batch sizes, linear beyond them). On a type never profiled it is
transferred from a profiled type by the ratio of GPU throughput (geometric mean of FP32
TFLOPS and memory bandwidth from the catalog's GPU specs), or of CPU share for emulated
hosts, and the row is marked ``transferred``.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from srifty import simulate
from srifty.configspec import ClusterConfig, from_placement
from srifty.errors import SriftyError
from srifty.opmodel import GpuStepModel, OperatorCounts, shipped_step_model, step_terms
from srifty.simulate import Link

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from srifty.catalog import Catalog

# Priors used only where the catalog states no figure (documented in docs/latency-model.md).
PCIE_GBYTES_PER_S = {"gen3": 15.75, "gen4": 31.5, "gen5": 63.0}  # x16, one direction (PCI-SIG line rates)
DEFAULT_INTRA_GBYTES_PER_S = 10.0
EMULATED_INTRA_GBYTES_PER_S = 2.0  # workers sharing an emulated host talk over loopback sockets
# tc tbf shapes Ethernet frames: a 1514-byte frame carries 1448 bytes of TCP payload
# (20 IP + 32 TCP-with-timestamps + 14 Ethernet header bytes), so goodput = 1448/1514 of the
# configured rate; docs/emulated-cluster.md measured 95.4-95.9% with iperf-like transfers.
TBF_GOODPUT = 1448.0 / 1514.0
# TCP payload share of an Ethernet frame at the usual MTU: the most of an instance's network rate a
# TCP network can carry (EC2's ENA, like the emulated tbf links, counts whole frames)
FRAME_GOODPUT = TBF_GOODPUT
# AWS documents that one TCP flow between instances runs at up to 5 Gbit/s outside a cluster
# placement group and 10 Gbit/s inside one, the instance's rate capping the aggregate
FLOW_GBPS, PLACEMENT_GROUP_FLOW_GBPS = 5.0, 10.0
# NCCL over sockets on an AWS (ENA) NIC opens 2 threads x 8 sockets per peer (net_socket.cc's
# defaults for vendor 0x1d0f): the flow-limited rate where no TCP run was ever measured
NCCL_AWS_FLOWS = 16
# how far a network nobody measured may be from its prior, either way (a factor on its bandwidth):
# FeatureBuilder.estimate widens a multi-node row's interval by what that does to its step
PRIOR_NETWORK_SPREAD = 2.0
INTRA_LATENCY_US = 10.0
INTER_LATENCY_US = 30.0
# A GPU step below this share of its spec FLOPS (forward + backward = 3 x the counted forward) is
# said to be launch-bound in warnings: on the H200 (profiles/h200, docs/gpu-check.md) cnn_resnet and
# mlp_recsys reach 0.1-3% at every batch and hardly grow with it, transformer_lm 6% at batch 8, 20%
# at 32 and 45% at 128, growing 1.7x from 32 to 128. A judgment for a warning, not a model input.
LAUNCH_BOUND_PEAK_SHARE = 0.10
LOOSE_PROFILE_CI = 0.05  # a profile whose median step time is known to worse than ±5% (95% CI) is flagged
EFA_MIN_GBPS = 100  # EFA-capable types at >= 100 Gbps are taken to run NCCL over EFA (aws-ofi-nccl)
HALF_PRECISIONS = frozenset({"fp16", "float16", "bf16", "bfloat16", "amp"})
BYTES_PER_PARAM = {"fp32": 4, "float32": 4, "tf32": 4, "fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2, "amp": 4}

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


def gradient_estimated_note(grad_bytes: float) -> str:
    """Said of a multi-worker estimate for a job whose gradient size srifty inferred from its
    single-node sync times (FeatureBuilder._resolve_grad_bytes) instead of reading it."""
    return (f"gradient size estimated from the profile's single-node sync times ({grad_bytes / 1e6:.3g} MB), not "
            "stated: communication is simulated on that guess, and models known this way were predicted far less "
            "accurately when held out (docs/ACCURACY.md, Pollux deepspeech2 and ncf); give param_count or grad_bytes "
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


@dataclass(frozen=True)
class Run:
    """One measured run: placement, per-worker batch, step time and (when known) sync time."""

    instance_type: str
    workers_per_node: tuple[int, ...]
    local_batch_size: int
    step_ms: float
    sync_ms: float | None = None
    post_ms: float | None = None  # optimizer + other (after the allreduces), when the profile splits it
    config: str | None = None  # the full configuration when it mixes instance types (e.g. 1xemu.medium+1xemu.small)
    rel_ci: float | None = None  # half-width of the step time's 95% confidence interval / median, when measured

    @property
    def mixed(self) -> bool:
        return self.config is not None and "+" in self.config and len(
            {g.split("x", 1)[-1].split(":")[0] for g in self.config.split("+")}) > 1

    @property
    def world_size(self) -> int:
        return sum(self.workers_per_node)

    @property
    def nodes(self) -> int:
        return len(self.workers_per_node)


@dataclass(frozen=True)
class ComputeCurve:
    """Per-worker compute time (ms) at a per-worker batch, from measured points."""

    batches: tuple[float, ...]
    times_ms: tuple[float, ...]

    @classmethod
    def from_points(cls, points: Iterable[tuple[float, float]]) -> "ComputeCurve":
        by_b: dict[float, list[float]] = {}
        for b, t in points:
            by_b.setdefault(float(b), []).append(float(t))
        bs = sorted(by_b)
        ts = [sorted(by_b[b])[len(by_b[b]) // 2] for b in bs]
        return cls(tuple(bs), tuple(ts))

    def at(self, batch: float) -> float:
        """Linear between measured batches; outside them, the nearest segment's line kept within
        :meth:`bounds`; from a single measured batch, proportional to the batch (right for a
        saturated device, the top of the bounds above the measured batch: docs/latency-model.md,
        "Compute at another batch", has how far it misses elsewhere)."""
        bs, ts = self.batches, self.times_ms
        if len(bs) == 1:
            return ts[0] * batch / bs[0]
        if batch <= bs[0]:
            i = 0
        elif batch >= bs[-1]:
            i = len(bs) - 2
        else:
            i = max(j for j in range(len(bs) - 1) if bs[j] <= batch)
        slope = (ts[i + 1] - ts[i]) / (bs[i + 1] - bs[i])
        value = ts[i] + slope * (batch - bs[i])
        floor = min(ts) * min(1.0, batch / bs[0]) * 0.5  # never below half the per-sample rate seen
        value = max(value, floor, 1e-6)
        if self.covers(batch):
            return value
        low, high = self.bounds(batch)
        return min(max(value, low), high)

    def covers(self, batch: float) -> bool:
        """Whether ``batch`` lies within the measured batches (measured or interpolated)."""
        return self.batches[0] <= batch <= self.batches[-1]

    def bounds(self, batch: float) -> tuple[float, float]:
        """(least, most) compute time at ``batch``. A larger batch never takes less time than a
        smaller one, nor more time per sample (the device is at least as busy): above the largest
        measured batch b1 (time t1) the time lies in [t1, t1 * batch / b1], below the smallest, b0
        (t0), in [t0 * batch / b0, t0], and between two measured batches within both neighbours'
        bounds (widened to take in the interpolated time where noisy measurements contradict them)."""
        bs, ts = self.batches, self.times_ms
        if batch > bs[-1]:
            return ts[-1], ts[-1] * batch / bs[-1]
        if batch < bs[0]:
            return ts[0] * batch / bs[0], ts[0]
        i = max(j for j in range(len(bs)) if bs[j] <= batch)
        if bs[i] == batch:
            return ts[i], ts[i]
        low = max(ts[i], ts[i + 1] * batch / bs[i + 1])
        high = min(ts[i] * batch / bs[i], ts[i + 1])
        value = self.at(batch)
        return min(low, high, value), max(low, high, value)

    @property
    def batch_range(self) -> tuple[float, float]:
        return self.batches[0], self.batches[-1]


@dataclass
class JobProfile:
    """Everything srifty knows about one model (job), from one or more profiles."""

    model: str
    runs: list[Run]
    param_count: int | None = None
    grad_bytes: int | None = None
    precision: str | None = None
    backward_fraction: float | None = None
    bucket_bytes: list[float] | None = None
    ready_fractions: list[float] | None = None
    sources: list[str] = field(default_factory=list)
    cpu_factors: dict[str, float] = field(default_factory=dict)  # emulated types: measured slowdown
    machine_cores: float | None = None  # emulated hosts: cores of the machine they share
    forward_flops_per_sample: float | None = None  # counted by the profiler (torch.utils.flop_counter)
    operators: OperatorCounts | None = None  # one iteration's operators (srifty.profiling.opcount)
    script: str | None = None  # the training script the profiles ran (as recorded)
    script_args: tuple[str, ...] = ()  # its arguments (as recorded)
    host_input_ms_per_sample: float = 0.0  # the host's time loading a batch, per sample, where operators were counted

    @property
    def instance_types(self) -> list[str]:
        """Types with runs of their own (a mixed run does not profile any one type)."""
        return sorted(self._runs_by_type())

    def _index(self, name: str, build: Callable[[list[Run]], Any]) -> Any:
        """``build(runs)``, built once for this list of runs (again if the list is replaced or
        grows): validation and prediction look runs up per row, over thousands of runs."""
        cached = self.__dict__.get(name)
        if cached is None or cached[0] is not self.runs or cached[1] != len(self.runs):
            cached = (self.runs, len(self.runs), build(self.runs))
            self.__dict__[name] = cached
        return cached[2]

    def _runs_by_type(self) -> dict[str, list[Run]]:
        """The runs of each type alone (mixed runs left out)."""
        def build(runs: list[Run]) -> dict[str, list[Run]]:
            table: dict[str, list[Run]] = {}
            for r in runs:
                if not r.mixed:
                    table.setdefault(r.instance_type, []).append(r)
            return table

        return self._index("_by_type", build)

    def restricted(self, keep: Callable[[Run], bool], forget_size: bool = False) -> "JobProfile":
        """The same job seeing only the runs ``keep`` accepts (for held-out validation)."""
        out = replace(self, runs=[r for r in self.runs if keep(r)])
        if forget_size:
            out = replace(out, param_count=None, grad_bytes=None, bucket_bytes=None, ready_fractions=None)
        return out

    def compute_curve(self, instance_type: str) -> ComputeCurve | None:
        runs = self._runs_by_type().get(instance_type, [])
        if not runs:
            return None
        smallest = min(r.world_size for r in runs)
        pts = [(r.local_batch_size, r.step_ms - (r.sync_ms or 0.0) - (r.post_ms or 0.0)) for r in runs
               if r.world_size == smallest and (smallest == 1 or r.sync_ms is not None)]
        if not pts:  # multi-worker runs without sync times: their step time bounds compute from above
            pts = [(r.local_batch_size, r.step_ms) for r in runs if r.world_size == smallest]
        return ComputeCurve.from_points(pts)

    def compute_rel_ci(self, instance_type: str) -> float | None:
        """The loosest relative 95% CI half-width of the single-worker runs ``instance_type``'s
        compute is read from (None when no profile states one)."""
        cis = [r.rel_ci for r in self._runs_by_type().get(instance_type, [])
               if r.world_size == 1 and r.rel_ci is not None]
        return max(cis) if cis else None

    def post_curve(self, instance_type: str) -> ComputeCurve | None:
        """Optimizer + other time per step on ``instance_type`` (single-worker runs that split it)."""
        pts = [(r.local_batch_size, r.post_ms) for r in self._runs_by_type().get(instance_type, [])
               if r.world_size == 1 and r.post_ms is not None]
        return ComputeCurve.from_points(pts) if pts else None

    def measured_run(self, config: "ClusterConfig", local_batch_size: int) -> Run | None:
        """The measured run (the median one) of exactly this configuration and per-worker batch:
        the same hosts with the same workers each, in any order; None when never run."""
        def hosts(c: "ClusterConfig") -> tuple[tuple[str, int], ...]:
            return tuple(sorted((g.instance_type, int(g.workers_per_node or 0))
                                for g in c.groups for _ in range(g.count)))

        def build(all_runs: list[Run]) -> dict[tuple[Any, int], list[Run]]:
            table: dict[tuple[Any, int], list[Run]] = {}
            for r in all_runs:
                table.setdefault((hosts(run_config(r)), r.local_batch_size), []).append(r)
            return {k: sorted(v, key=lambda r: r.step_ms) for k, v in table.items()}

        runs = self._index("_measured_index", build).get((hosts(config), local_batch_size))
        return runs[len(runs) // 2] if runs else None

    def measured(self, instance_type: str, workers_per_node: Sequence[int], local_batch_size: int) -> float | None:
        """Median measured step time of exactly this placement and batch (placement order ignored)."""
        run = self.measured_run(from_placement(instance_type, list(workers_per_node)), local_batch_size)
        return run.step_ms if run else None

    def measured_rel_ci(self, run: Run) -> float:
        """A measured run's relative 95% CI half-width (0 where its profile states none): the
        interval of a configuration that was measured as it is."""
        return run.rel_ci if run.rel_ci is not None else 0.0


def _bytes_per_param(precision: str | None) -> int:
    return BYTES_PER_PARAM.get((precision or "fp32").lower(), 4)


def job_from_profiles(profiles: Sequence[Any]) -> JobProfile:
    """Merge profiles (srifty.profile.Profile) of one model into a :class:`JobProfile`."""
    training = [p for p in profiles if p.kind == "training"]
    if not training:
        raise SriftyError("No training profile given (only collectives).", "Give a profile of the model's training job.")
    models = sorted({p.model for p in training})
    if len(models) > 1:
        raise SriftyError(f"The profiles given describe several models ({', '.join(models)}).",
                          "Give the profiles of one model (one file, or a directory holding one model's profiles).")
    job = JobProfile(model=models[0], runs=[])
    # single-worker profiles first: their split of forward/backward and bucket ready times are
    # compute alone, not compute slowed by overlapping communication
    training = sorted(training, key=lambda p: int((p.doc.get("cluster") or {}).get("world_size") or 1))
    for p in training:
        doc = p.doc
        j = doc.get("job") or {}
        job.param_count = job.param_count or j.get("param_count")
        job.grad_bytes = job.grad_bytes or j.get("grad_bytes")
        job.precision = job.precision or j.get("precision")
        if j.get("forward_flops") and j.get("local_batch_size") and not job.forward_flops_per_sample:
            job.forward_flops_per_sample = float(j["forward_flops"]) / float(j["local_batch_size"])
        if job.operators is None and j.get("operators"):
            job.operators = OperatorCounts.from_json(j["operators"], j.get("local_batch_size"))
            if job.operators is not None:
                loading = float((((doc.get("summary") or {}).get("input_ms")) or {}).get("median") or 0.0)
                job.host_input_ms_per_sample = loading / job.operators.batch_size
        if not job.script and j.get("script"):
            job.script, job.script_args = j["script"], tuple(j.get("args") or ())
        job.sources.append(p.path or "(profile)")
        cl = doc["cluster"]
        itype = cl["instance_types"][0]
        config = cl.get("config") if len(set(cl["instance_types"])) > 1 else None
        if config is None and len(set(cl["instance_types"])) > 1:  # older profiles: rebuild it from the hosts
            config = "+".join(f"1x{h['instance_type']}" for h in cl.get("hosts") or [])
        for h in cl.get("hosts") or []:
            f = (h.get("spec") or {}).get("cpu_factor")
            if f and h.get("instance_type"):
                job.cpu_factors.setdefault(h["instance_type"], float(f))
            spec = h.get("spec") or {}
            if spec.get("emulated") and (spec.get("usable_cpus") or spec.get("logical_cpus")):
                job.machine_cores = job.machine_cores or float(spec.get("usable_cpus") or spec["logical_cpus"])
        if doc.get("runs"):
            for r in doc["runs"]:
                job.runs.append(Run(itype, tuple(r["workers_per_node"]), int(r["local_batch_size"]),
                                    float(r["step_time_ms"]), r.get("sync_time_ms")))
            continue
        s = doc.get("summary") or {}
        if not s or not s.get("iteration_ms") or not j.get("local_batch_size"):
            continue
        it_ms = float(s["iteration_ms"]["median"])
        exposed = float((s.get("exposed_comm_ms") or {}).get("median") or 0.0)
        fwd = float((s.get("forward_ms") or {}).get("median") or 0.0)
        bwd = float((s.get("backward_compute_ms") or {}).get("median") or 0.0)
        post = None
        if fwd + bwd > 0 and s.get("optimizer_ms"):
            post = float(s["optimizer_ms"]["median"]) + float((s.get("other_ms") or {}).get("median") or 0.0)
            post = min(post, max(it_ms - exposed - fwd - bwd, 0.0)) if it_ms > fwd + bwd else None
        lo, hi = s["iteration_ms"].get("ci_low"), s["iteration_ms"].get("ci_high")
        rel_ci = (float(hi) - float(lo)) / 2.0 / it_ms if lo is not None and hi is not None and it_ms > 0 else None
        job.runs.append(Run(itype, tuple(cl["workers_per_node"]), int(j["local_batch_size"]), it_ms, exposed,
                            post, config, rel_ci))
        if fwd + bwd > 0 and job.backward_fraction is None:
            job.backward_fraction = bwd / (fwd + bwd)
        buckets = [b for b in (s.get("buckets") or []) if b.get("bytes")]
        if buckets and job.bucket_bytes is None:
            buckets.sort(key=lambda b: (b.get("ready_ms") is None, b.get("ready_ms") or 0.0, -b["index"]))
            job.bucket_bytes = [float(b["bytes"]) for b in buckets]
            readies = [b.get("ready_ms") for b in buckets]
            if all(r is not None for r in readies) and fwd + bwd > 0:
                # ready_ms counts from the start of backward (docs/profile-format.md)
                job.ready_fractions = [min(max(r / max(bwd, 1e-9), 0.0), 1.0) for r in readies]
            if not job.grad_bytes:
                job.grad_bytes = int(sum(job.bucket_bytes))
    if not job.runs:
        raise SriftyError(f"The profiles of {job.model} hold no measured iteration time.",
                          "Re-record them with `srifty profile` (a complete run).")
    return job


def load_job(path: str | Path) -> JobProfile:
    """One profile file, or a directory with one model's profiles (several instance types)."""
    from srifty import profile as profile_mod

    return job_from_profiles(profile_mod.load_many([str(path)]))


def _profile_files(paths: Sequence[str | Path]) -> list[Any]:
    """Profiles under ``paths``; other JSON files in a corpus directory (calibration.json,
    anything without a ``schema_version``) are skipped, a broken profile still fails loudly."""
    import json

    from srifty import profile as profile_mod

    out = []
    for raw in paths:
        p = Path(raw)
        if not p.is_dir():
            out.extend(profile_mod.load_many([str(p)]))
            continue
        for f in sorted(q for q in p.rglob("*.json") if not q.name.startswith(".")):
            try:
                head = json.loads(f.read_text())
            except (OSError, ValueError):
                head = {"schema_version": None}  # let the profile loader say what is wrong
            if isinstance(head, dict) and "schema_version" in head:
                out.append(profile_mod.load(f))
    return out


def load_corpus(paths: Sequence[str | Path]) -> list[JobProfile]:
    """Training profiles under ``paths`` grouped by model (collectives profiles are skipped)."""
    by_model: dict[str, list[Any]] = {}
    for p in _profile_files(paths):
        if p.kind == "training":
            by_model.setdefault(p.model, []).append(p)
    jobs = [job_from_profiles(ps) for _, ps in sorted(by_model.items())]
    # A CPU factor is a property of the host type (measured by calibration), not of a job: every
    # job may use the factors any profile in the corpus recorded, e.g. for a type it never ran on.
    shared: dict[str, float] = {}
    for j in jobs:
        for t, f in j.cpu_factors.items():
            shared.setdefault(t, f)
    for j in jobs:
        j.cpu_factors = {**shared, **j.cpu_factors}
    return jobs


@dataclass(frozen=True)
class CollectivePoint:
    """One allreduce measurement across emulated hosts: bytes, world, configured bottleneck rate."""

    config: str
    nbytes: float
    world: int
    bottleneck_mbit: float
    ms: float
    # hosts at the slowest configured rate when the ring mixes rates; 0 when every link has one rate
    slowest_hosts: int = 0


def mixed_ring_slowest_hosts(rates_mbit: Sequence[float]) -> int:
    """How many hosts of a ring sit at its slowest configured link rate, when the rates mix; 0
    when every host has the same rate (see ``LinkScale.emulated_mixed_ring``)."""
    if not rates_mbit or min(rates_mbit) == max(rates_mbit):
        return 0
    return sum(1 for r in rates_mbit if r == min(rates_mbit))


def load_collectives(paths: Sequence[str | Path]) -> list[CollectivePoint]:
    """Allreduce sweeps across emulated hosts (``cluster.launcher == 'emulated'``, 2+ nodes)."""
    out = []
    for p in _profile_files(paths):
        if p.kind != "collectives":
            continue
        cl = p.doc.get("cluster") or {}
        rates = [(h.get("spec") or {}).get("bandwidth_mbit") for h in cl.get("hosts") or []]
        if cl.get("launcher") != "emulated" or not rates or not all(rates):
            continue
        config = cl.get("config") or "+".join(f"1x{h.get('instance_type')}" for h in cl.get("hosts") or [])
        slowest = mixed_ring_slowest_hosts(rates)
        for c in p.doc.get("collectives") or []:
            if c.get("op") == "allreduce" and int(c.get("nodes") or 1) >= 2 and c.get("median_ms"):
                out.append(CollectivePoint(config, float(c["bytes"]), int(c["world_size"]), float(min(rates)),
                                           float(c["median_ms"]), slowest))
    return out


@dataclass(frozen=True)
class AllreduceRow:
    """One measured allreduce: ``nodes`` × ``gpus_per_node`` GPUs of ``instance_type``."""

    instance_type: str
    nodes: int
    gpus_per_node: int
    nbytes: float
    us: float


def load_allreduce_rows(paths: Sequence[str | Path], min_bytes: float = 1 << 20) -> list[AllreduceRow]:
    """Allreduces of ``srifty profile --collectives`` across 2+ nodes of one real instance type (the
    EC2 backend), messages of ``min_bytes`` or more: what the network of that type measured."""
    out = []
    for p in _profile_files(paths):
        if p.kind != "collectives":
            continue
        cl = p.doc.get("cluster") or {}
        types = set(cl.get("instance_types") or [])
        if cl.get("launcher") == "emulated" or len(types) != 1 or int(cl.get("nodes") or 1) < 2:
            continue
        (itype,) = types
        for c in p.doc.get("collectives") or []:
            if c.get("op") == "allreduce" and int(c.get("nodes") or 1) >= 2 and c.get("median_ms") \
                    and float(c["bytes"]) >= min_bytes:
                wpn = c.get("workers_per_node") or [int(c["world_size"]) // int(c["nodes"])]
                out.append(AllreduceRow(itype, int(c["nodes"]), int(max(wpn)), float(c["bytes"]),
                                        float(c["median_ms"]) * 1e3))
    return out


# --------------------------------------------------------------------------- hardware


@dataclass(frozen=True)
class Hardware:
    name: str
    slots: int
    intra: Link
    inter: Link
    fp32_tflops: float | None
    mem_gbytes_per_s: float | None
    cpu_share: float | None
    notes: tuple[str, ...] = ()
    emulated: bool = False
    tf32_tflops: float | None = None
    fp16_tflops: float | None = None  # FP16/BF16 tensor cores, dense
    intra_kind: str = "pcie"  # "nvlink" (NVLink/NVSwitch) or "pcie": see hardware_of
    inter_kind: str = "tcp"  # "efa" or "tcp" (ENA); emulated hosts: "tbf"
    # measured factors on the spec speed, per FLOPS figure ("fp16", "tf32", "fp32"): srifty.gpuspeed
    speed_factors: tuple[tuple[str, float], ...] = ()

    @property
    def hierarchical_allreduce(self) -> bool:
        """Whether an allreduce across these nodes may take the hierarchical form (NVLink/NVSwitch
        nodes only: see srifty.simulate.allreduce_ms)."""
        return self.intra_kind == "nvlink"

    @property
    def speed(self) -> float | None:
        """A relative compute speed used to transfer compute time between types (FP32 work)."""
        return self.speed_for(None)

    def flops_kind(self, precision: str | None) -> str:
        """Which FLOPS figure work in ``precision`` runs on: the tensor-core figure of FP16/BF16/AMP
        or TF32 where the GPU has it ("fp16", "tf32"), else "fp32"."""
        p = (precision or "fp32").lower()
        if p in HALF_PRECISIONS and self.fp16_tflops:
            return "fp16"
        if p == "tf32" and self.tf32_tflops:
            return "tf32"
        return "fp32"

    def peak_tflops(self, precision: str | None) -> float | None:
        """The spec sheet's TFLOPS for work in ``precision`` (:meth:`flops_kind`); None without one."""
        kind = self.flops_kind(precision)
        return {"fp16": self.fp16_tflops, "tf32": self.tf32_tflops}.get(kind, self.fp32_tflops)

    def speed_factor(self, precision: str | None) -> float | None:
        """The measured factor on this GPU's spec speed for work in ``precision`` (srifty.gpuspeed),
        None where none was fitted."""
        return dict(self.speed_factors).get(self.flops_kind(precision))

    def speed_for(self, precision: str | None) -> float | None:
        """Relative speed for work in ``precision`` by the spec sheet: √(FLOPS × memory bandwidth),
        the FLOPS being the tensor-core figure the precision runs on (FP16/BF16/AMP, TF32) where
        the GPU has it. :func:`transfer_speeds` adds the measured factors."""
        flops = self.peak_tflops(precision)
        if flops and self.mem_gbytes_per_s:
            return math.sqrt(flops * self.mem_gbytes_per_s)
        if flops:
            return flops
        return self.cpu_share


def transfer_speeds(a: Hardware, b: Hardware, precision: str | None) -> tuple[float | None, float | None]:
    """The speeds that transfer compute from ``a`` to ``b``: the spec speeds, times the measured
    factors when *both* GPUs have one for the precision's FLOPS figure. A factor says how a GPU
    runs against its spec relative to the other measured GPUs; held against a GPU without one it
    did worse than the spec ratio alone (leave one chip out of Lambda's tables: 28.5% against
    26.8%, docs/latency-model.md)."""
    fa, fb = a.speed_factor(precision), b.speed_factor(precision)
    sa, sb = a.speed_for(precision), b.speed_for(precision)
    if fa is None or fb is None or sa is None or sb is None:
        return sa, sb
    return sa * fa, sb * fb


def _intra_bandwidth(link_text: str, stated: float | None) -> tuple[float, str | None]:
    if stated:
        return float(stated), None
    m = re.search(r"pcie\s*gen\s*(\d)", link_text or "", re.I)
    if m and f"gen{m.group(1)}" in PCIE_GBYTES_PER_S:
        return PCIE_GBYTES_PER_S[f"gen{m.group(1)}"], f"intra-node bandwidth from the PCIe Gen{m.group(1)} x16 line rate"
    return DEFAULT_INTRA_GBYTES_PER_S, f"intra-node bandwidth unknown: assumed {DEFAULT_INTRA_GBYTES_PER_S} GB/s"


@lru_cache(maxsize=1)
def median_gbytes_per_tflop() -> float:
    """Median memory GB/s per FP32 TFLOPS over the shipped GPU specs that state both. A GPU
    whose spec lacks its bandwidth (T4g, Radeon Pro V520) would otherwise be compared by FLOPS
    alone against others' √(FLOPS × GB/s): a 6x error between a T4 and a T4g."""
    import csv

    path = Path(__file__).resolve().parent / "data" / "gpu_specs.csv"
    with path.open(newline="") as fh:
        ratios = sorted(float(r["memory_bandwidth_gbytes_per_s"]) / float(r["fp32_tflops"]) for r in csv.DictReader(fh)
                        if r.get("memory_bandwidth_gbytes_per_s") and r.get("fp32_tflops"))
    return ratios[len(ratios) // 2]


def hardware_of(catalog: "Catalog", instance_type: str) -> Hardware:
    it = catalog.get(instance_type)
    notes = []
    if it.emulation is not None:
        e = it.emulation
        # the configured tbf rate; LinkScale turns it into goodput (TBF_GOODPUT, or the collectives' fit)
        return Hardware(it.name, it.workers_per_node, Link(EMULATED_INTRA_GBYTES_PER_S, INTRA_LATENCY_US),
                        Link(e.bandwidth_mbit / 8000.0, e.latency_ms * 1e3), None, None, e.cpu_share, emulated=True,
                        inter_kind="tbf")
    intra_bw, note = _intra_bandwidth(it.intra_node_link, it.intra_node_bandwidth_gbytes_per_s)
    if note:
        notes.append(note)
    gbps = it.network_gbps or it.network_up_to_gbps
    if not it.network_gbps:
        notes.append(f"{it.name}: network baseline unknown, used " + (f"'up to' {gbps} Gbps" if gbps else "10 Gbps"))
    inter = Link((gbps or 10.0) / 8.0, INTER_LATENCY_US)
    spec = catalog.gpu_spec(it.gpu_name) if it.gpu_name else None
    mem_bw = spec.memory_bandwidth_gbytes_per_s if spec else None
    if spec and spec.fp32_tflops and not mem_bw:  # keep every GPU's speed on one basis (see speed_for)
        ratio = median_gbytes_per_tflop()
        mem_bw = spec.fp32_tflops * ratio
        notes.append(f"{it.gpu_name}: memory bandwidth not stated; imputed {mem_bw:.0f} GB/s from its FP32 TFLOPS "
                     f"by the median of the GPUs that state both ({ratio:.0f} GB/s per TFLOPS)")
    return Hardware(it.name, it.workers_per_node, Link(intra_bw, INTRA_LATENCY_US), inter,
                    spec.fp32_tflops if spec else None, mem_bw,
                    it.vcpus or None, tuple(notes), tf32_tflops=spec.tf32_tflops_dense if spec else None,
                    fp16_tflops=spec.fp16_bf16_tensor_tflops_dense if spec else None,
                    speed_factors=tuple((c.flops, c.factor) for c in catalog.speed_corrections
                                        if c.gpu_name == it.gpu_name) if spec else (),
                    intra_kind="nvlink" if re.match(r"\s*(nvlink|nvswitch)", it.intra_node_link or "", re.I) else "pcie",
                    inter_kind="efa" if it.efa_interfaces and (gbps or 0) >= EFA_MIN_GBPS else "tcp")


MIN_SHORTFALL = 1e-3  # goodput's shortfall (1 − goodput) floor for its log


@dataclass(frozen=True)
class LinkScale:
    """Achieved fraction of the stated link bandwidth, per kind of link (1.0 = the catalog's
    figures). TCP networks and PCIe within a node (with a latency multiplier) are fitted by the
    communication model on measured multi-worker training runs; NVLink/NVSwitch and EFA links
    keep the catalog's figures, except on instance types with measured allreduces (nccl-tests),
    which get their own efficiencies (``fast_links``: (type, NVLink efficiency, EFA efficiency)).
    A figure fitted on one kind of link never stands in for another: one fitted on TCP g4dn
    clusters put p4d/p5 allreduces at 3-10x their measured time."""

    # TCP (ENA) for every type alike, as CommModel's grid tries it; None: per type (tcp_gbps)
    inter_efficiency: float | None = None
    intra_efficiency: float = 1.0  # PCIe
    latency_factor: float = 1.0  # TCP and PCIe latencies
    fast_links: tuple[tuple[str, float, float], ...] = ()
    # Emulated hosts (tc tbf links) are not scaled by the fitted efficiencies above (those are
    # fitted on real clusters): their goodput is the tbf framing prior or a fit on the
    # allreduce sweeps (srifty.model.fit_emulated_links), with a per-step latency in µs.
    emulated_goodput: float = TBF_GOODPUT
    emulated_latency_us: float = INTER_LATENCY_US
    # Sustained goodput measured at each configured link rate (Mbit/s, goodput) by the sweeps'
    # large messages (srifty.model.fit_emulated_goodput_by_rate): TCP through a tbf shaper keeps
    # less of a slow link (0.86 of 50 Mbit/s against 0.93 of 200 and 0.96 of 800: the shortfall
    # 1 − goodput about halves per 4× rate). Between two measured rates the shortfall is
    # interpolated in log–log; outside them it follows the power law fitted over all measured
    # rates (exponent clamped to [−1, 0]) from the nearest; one rate: its figure; no table: the
    # pooled ``emulated_goodput``.
    emulated_goodput_by_mbit: tuple[tuple[float, float], ...] = ()
    # A ring that mixes emulated link rates keeps less of its slowest link than a ring of that
    # rate alone (docs/emulated-cluster.md, Limits): the goodput above is multiplied by the
    # first figure when one host sits at the slowest rate, by the second when two or more do.
    # Fitted on sweeps of mixed rings (srifty.model.fit_emulated_mixed_ring); 1 = no loss.
    emulated_mixed_ring: tuple[float, float] = (1.0, 1.0)
    # Backward on an emulated host runs 1 + emulated_overlap_slowdown × (busy peers) times slower
    # while an allreduce is in flight: the collective's thread competes for the host's CPU quota,
    # and the peers still computing for the machine's cores (busy_peers: each peer weighted by
    # the share of the step it computes). Fitted on the emulated multi-host training runs
    # (CommModel); 0 = overlap is free. See docs/latency-model.md.
    emulated_overlap_slowdown: float = 0.0
    # PCIe efficiency of a ring that stays inside one node (None: ``intra_efficiency``). Fitted
    # on the runs of one node alone (CommModel): in a ring across nodes the fitted PCIe figure
    # stands for the whole GPU-to-GPU path through the NICs, which is slower than a peer-to-peer
    # copy within a node, so one figure for both put single-node allreduces about 4x too slow.
    node_intra_efficiency: float | None = None
    # TCP (ENA) networks, per instance type: the effective Gbit/s of an allreduce ring across its
    # nodes (the slower of its fitted network and PCIe figures), fitted on that type's own
    # multi-node runs or allreduces (CommModel). A type measured here keeps its fitted figures; any
    # other TCP type gets the prior of :meth:`tcp_gbps` and PCIe at its line rate.
    tcp_links: tuple[tuple[str, float], ...] = ()
    # whether the nodes sit in a cluster placement group (AWS: 10 Gbit/s per TCP flow, not 5)
    placement_group: bool = False

    def tcp_measured(self, name: str) -> bool:
        """Whether ``name``'s TCP network was measured (its own runs or allreduces)."""
        return any(t == name for t, _ in self.tcp_links)

    def tcp_gbps(self, hw: Hardware) -> float:
        """Effective inter-node Gbit/s of a TCP (ENA) type: the instance's rate (the catalog's
        baseline) times the frame goodput, or what NCCL's TCP flows carry, whichever is less. The
        flows carry the type's own measured figure; on a type never measured, the median of the
        measured types' figures (flows are NCCL's and AWS's, not the type's), or with nothing
        measured NCCL's 16 flows at AWS's per-flow limit. In a cluster placement group the flows
        carry twice as much (10 Gbit/s per flow, not 5). No measured type and ``inter_efficiency``
        set (CommModel's grid): the catalog rate times it."""
        cap = hw.inter.gbytes_per_s * 8.0
        measured = dict(self.tcp_links)
        if not measured and self.inter_efficiency is not None:
            return cap * self.inter_efficiency
        if hw.name in measured:
            flows = measured[hw.name]
        elif measured:
            flows = statistics.median(measured.values())
        else:
            flows = NCCL_AWS_FLOWS * FLOW_GBPS
        if self.placement_group:
            flows *= PLACEMENT_GROUP_FLOW_GBPS / FLOW_GBPS
        return min(cap * FRAME_GOODPUT, flows)

    def within_node(self, raw: Hardware, scaled: Hardware) -> Link:
        """The intra-node link of a ring on one node of ``raw`` (catalog figures; ``scaled`` is
        ``apply(raw)``): the single-node PCIe efficiency where one is fitted, else ``scaled.intra``."""
        if self.node_intra_efficiency is None or raw.emulated or raw.intra_kind != "pcie":
            return scaled.intra
        return Link(raw.intra.gbytes_per_s * self.node_intra_efficiency, scaled.intra.latency_us)

    def mixed_ring_factor(self, rates_mbit: Sequence[float]) -> float:
        """What an emulated ring over links of ``rates_mbit`` keeps of its slowest link's goodput."""
        k = mixed_ring_slowest_hosts(rates_mbit)
        return 1.0 if k == 0 else self.emulated_mixed_ring[0 if k == 1 else 1]

    def emulated_goodput_at(self, mbit: float) -> float:
        """Goodput of an emulated link configured at ``mbit`` (see ``emulated_goodput_by_mbit``)."""
        table = sorted(self.emulated_goodput_by_mbit)
        if not table:
            return self.emulated_goodput
        if len(table) == 1:
            return table[0][1]
        xs = [math.log(r) for r, _ in table]
        ys = [math.log(max(1.0 - g, MIN_SHORTFALL)) for _, g in table]
        x = math.log(mbit)
        if x <= xs[0] or x >= xs[-1]:
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            slope = sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)
            slope = min(max(slope, -1.0), 0.0)
            x0, y0 = (xs[0], ys[0]) if x <= xs[0] else (xs[-1], ys[-1])
            y = y0 + slope * (x - x0)
        else:
            i = next(i for i in range(1, len(xs)) if x <= xs[i])
            w = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
            y = ys[i - 1] + w * (ys[i] - ys[i - 1])
        return min(max(1.0 - math.exp(y), 0.2), 1.0)

    def apply(self, hw: Hardware) -> Hardware:
        if hw.emulated:
            goodput = self.emulated_goodput_at(hw.inter.gbytes_per_s * 8000.0)
            return replace(hw, inter=Link(hw.inter.gbytes_per_s * goodput,
                                          max(hw.inter.latency_us, self.emulated_latency_us)))
        measured = next(((nv, efa) for name, nv, efa in self.fast_links if name == hw.name), (1.0, 1.0))
        if hw.intra_kind == "nvlink":
            intra_eff, intra_lat = measured[0], 1.0
        elif not self.tcp_links or self.tcp_measured(hw.name):
            # the PCIe share fitted with the network of the measured types is part of their path
            intra_eff, intra_lat = self.intra_efficiency, self.latency_factor
        else:  # a type whose network was never measured: PCIe at its line rate, the network its prior
            intra_eff, intra_lat = 1.0, self.latency_factor
        if hw.inter_kind == "efa":
            inter = Link(hw.inter.gbytes_per_s * measured[1], hw.inter.latency_us)
        else:
            inter = Link(self.tcp_gbps(hw) / 8.0, hw.inter.latency_us * self.latency_factor)
        return replace(hw, intra=Link(hw.intra.gbytes_per_s * intra_eff, hw.intra.latency_us * intra_lat),
                       inter=inter)

    def network_measured(self, hw: Hardware) -> bool:
        """Whether ``hw``'s inter-node network was measured (emulated links always are, by the
        sweeps or their prior; EFA by nccl-tests; TCP by runs or allreduces on the type)."""
        if hw.emulated:
            return True
        if hw.inter_kind == "efa":
            return any(name == hw.name for name, _, _ in self.fast_links)
        return self.tcp_measured(hw.name)


# --------------------------------------------------------------------------- features


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
        self._rel_ci: dict[str, float | None] = {}
        self._estimates: dict[tuple[str, float], RowEstimate] = {}
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
        if name not in self._curves:
            self._curves[name] = self.job.compute_curve(name)
        return self._curves[name]

    def _resolve_grad_bytes(self) -> tuple[float | None, bool]:
        job = self.job
        if job.grad_bytes:
            return float(job.grad_bytes), False
        if job.param_count:
            return float(job.param_count * _bytes_per_param(job.precision)), False
        # Estimate from single-node multi-worker runs with sync times: ring algebra inverted.
        est = []
        for r in job.runs:
            if r.nodes == 1 and r.world_size > 1 and r.sync_ms:
                hw = self.hardware(r.instance_type)
                p = r.world_size
                t = r.sync_ms / 1e3 - 2 * (p - 1) * hw.intra.latency_us * 1e-6
                if t > 0:
                    est.append(t * hw.intra.gbytes_per_s * 1e9 / (2 * (p - 1) / p))
        if est:
            est.sort()
            return est[len(est) // 2], True
        return None, True

    def _speeds(self, a: str, b: str) -> tuple[float, float] | None:
        """Relative compute speeds of types ``a`` and ``b`` on one basis: the measured CPU factors
        of emulated types when both have one (speed = 1/factor), else the hardware figures."""
        fa, fb = self.job.cpu_factors.get(a), self.job.cpu_factors.get(b)
        if fa and fb:
            return 1.0 / fa, 1.0 / fb
        sa, sb = transfer_speeds(self.hardware(a), self.hardware(b), self.job.precision)
        if sa is None or sb is None:
            return None
        return sa, sb

    def _transfer(self, instance_type: str, batch: float, curve_of: Callable[[str], ComputeCurve | None]
                  ) -> tuple[float, str] | None:
        best = None
        for src in self.job.instance_types:
            sc = curve_of(src)
            sp = self._speeds(src, instance_type)
            if sc is None or sp is None:
                continue
            cand = (abs(math.log(sp[0] / sp[1])), src, sc.at(batch) * sp[0] / sp[1])
            best = min(best, cand) if best else cand
        return (best[2], best[1]) if best else None

    def by_operators(self, instance_type: str) -> bool:
        """Whether ``instance_type``'s compute comes from the operator model (srifty.opmodel): a GPU
        type nobody profiled, for a job profiled on CPUs only whose profile counted its operators
        (a GPU profile is carried to other GPUs by the speed ratio instead)."""
        if instance_type not in self._by_operators:
            hw = self.hardware(instance_type)
            gpu_profiled = any(self.catalog.has(t) and self.catalog.get(t).gpu_count > 0
                               for t in self.job.instance_types)
            self._by_operators[instance_type] = bool(
                self.step_model is not None and self.job.operators is not None and not gpu_profiled
                and self.curve(instance_type) is None and not hw.emulated
                and hw.peak_tflops(self.job.precision) and hw.mem_gbytes_per_s)
        return self._by_operators[instance_type]

    def operator_step_ms(self, instance_type: str, batch: float) -> tuple[float, float]:
        """(compute, post) ms of one step at ``batch`` on ``instance_type`` by the operator model."""
        hw = self.hardware(instance_type)
        terms = step_terms(self.job.operators, batch, hw.peak_tflops(self.job.precision), hw.mem_gbytes_per_s,
                           self.job.host_input_ms_per_sample * batch)
        return self.step_model.split_ms(terms)

    def operator_note(self, instance_type: str) -> str:
        gpu = self.catalog.get(instance_type).gpu_name
        lo, hi = self.step_model.log_bounds(gpu)
        fitted = ", ".join(sorted(self.step_model.gpus))
        return (f"compute on {instance_type} predicted from the operators the CPU profile counted (kernel launches, "
                f"arithmetic and memory traffic on {gpu}'s spec figures; fixed costs fitted on {fitted} measurements"
                + ("" if gpu in self.step_model.gpus else f", none on {gpu}") +
                f"): the interval spans x{math.exp(lo):.2f} to x{math.exp(hi):.2f} of it; profile on {instance_type} "
                "for a measured figure")

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

    def batch_bounds(self, instance_type: str, batch: float) -> tuple[tuple[float, float], str | None]:
        """(least, most) compute at ``batch`` over the estimate, as ratios (ComputeCurve.bounds of
        ``instance_type``'s curve, or of the type its compute is transferred from), and the warning
        where ``batch`` lies outside the batches measured there."""
        if self.by_operators(instance_type):  # the operator model's own interval, at any batch
            lo, hi = self.step_model.log_bounds(self.catalog.get(instance_type).gpu_name)
            return (math.exp(lo), math.exp(hi)), None
        src = self.compute_source(instance_type)
        curve = self.curve(src) if src else None
        if curve is None:
            return (1.0, 1.0), None
        bounds, at = curve.bounds(batch), curve.at(batch)
        if curve.covers(batch):
            return (bounds[0] / at, bounds[1] / at), None
        note = (f"per-worker batch {batch:g} is outside the {self.profiled_batches(instance_type)}: its compute is "
                f"extrapolated ({at:.3g} ms there, anywhere from {bounds[0]:.3g} to {bounds[1]:.3g} ms), and the "
                f"interval takes that in; profile at batch {batch:g} for a measured figure"
                # a transferred type's compute note already carries the launch-bound clause
                + (self.launch_bound_note(instance_type, batch) if src == instance_type else ""))
        return (bounds[0] / at, bounds[1] / at), note

    def compute_ms(self, instance_type: str, batch: float) -> tuple[float, bool, str | None]:
        """Per-worker compute at ``batch`` on ``instance_type`` and whether it was transferred.

        A type with a measured (single-worker) profile uses it; only a type never profiled is
        transferred from the nearest profiled one by the speed ratio (see :meth:`_speeds`).
        """
        c = self.curve(instance_type)
        if c is not None:
            return c.at(batch), False, None
        if self.by_operators(instance_type):
            return self.operator_step_ms(instance_type, batch)[0], True, self.operator_note(instance_type)
        got = self._transfer(instance_type, batch, self.curve)
        if got is None:
            raise SriftyError(
                f"Cannot transfer {self.job.model}'s compute time to {instance_type}: no spec figures to compare "
                f"it with {', '.join(self.job.instance_types)}.",
                f"Profile {self.job.model} on {instance_type} (or a type with the same GPU).")
        if self.job.cpu_factors.get(instance_type):
            return got[0], True, f"compute on {instance_type} transferred from {got[1]} by measured CPU factor ratio"
        measured = all(self.hardware(t).speed_factor(self.job.precision) for t in (instance_type, got[1]))
        return got[0], True, (f"compute on {instance_type} transferred from {got[1]} by GPU/CPU spec ratio"
                              + (" with measured GPU speed factors" if measured else "") + ", a rough "
                              "estimate (docs/ACCURACY.md, 'Compute transfer across GPUs', shows how far such ratios "
                              f"miss); profile on {instance_type} for a measured figure"
                              + self.launch_bound_note(instance_type, batch))

    def post_ms(self, instance_type: str, batch: float) -> float:
        """Optimizer + other time per step after the allreduces (0 where no profile splits it)."""
        c = self.post_ms_curve(instance_type)
        if c is not None:
            return c.at(batch)
        if self.curve(instance_type) is None and self.by_operators(instance_type):
            return self.operator_step_ms(instance_type, batch)[1]
        got = self._transfer(instance_type, batch, self.post_ms_curve)
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

    def estimate(self, config: ClusterConfig, local_batch_size: float) -> RowEstimate:
        """Simulator estimate and features of ``config`` (resolved) at ``local_batch_size`` per worker.

        Synchronous data parallelism runs at the pace of the slowest worker: its forward and
        backward set when buckets become ready (a faster worker waits inside its allreduce),
        and its optimizer/other time follows the last allreduce.
        """
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
        step_alone, compute = max(cycles)  # the slowest worker
        post = step_alone - compute
        intra = Link(min(h.intra.gbytes_per_s for h in hws), max(h.intra.latency_us for h in hws))
        inter = Link(min(h.inter.gbytes_per_s for h in hws), max(h.inter.latency_us for h in hws))
        if len(hws) == 1 and len(wpn_all) == 1:  # one node: its ring never leaves it
            intra = self.node_intra(config.groups[0].instance_type)
        emulated = all(h.emulated for h in hws)
        if emulated and len(wpn_all) > 1:
            rates = [self.catalog.get(g.instance_type).emulation.bandwidth_mbit for g in config.groups
                     for _ in range(g.count)]
            inter = Link(inter.gbytes_per_s * self.link_scale.mixed_ring_factor(rates), inter.latency_us)
        if emulated and max(wpn_all) == 1:
            # CPU workers send from host memory: with one worker per host no intra-host hop is on
            # the ring's path (on a GPU node the PCIe hop between GPU and NIC is)
            intra = inter
        gb = self.grad_bytes
        if gb:
            buckets = self.job.bucket_bytes if self.job.bucket_bytes else simulate.bucket_layout(gb)
            if self.job.bucket_bytes and abs(sum(buckets) - gb) > 0.01 * gb:
                buckets = simulate.bucket_layout(gb)
            fracs = self.job.ready_fractions if (self.job.bucket_bytes is buckets) else None
            def simulated(inter: Link) -> simulate.SimResult:
                return simulate.simulate_iteration(
                    compute, buckets, wpn_all, intra, inter,
                    self.job.backward_fraction or simulate.DEFAULT_BACKWARD_FRACTION, fracs, optimizer_ms=post,
                    overlap_slowdown=(self.link_scale.emulated_overlap_slowdown * busy_peers(config, cycles)
                                      if emulated else 0.0),
                    hierarchical=all(h.hierarchical_allreduce for h in hws))

            sim = simulated(inter)
            prior = [h.name for h in hws if not self.link_scale.network_measured(h)]
            if len(wpn_all) > 1 and prior:
                # a network nobody measured may be PRIOR_NETWORK_SPREAD times slower or faster than
                # its prior: the step at the slower network, and without that share of its exposed
                # communication at the faster one
                k = PRIOR_NETWORK_SPREAD
                slow_ms = simulated(Link(inter.gbytes_per_s / k, inter.latency_us)).iteration_ms
                exposed = max(sim.iteration_ms - step_alone, 0.0) / sim.iteration_ms
                net_low, net_high = 1.0 - exposed * (1.0 - 1.0 / k), slow_ms / sim.iteration_ms
                batch_low, batch_high = batch_low * net_low, batch_high * net_high
                note = (f"the network between {', '.join(dict.fromkeys(prior))} nodes was never measured: its "
                        f"bandwidth is a prior from the instance's rate and AWS's per-flow limit (latency-model.md, "
                        f"section 3), and the interval spans x{net_low:.2f} to x{net_high:.2f} of the step for it; "
                        "`srifty profile --collectives --backend ec2 --nodes 2 --instance-types TYPE` measures it, "
                        "for a model fitted with that profile in its corpus (`srifty fit`)")
                if note not in notes:
                    notes.append(note)
            if self.grad_bytes_estimated and sum(wpn_all) > 1:
                notes.append(gradient_estimated_note(gb))
        else:
            sim = simulate.SimResult(step_alone, compute, float("nan"), float("nan"))
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
        return RowEstimate(feats, sim.iteration_ms, compute, transferred, notes, loosest, tuple(loose_notes),
                           (batch_low, batch_high), any(self.by_operators(g.instance_type) for g in config.groups))

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
                "batch_low": est.batch_bounds[0], "batch_high": est.batch_bounds[1],
                "by_operators": float(est.by_operators)} for est in estimates]
        return pd.DataFrame(out, columns=FEATURES + ["sim_ms", "compute_ms", "batch_low", "batch_high", "by_operators"])


def busy_peers(config: ClusterConfig, cycles: Sequence[tuple[float, float]]) -> float:
    """How many of the slowest host's peers compute alongside it: each peer counts for the share of
    the slowest host's step it spends computing (its step alone / the slowest one's).
    ``cycles``: (step alone, compute) of each of ``config``'s groups. A peer that has finished its
    backward waits inside the allreduce and leaves the machine's cores to the others, so a fast
    host slows a slow one's overlapped backward less than a peer of its own speed does."""
    steps = [c[0] for g, c in zip(config.groups, cycles) for _ in range(g.count)]
    slowest = max(steps)
    return (sum(steps) - slowest) / slowest


def run_config(run: Run) -> ClusterConfig:
    """The run's configuration with its workers per node (mixed runs keep every host's type)."""
    if not run.mixed:
        return from_placement(run.instance_type, run.workers_per_node)
    from srifty.configspec import NodeGroup, parse_config

    types = [g.instance_type for g in parse_config(run.config or "").groups for _ in range(g.count)]
    if len(types) != len(run.workers_per_node):
        raise SriftyError(f"Run configuration {run.config} does not match its {len(run.workers_per_node)} node(s).")
    groups: list[NodeGroup] = []
    for t, w in zip(types, run.workers_per_node):
        if groups and groups[-1].instance_type == t and groups[-1].workers_per_node == w:
            groups[-1] = NodeGroup(groups[-1].count + 1, t, w)
        else:
            groups.append(NodeGroup(1, t, int(w)))
    return ClusterConfig(tuple(groups))


@lru_cache(maxsize=8)
def _catalog_for(kind: str) -> "Catalog":
    from srifty.catalog import Catalog

    if kind == "default":
        return Catalog.default()
    return Catalog.from_emulated_spec(kind)

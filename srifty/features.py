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
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from srifty import simulate
from srifty.configspec import ClusterConfig, from_placement
from srifty.errors import SriftyError
from srifty.simulate import Link

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from srifty.catalog import Catalog

# Priors used only where the catalog states no figure (documented in docs/latency-model.md).
PCIE_GBYTES_PER_S = {"gen3": 15.75, "gen4": 31.5, "gen5": 63.0}  # x16, one direction (PCI-SIG line rates)
DEFAULT_INTRA_GBYTES_PER_S = 10.0
EMULATED_INTRA_GBYTES_PER_S = 2.0  # workers sharing an emulated host talk over loopback sockets
INTRA_LATENCY_US = 10.0
INTER_LATENCY_US = 30.0
BYTES_PER_PARAM = {"fp32": 4, "float32": 4, "tf32": 4, "fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2, "amp": 4}

FEATURES = [
    "log_sim_ms", "log_compute_ms", "log_allreduce_ms", "comm_to_compute", "exposed_to_compute",
    "nodes", "world_size", "max_workers_per_node", "min_workers_per_node", "imbalance", "n_types",
    "log_grad_mb", "grad_bytes_estimated", "log_local_batch", "log_compute_per_sample_ms",
    "inter_gbytes_per_s", "intra_gbytes_per_s", "gpu_fp32_tflops", "gpu_mem_gbytes_per_s", "transferred",
]

# What the residual model reads: scale-free, model-agnostic quantities only. Absolute sizes
# (gradient MB, ms per sample, batch) identify the few training models and do not transfer.
RESIDUAL_FEATURES = [
    "comm_to_compute", "exposed_to_compute", "nodes", "world_size", "max_workers_per_node",
    "min_workers_per_node", "imbalance", "n_types", "inter_gbytes_per_s", "intra_gbytes_per_s",
    "grad_bytes_estimated", "transferred",
]


@dataclass(frozen=True)
class Run:
    """One measured run: placement, per-worker batch, step time and (when known) sync time."""

    instance_type: str
    workers_per_node: tuple[int, ...]
    local_batch_size: int
    step_ms: float
    sync_ms: float | None = None

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
        return max(value, floor, 1e-6)

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

    @property
    def instance_types(self) -> list[str]:
        return sorted({r.instance_type for r in self.runs})

    def restricted(self, keep: Callable[[Run], bool], forget_size: bool = False) -> "JobProfile":
        """The same job seeing only the runs ``keep`` accepts (for held-out validation)."""
        out = replace(self, runs=[r for r in self.runs if keep(r)])
        if forget_size:
            out = replace(out, param_count=None, grad_bytes=None, bucket_bytes=None, ready_fractions=None)
        return out

    def compute_curve(self, instance_type: str) -> ComputeCurve | None:
        runs = [r for r in self.runs if r.instance_type == instance_type]
        if not runs:
            return None
        smallest = min(r.world_size for r in runs)
        pts = [(r.local_batch_size, r.step_ms - (r.sync_ms or 0.0)) for r in runs
               if r.world_size == smallest and (smallest == 1 or r.sync_ms is not None)]
        if not pts:  # multi-worker runs without sync times: their step time bounds compute from above
            pts = [(r.local_batch_size, r.step_ms) for r in runs if r.world_size == smallest]
        return ComputeCurve.from_points(pts)

    def measured(self, instance_type: str, workers_per_node: Sequence[int], local_batch_size: int) -> float | None:
        """Median measured step time of exactly this placement and batch (placement order ignored)."""
        key = sorted(workers_per_node)
        times = sorted(r.step_ms for r in self.runs if r.instance_type == instance_type
                       and r.local_batch_size == local_batch_size and sorted(r.workers_per_node) == key)
        return times[len(times) // 2] if times else None


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
    for p in training:
        doc = p.doc
        j = doc.get("job") or {}
        job.param_count = job.param_count or j.get("param_count")
        job.grad_bytes = job.grad_bytes or j.get("grad_bytes")
        job.precision = job.precision or j.get("precision")
        job.sources.append(p.path or "(profile)")
        cl = doc["cluster"]
        itype = cl["instance_types"][0]
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
        job.runs.append(Run(itype, tuple(cl["workers_per_node"]), int(j["local_batch_size"]), it_ms, exposed))
        fwd = float((s.get("forward_ms") or {}).get("median") or 0.0)
        bwd = float((s.get("backward_compute_ms") or {}).get("median") or 0.0)
        if fwd + bwd > 0 and job.backward_fraction is None:
            job.backward_fraction = bwd / (fwd + bwd)
        buckets = [b for b in (s.get("buckets") or []) if b.get("bytes")]
        if buckets and job.bucket_bytes is None:
            buckets.sort(key=lambda b: (b.get("ready_ms") is None, b.get("ready_ms") or 0.0, -b["index"]))
            job.bucket_bytes = [float(b["bytes"]) for b in buckets]
            readies = [b.get("ready_ms") for b in buckets]
            if all(r is not None for r in readies) and fwd + bwd > 0:
                job.ready_fractions = [min(max((r - fwd) / max(bwd, 1e-9), 0.0), 1.0) for r in readies]
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


def load_corpus(paths: Sequence[str | Path]) -> list[JobProfile]:
    """Training profiles under ``paths`` grouped by model (collectives profiles are skipped)."""
    from srifty import profile as profile_mod

    by_model: dict[str, list[Any]] = {}
    for p in profile_mod.load_many([str(x) for x in paths]):
        if p.kind == "training":
            by_model.setdefault(p.model, []).append(p)
    return [job_from_profiles(ps) for _, ps in sorted(by_model.items())]


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

    @property
    def speed(self) -> float | None:
        """A relative compute speed used to transfer compute time between types."""
        if self.fp32_tflops and self.mem_gbytes_per_s:
            return math.sqrt(self.fp32_tflops * self.mem_gbytes_per_s)
        if self.fp32_tflops:
            return self.fp32_tflops
        return self.cpu_share


def _intra_bandwidth(link_text: str, stated: float | None) -> tuple[float, str | None]:
    if stated:
        return float(stated), None
    m = re.search(r"pcie\s*gen\s*(\d)", link_text or "", re.I)
    if m and f"gen{m.group(1)}" in PCIE_GBYTES_PER_S:
        return PCIE_GBYTES_PER_S[f"gen{m.group(1)}"], f"intra-node bandwidth from the PCIe Gen{m.group(1)} x16 line rate"
    return DEFAULT_INTRA_GBYTES_PER_S, f"intra-node bandwidth unknown: assumed {DEFAULT_INTRA_GBYTES_PER_S} GB/s"


def hardware_of(catalog: "Catalog", instance_type: str) -> Hardware:
    it = catalog.get(instance_type)
    notes = []
    if it.emulation is not None:
        e = it.emulation
        lat = max(e.latency_ms * 1e3, INTER_LATENCY_US)
        return Hardware(it.name, it.workers_per_node, Link(EMULATED_INTRA_GBYTES_PER_S, INTRA_LATENCY_US),
                        Link(e.bandwidth_mbit / 8000.0, lat), None, None, e.cpu_share)
    intra_bw, note = _intra_bandwidth(it.intra_node_link, it.intra_node_bandwidth_gbytes_per_s)
    if note:
        notes.append(note)
    gbps = it.network_gbps or it.network_up_to_gbps
    if not it.network_gbps:
        notes.append(f"{it.name}: network baseline unknown, used " + (f"'up to' {gbps} Gbps" if gbps else "10 Gbps"))
    inter = Link((gbps or 10.0) / 8.0, INTER_LATENCY_US)
    spec = catalog.gpu_spec(it.gpu_name) if it.gpu_name else None
    return Hardware(it.name, it.workers_per_node, Link(intra_bw, INTRA_LATENCY_US), inter,
                    spec.fp32_tflops if spec else None, spec.memory_bandwidth_gbytes_per_s if spec else None,
                    it.vcpus or None, tuple(notes))


@dataclass(frozen=True)
class LinkScale:
    """Achieved fraction of the stated link bandwidth and a latency multiplier (fitted by the
    communication model on measured runs; 1.0 = the catalog's figures)."""

    inter_efficiency: float = 1.0
    intra_efficiency: float = 1.0
    latency_factor: float = 1.0

    def apply(self, hw: Hardware) -> Hardware:
        return replace(hw, intra=Link(hw.intra.gbytes_per_s * self.intra_efficiency, hw.intra.latency_us * self.latency_factor),
                       inter=Link(hw.inter.gbytes_per_s * self.inter_efficiency, hw.inter.latency_us * self.latency_factor))


# --------------------------------------------------------------------------- features


@dataclass
class RowEstimate:
    features: dict[str, float]
    sim_ms: float
    compute_ms: float
    transferred: bool
    notes: list[str]


class FeatureBuilder:
    """Features of (configuration, per-worker batch) rows for one job on one catalog."""

    def __init__(self, job: JobProfile, catalog: "Catalog", link_scale: "LinkScale | None" = None) -> None:
        self.job = job
        self.catalog = catalog
        self.link_scale = link_scale or LinkScale()
        self._hw: dict[str, Hardware] = {}
        self._curves: dict[str, ComputeCurve | None] = {}
        self.grad_bytes, self.grad_bytes_estimated = self._resolve_grad_bytes()

    def hardware(self, name: str) -> Hardware:
        if name not in self._hw:
            self._hw[name] = self.link_scale.apply(hardware_of(self.catalog, name))
        return self._hw[name]

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

    def compute_ms(self, instance_type: str, batch: float) -> tuple[float, bool, str | None]:
        """Per-worker compute at ``batch`` on ``instance_type`` and whether it was transferred."""
        c = self.curve(instance_type)
        if c is not None:
            return c.at(batch), False, None
        target = self.hardware(instance_type)
        best = None
        for src in self.job.instance_types:
            sc = self.curve(src)
            hw = self.hardware(src)
            if sc is None or hw.speed is None or target.speed is None:
                continue
            cand = (abs(math.log(hw.speed / target.speed)), src, sc.at(batch) * hw.speed / target.speed)
            best = min(best, cand) if best else cand
        if best is None:
            raise SriftyError(
                f"Cannot transfer {self.job.model}'s compute time to {instance_type}: no spec figures to compare "
                f"it with {', '.join(self.job.instance_types)}.",
                f"Profile {self.job.model} on {instance_type} (or a type with the same GPU).")
        return best[2], True, f"compute on {instance_type} transferred from {best[1]} by GPU/CPU spec ratio"

    def estimate(self, config: ClusterConfig, local_batch_size: float) -> RowEstimate:
        """Simulator estimate and features of ``config`` (resolved) at ``local_batch_size`` per worker."""
        wpn_all: list[int] = []
        computes, transferred, notes = [], False, []
        hws = []
        for g in config.groups:
            hw = self.hardware(g.instance_type)
            hws.append(hw)
            wpn = g.workers_per_node or hw.slots
            wpn_all.extend([wpn] * g.count)
            c, t, note = self.compute_ms(g.instance_type, local_batch_size)
            computes.append(c)
            transferred |= t
            if note and note not in notes:
                notes.append(note)
        compute = max(computes)  # synchronous data parallelism waits for the slowest worker
        intra = Link(min(h.intra.gbytes_per_s for h in hws), max(h.intra.latency_us for h in hws))
        inter = Link(min(h.inter.gbytes_per_s for h in hws), max(h.inter.latency_us for h in hws))
        gb = self.grad_bytes
        if gb:
            buckets = self.job.bucket_bytes if self.job.bucket_bytes else simulate.bucket_layout(gb)
            if self.job.bucket_bytes and abs(sum(buckets) - gb) > 0.01 * gb:
                buckets = simulate.bucket_layout(gb)
            fracs = self.job.ready_fractions if (self.job.bucket_bytes is buckets) else None
            sim = simulate.simulate_iteration(compute, buckets, wpn_all, intra, inter,
                                              self.job.backward_fraction or simulate.DEFAULT_BACKWARD_FRACTION, fracs)
        else:
            sim = simulate.SimResult(compute, compute, float("nan"), float("nan"))
            notes.append("gradient size unknown: communication not simulated")
        slow = min(hws, key=lambda h: h.speed or float("inf"))
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
        }
        for h in hws:
            notes.extend(n for n in h.notes if n not in notes)
        return RowEstimate(feats, sim.iteration_ms, compute, transferred, notes)

    def frame(self, rows: Sequence[tuple[ClusterConfig, float]]) -> "pd.DataFrame":
        """Feature table (plus sim_ms, compute_ms, transferred) for many rows, each distinct row once."""
        import pandas as pd

        cache: dict[tuple[str, float], RowEstimate] = {}
        out = []
        for config, b in rows:
            key = (config.format(), float(b))
            if key not in cache:
                cache[key] = self.estimate(config, b)
            est = cache[key]
            out.append({**est.features, "sim_ms": est.sim_ms, "compute_ms": est.compute_ms})
        return pd.DataFrame(out, columns=FEATURES + ["sim_ms", "compute_ms"])


def run_config(run: Run) -> ClusterConfig:
    return from_placement(run.instance_type, run.workers_per_node)


@lru_cache(maxsize=8)
def _catalog_for(kind: str) -> "Catalog":
    from srifty.catalog import Catalog

    if kind == "default":
        return Catalog.default()
    return Catalog.from_emulated_spec(kind)

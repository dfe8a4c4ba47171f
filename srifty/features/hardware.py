"""The hardware of an instance type as the simulator sees it: GPU figures and links (catalog
figures, priors where the catalog states none), and the speed ratio that carries compute across
devices."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from srifty.simulate import Link

if TYPE_CHECKING:  # pragma: no cover
    from srifty.catalog import Catalog

# Priors used only where the catalog states no figure (documented in docs/latency-model.md).
PCIE_GBYTES_PER_S = {"gen3": 15.75, "gen4": 31.5, "gen5": 63.0}  # x16, one direction (PCI-SIG line rates)
DEFAULT_INTRA_GBYTES_PER_S = 10.0
EMULATED_INTRA_GBYTES_PER_S = 2.0  # workers sharing an emulated host talk over loopback sockets
INTRA_LATENCY_US = 10.0
INTER_LATENCY_US = 30.0
# how a note on a figure of the intra-node link starts (LinkScale.apply drops it where the figure is fitted)
INTRA_BANDWIDTH_NOTE = "intra-node bandwidth"
EFA_MIN_GBPS = 100  # EFA-capable types at >= 100 Gbps are taken to run NCCL over EFA (aws-ofi-nccl)
HALF_PRECISIONS = frozenset({"fp16", "float16", "bf16", "bfloat16", "amp"})
# a job whose profile does not say what share of its FLOPs are convolutions: halfway, in log, between
# the spec speeds and measured factors of a network without convolutions and of a convolutional one
UNKNOWN_CONV_SHARE = 0.5
# the weight of FLOPS against memory bandwidth in the spec speed FLOPS^w x bandwidth^(1-w) of a
# convolutional network (one without convolutions takes 1/2; a share s between, in proportion): the
# best of 0, 0.1, ..., 0.5 on Lambda's single-GPU transfers by the spec ratio alone (tests/test_gpuspeed.py)
CONV_FLOPS_WEIGHT = 0.2


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
    # False where no source states the intra-node link (neither its rate nor its PCIe generation):
    # ``intra`` is then DEFAULT_INTRA_GBYTES_PER_S, and a step that depends on it says so
    # (FeatureBuilder.estimate)
    intra_stated: bool = True
    inter_kind: str = "tcp"  # "efa" or "tcp" (ENA); emulated hosts: "tbf"
    # measured factors on the spec speed, per FLOPS figure ("fp16", "tf32", "fp32"): srifty.gpuspeed
    speed_factors: tuple[tuple[str, float], ...] = ()
    # the further factor per FLOPS figure for convolutions, applied as conv_factor ** (conv FLOP share)
    conv_speed_factors: tuple[tuple[str, float], ...] = ()
    gpu_name: str = ""
    gpu_memory_gib: float | None = None  # each GPU's memory (the catalog's); None: no GPU, or not stated

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

    def speed_factor(self, precision: str | None, conv_share: float | None = None) -> float | None:
        """The measured factor on this GPU's spec speed for work in ``precision`` (srifty.gpuspeed)
        by a job whose forward FLOPs are a share ``conv_share`` convolutions (None: not known,
        :data:`UNKNOWN_CONV_SHARE`); None where none was fitted."""
        kind = self.flops_kind(precision)
        factor = dict(self.speed_factors).get(kind)
        if factor is None:
            return None
        return factor * dict(self.conv_speed_factors).get(kind, 1.0) ** conv_share_or_unknown(conv_share)

    def speed_for(self, precision: str | None, conv_share: float | None = None) -> float | None:
        """Relative speed for work in ``precision`` by the spec sheet: FLOPS^w × memory bandwidth^(1−w),
        the FLOPS being the tensor-core figure the precision runs on (FP16/BF16/AMP, TF32) where
        the GPU has it, w ½ for a network without convolutions and :data:`CONV_FLOPS_WEIGHT` for a
        convolutional one (a share ``conv_share`` of its FLOPs in convolutions, None: not known).
        :func:`transfer_speeds` adds the measured factors."""
        flops = self.peak_tflops(precision)
        if flops and self.mem_gbytes_per_s:
            s = conv_share_or_unknown(conv_share)
            w = CONV_FLOPS_WEIGHT * s + 0.5 * (1.0 - s)
            return flops ** w * self.mem_gbytes_per_s ** (1.0 - w)
        if flops:
            return flops
        # a CPU host's cores; a GPU whose spec sheet srifty lacks has no speed to carry compute by
        # (its host's vCPUs say nothing of it)
        return None if self.gpu_name else self.cpu_share


def conv_share_or_unknown(conv_share: float | None) -> float:
    """A job's share of FLOPs in convolutions, clipped to [0, 1]; :data:`UNKNOWN_CONV_SHARE` if not known."""
    return UNKNOWN_CONV_SHARE if conv_share is None else min(max(conv_share, 0.0), 1.0)


def both_measured(a: Hardware, b: Hardware, precision: str | None) -> bool:
    """Whether both GPUs have a measured speed factor for ``precision``'s FLOPS figure, so that a
    transfer between them takes the factors (:func:`transfer_speeds`)."""
    return a.speed_factor(precision) is not None and b.speed_factor(precision) is not None


def transfer_speeds(a: Hardware, b: Hardware, precision: str | None,
                    conv_share: float | None = None) -> tuple[float | None, float | None]:
    """The speeds that transfer compute from ``a`` to ``b``: the spec speeds, times the measured
    factors (for a job whose forward FLOPs are a share ``conv_share`` convolutions, None if not
    known) when *both* GPUs have one for the precision's FLOPS figure. A factor says how a GPU
    runs against its spec relative to the other measured GPUs; held against a GPU without one it
    did worse than the spec ratio alone (per-GPU factors, leaving one chip out of Lambda's tables:
    28.5% against 26.8%, docs/latency-model.md)."""
    sa, sb = a.speed_for(precision, conv_share), b.speed_for(precision, conv_share)
    if not both_measured(a, b, precision) or sa is None or sb is None:
        return sa, sb
    return sa * a.speed_factor(precision, conv_share), sb * b.speed_factor(precision, conv_share)


def _intra_bandwidth(name: str, link_text: str, stated: float | None) -> tuple[float, str | None, bool]:
    """GB/s of ``name``'s intra-node link, the note that says where it comes from (None where the
    catalog states it), and whether a source states it (its rate or its PCIe generation; the note
    of one that does not is FeatureBuilder.estimate's, where it moves the step)."""
    if stated:
        return float(stated), None, True
    m = re.search(r"pcie\s*gen\s*(\d)", link_text or "", re.I)
    if m and f"gen{m.group(1)}" in PCIE_GBYTES_PER_S:
        return (PCIE_GBYTES_PER_S[f"gen{m.group(1)}"],
                f"{name}: {INTRA_BANDWIDTH_NOTE} from the PCIe Gen{m.group(1)} x16 line rate", True)
    return DEFAULT_INTRA_GBYTES_PER_S, None, False


@lru_cache(maxsize=1)
def median_gbytes_per_tflop() -> float:
    """Median memory GB/s per FP32 TFLOPS over the shipped GPU specs that state both. A GPU
    whose spec lacks its bandwidth (T4g, Radeon Pro V520) would otherwise be compared by FLOPS
    alone against others' √(FLOPS × GB/s): a 6x error between a T4 and a T4g."""
    import csv

    path = Path(__file__).resolve().parent.parent / "data" / "gpu_specs.csv"
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
    intra_bw, note, intra_stated = _intra_bandwidth(it.name, it.intra_node_link, it.intra_node_bandwidth_gbytes_per_s)
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
                    conv_speed_factors=tuple((c.flops, c.conv_factor) for c in catalog.speed_corrections
                                             if c.gpu_name == it.gpu_name) if spec else (),
                    intra_kind="nvlink" if re.match(r"\s*(nvlink|nvswitch)", it.intra_node_link or "", re.I) else "pcie",
                    intra_stated=intra_stated,
                    inter_kind="efa" if it.efa_interfaces and (gbps or 0) >= EFA_MIN_GBPS else "tcp",
                    gpu_name=it.gpu_name or "", gpu_memory_gib=it.gpu_memory_gib if it.gpu_count else None)

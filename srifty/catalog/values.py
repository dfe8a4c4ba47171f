"""The catalog's value types: how an instance is bought, its spot interruption buckets, and the
frozen records (GPU spec, regional prices, instance type, emulated host shape, speed factor) that
queries on the catalog frame return.

They hold no I/O and import nothing heavy, so every other catalog module, and the layers above,
can use them freely.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from srifty.errors import SriftyError


# AWS prices a month as 730 hours (365 × 24 / 12).
HOURS_PER_MONTH = 730.0

# GPU / accelerator names as srifty shows them (SkyPilot's spelling). Keys are lower case
# as Karpenter and the EC2 API write them.
GPU_DISPLAY_NAME = {
    "k80": "K80", "m60": "M60", "t4": "T4", "t4g": "T4g", "v100": "V100", "a10g": "A10G",
    "a100": "A100", "h100": "H100", "h200": "H200", "b200": "B200", "b300": "B300",
    "l4": "L4", "l40s": "L40S", "radeon-pro-v520": "Radeon Pro V520", "radeon pro v520": "Radeon Pro V520",
    "trainium": "Trainium", "trainium2": "Trainium2",
}
# SkyPilot names memory variants separately; Karpenter and the EC2 API do not.
GPU_MEMORY_VARIANT = {("V100", 32.0): "V100-32GB", ("A100", 80.0): "A100-80GB"}


def normalise_gpu_name(raw: str, memory_gib: float | None = None) -> str:
    """'v100' + 32 GiB -> 'V100-32GB'; 'Radeon Pro V520' -> 'Radeon Pro V520'; unknown -> as given."""
    name = GPU_DISPLAY_NAME.get(raw.strip().lower(), raw.strip())
    if memory_gib is not None:
        name = GPU_MEMORY_VARIANT.get((name, round(float(memory_gib))), name)
    return name


class Market(str, Enum):
    """How an instance is bought."""

    ON_DEMAND = "on-demand"
    SPOT = "spot"


class SpotStatistic(str, Enum):
    """Which spot price of a region's zones to use."""

    MIN = "min"
    MEDIAN = "median"


class InterruptionBucket(Enum):
    """AWS Spot Instance Advisor's "frequency of interruption" buckets (share of spot
    instances interrupted over the last month).

    ``rate_per_hour`` is the constant hazard that interrupts the bucket's midpoint share of
    instances within a 730-hour month: ``-ln(1 - p_mid) / 730``. The open-ended ``>20%``
    bucket is given the midpoint 25% (as if it were 20-30%, the same width as the others);
    that is a convention, not an AWS figure.
    """

    UNDER_5 = ("<5%", 0.00, 0.05)
    FROM_5_TO_10 = ("5-10%", 0.05, 0.10)
    FROM_10_TO_15 = ("10-15%", 0.10, 0.15)
    FROM_15_TO_20 = ("15-20%", 0.15, 0.20)
    OVER_20 = (">20%", 0.20, 0.30)

    def __init__(self, label: str, monthly_low: float, monthly_high: float) -> None:
        self.label = label
        self.monthly_low = monthly_low
        self.monthly_high = monthly_high

    @property
    def monthly_midpoint(self) -> float:
        return (self.monthly_low + self.monthly_high) / 2

    @property
    def rate_per_hour(self) -> float:
        return monthly_share_to_hourly_rate(self.monthly_midpoint)

    @classmethod
    def from_label(cls, label: str) -> "InterruptionBucket":
        for bucket in cls:
            if bucket.label == label.strip():
                return bucket
        raise SriftyError(
            f"{label!r} is not a Spot Advisor interruption bucket.",
            f"Use one of: {', '.join(b.label for b in cls)}.",
        )


def monthly_share_to_hourly_rate(share: float, hours_per_month: float = HOURS_PER_MONTH) -> float:
    """The constant hourly hazard under which ``share`` of instances are interrupted in a month."""
    if not 0 <= share < 1:
        raise SriftyError(f"An interruption share must be in [0, 1), got {share}.")
    return -math.log1p(-share) / hours_per_month


@dataclass(frozen=True)
class GpuSpec:
    """Figures for one GPU (or accelerator) model as AWS exposes it, with their sources."""

    gpu_name: str
    spec_name: str
    fp32_tflops: float | None
    tf32_tflops_dense: float | None
    fp16_bf16_tensor_tflops_dense: float | None
    memory_gib: float | None
    memory_bandwidth_gbytes_per_s: float | None
    sm_count: int | None
    source: str
    notes: str


@dataclass(frozen=True)
class RegionPrice:
    """Prices of one instance type in one region. ``None`` where no source gives a figure."""

    region: str
    ondemand_usd_per_hour: float | None
    ondemand_source: str
    spot_min_usd_per_hour: float | None
    spot_median_usd_per_hour: float | None
    spot_zones: int
    interruption_bucket: str
    interruption_per_hour: float | None
    spot_savings_pct: int | None


@dataclass(frozen=True)
class EmulatedHost:
    """How an emulated host type is shaped (see configs/emulated.yaml)."""

    cpu_share: float
    workers: int
    bandwidth_mbit: float
    latency_ms: float


@dataclass(frozen=True)
class InstanceType:
    """One instance type: its spec and its prices in every region the catalog knows."""

    name: str
    family: str
    arch: str
    gpu_name: str
    gpu_count: int
    gpu_memory_gib: float | None
    accelerator_name: str
    accelerator_count: int
    vcpus: float
    memory_gib: float | None
    network_gbps: float | None  # baseline (sustained) figure; None where only "up to" is known
    network_up_to_gbps: float | None  # AWS's "up to N Gigabit" burst figure, where it says so
    efa_interfaces: int
    intra_node_link: str
    intra_node_bandwidth_gbytes_per_s: float | None
    prices: tuple[RegionPrice, ...] = ()
    emulation: EmulatedHost | None = None

    @property
    def workers_per_node(self) -> int:
        """GPUs (or accelerators, or emulated workers) per node: the data-parallel width of a node."""
        if self.emulation is not None:
            return self.emulation.workers
        return self.gpu_count or self.accelerator_count or 1

    @property
    def regions(self) -> list[str]:
        return [p.region for p in self.prices if p.region]

    def price_in(self, region: str) -> RegionPrice | None:
        return next((p for p in self.prices if p.region == region), None)

    def hourly_price(self, region: str, market: Market = Market.ON_DEMAND,
                     statistic: SpotStatistic = SpotStatistic.MIN) -> float | None:
        p = self.price_in(region)
        if p is None:
            return None
        if market is Market.ON_DEMAND:
            return p.ondemand_usd_per_hour
        return p.spot_min_usd_per_hour if statistic is SpotStatistic.MIN else p.spot_median_usd_per_hour

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class CatalogSource:
    """Where a catalog's rows came from, and what a reader should be told about it."""

    kind: str  # "snapshot", "refreshed", "file" or "emulated"
    path: str
    fetched_at: str | None = None
    age_days: int | None = None
    warnings: list[str] = field(default_factory=list)


# Measured factors on the spec speed ratio of GPUs, fitted by srifty.gpuspeed (`make gpu-speed`) and
# read and written with the rest of the shipped data (files.read_corrections, files.write_corrections).
@dataclass(frozen=True)
class SpeedCorrection:
    """The factor on one GPU's spec speed for work on one of its FLOPS figures: ``factor`` ×
    ``conv_factor`` ** s for a job whose forward FLOPs are a share s convolutions."""

    gpu_name: str
    flops: str  # "fp16", "tf32" or "fp32": the figure Hardware.flops_kind picks for the precision
    factor: float
    rates: int  # measured rates of this GPU and figure that informed it
    networks: int  # distinct networks among them
    conv_factor: float = 1.0  # how much further convolutional networks depart from the spec

"""The instance catalog: EC2 instance specs, on-demand and spot prices, interruption rates.

Three sources, one shape:

* the **snapshot** shipped in ``srifty/data/`` (built by ``scripts/build_catalog.py`` from
  public data; see ``srifty/data/PROVENANCE.md``);
* a **refreshed** catalog that ``refresh_catalog`` fetches from the AWS APIs into the user
  cache (``~/.cache/srifty/ec2_catalog.csv`` or ``$SRIFTY_CATALOG_DIR``), preferred when
  present;
* an **emulated** catalog read from a YAML file (``Catalog.from_emulated_spec``) so that the
  same pipeline runs on the emulated cluster.

Queries follow SkyPilot's ``sky/catalog/common.py``: the catalog is a DataFrame read
lazily, and pure ``*_impl(df, ...)`` functions return plain Python values. pandas and
boto3 are imported inside functions only, so importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import difflib
import fnmatch
import hashlib
import json
import math
import os
import re
import statistics
import tempfile
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from srifty.errors import SriftyError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

DATA_DIR = Path(__file__).resolve().parent / "data"
SNAPSHOT_CSV = "ec2_catalog.csv"
SNAPSHOT_META = "snapshot.json"
INTERRUPTION_CSV = "ec2_spot_interruption.csv"
GPU_SPECS_CSV = "gpu_specs.csv"
CACHE_META = "ec2_catalog.meta.json"
DEFAULT_REGION = "us-east-1"
# The AWS Spot Instance Advisor snapshots shipped (alexei-led/spotinfo commits).
ADVISOR_COMMITS = {
    "4105b47a": "4105b47abb3be1fb33414a65173f2820025a8cfb",  # 2026, transcribed (default)
    "5bdc33ce": "5bdc33ce",  # 2025-06-28, exact; matched by prefix
}
DEFAULT_ADVISOR_COMMIT = "4105b47a"
# AWS prices a month as 730 hours (365 × 24 / 12).
HOURS_PER_MONTH = 730.0

CATALOG_COLUMNS = [
    "instance_type", "family", "arch", "gpu_name", "gpu_count", "gpu_memory_gib",
    "accelerator_name", "accelerator_count", "vcpus", "memory_gib",
    "network_gbps", "network_up_to_gbps", "efa_interfaces",
    "intra_node_link", "intra_node_bandwidth_gbytes_per_s",
    "region", "ondemand_usd_per_hour", "ondemand_source",
    "spot_min_usd_per_hour", "spot_median_usd_per_hour", "spot_zones",
    "interruption_bucket", "spot_savings_pct",
]
# Columns that only emulated catalogs fill.
EMULATION_COLUMNS = ["cpu_share", "workers", "bandwidth_mbit", "latency_ms", "interruption_per_hour_stated"]
NUMERIC_COLUMNS = [
    "gpu_count", "gpu_memory_gib", "accelerator_count", "vcpus", "memory_gib", "network_gbps",
    "network_up_to_gbps", "efa_interfaces", "intra_node_bandwidth_gbytes_per_s",
    "ondemand_usd_per_hour", "spot_min_usd_per_hour", "spot_median_usd_per_hour", "spot_zones",
    "spot_savings_pct",
]

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


# --------------------------------------------------------------------------- pure queries


def _none_if_nan(value: Any) -> Any:
    if value is None:
        return None
    try:
        if isinstance(value, float) and math.isnan(value):
            return None
    except TypeError:  # pragma: no cover
        return value
    if hasattr(value, "item"):  # numpy scalar -> Python
        value = value.item()
        if isinstance(value, float) and math.isnan(value):
            return None
    return value


def _str(value: Any) -> str:
    value = _none_if_nan(value)
    return "" if value is None else str(value)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(set(known)), n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def filter_impl(df: "pd.DataFrame", gpu: str | None = None, family: str | None = None,
                region: str | None = None, name_glob: str | None = None) -> "pd.DataFrame":
    """Rows matching every given filter (case-insensitive GPU/accelerator name and family)."""
    mask = df["instance_type"].notna()
    if gpu:
        want = gpu.strip().lower()
        mask &= (df["gpu_name"].fillna("").str.lower() == want) | (df["accelerator_name"].fillna("").str.lower() == want)
    if family:
        mask &= df["family"].fillna("").str.lower() == family.strip().lower()
    if region:
        mask &= df["region"].fillna("") == region.strip()
    if name_glob:
        mask &= df["instance_type"].map(lambda t: fnmatch.fnmatchcase(t, name_glob.strip()))
    return df[mask]


def list_instance_types_impl(df: "pd.DataFrame", gpu: str | None = None, family: str | None = None,
                             region: str | None = None, name_glob: str | None = None) -> list[str]:
    """Names of the instance types matching the filters, sorted by GPU, count and price order of name."""
    rows = filter_impl(df, gpu, family, region, name_glob)
    return sorted(set(rows["instance_type"]), key=_instance_sort_key)


def _instance_sort_key(name: str) -> tuple[str, float, str]:
    """'g5.xlarge' < 'g5.2xlarge' < 'g5.12xlarge' < 'g5.metal' (size order, not text order)."""
    family, _, size = name.partition(".")
    m = re.fullmatch(r"(\d*)xlarge", size)
    if m:
        rank = float(m.group(1) or 1)
    else:
        rank = {"nano": 0.05, "micro": 0.1, "small": 0.2, "medium": 0.3, "large": 0.5, "metal": 1e6}.get(size, 1e5)
    return family, rank, size


def _rows_of(df: "pd.DataFrame", instance_type: str) -> "pd.DataFrame":
    rows = df[df["instance_type"] == instance_type]
    if rows.empty:
        raise SriftyError(
            f"Unknown instance type {instance_type!r}.{did_you_mean(instance_type, df['instance_type'])}",
            "To see what the catalog has: srifty catalog list (filters: --gpu, --family, --instance-types 'g5.*').",
        )
    return rows


def _row_in_region(df: "pd.DataFrame", instance_type: str, region: str) -> "pd.Series | None":
    rows = _rows_of(df, instance_type)
    rows = rows[rows["region"] == region]
    return None if rows.empty else rows.iloc[0]


def get_ondemand_price_impl(df: "pd.DataFrame", instance_type: str, region: str) -> float | None:
    """On-demand $/h in ``region``; None where the catalog has no price (unknown type -> SriftyError)."""
    row = _row_in_region(df, instance_type, region)
    return None if row is None else _none_if_nan(row["ondemand_usd_per_hour"])


def get_spot_price_impl(df: "pd.DataFrame", instance_type: str, region: str,
                        statistic: SpotStatistic | str = SpotStatistic.MIN) -> float | None:
    """Spot $/h in ``region``: the min or median over the region's zones with a price."""
    row = _row_in_region(df, instance_type, region)
    if row is None:
        return None
    column = "spot_min_usd_per_hour" if SpotStatistic(statistic) is SpotStatistic.MIN else "spot_median_usd_per_hour"
    return _none_if_nan(row[column])


def get_interruption_rate_impl(df: "pd.DataFrame", instance_type: str, region: str) -> float | None:
    """Expected spot interruptions per hour in ``region`` (see InterruptionBucket); None where unknown."""
    row = _row_in_region(df, instance_type, region)
    return None if row is None else _none_if_nan(row["interruption_per_hour"])


def get_gpu_spec_impl(specs: "pd.DataFrame", gpu_name: str) -> GpuSpec | None:
    """The spec row for a GPU/accelerator name as srifty writes it (e.g. 'A100-80GB'); None if none."""
    rows = specs[specs["gpu_name"].fillna("").str.lower() == gpu_name.strip().lower()]
    if rows.empty:
        return None
    r = rows.iloc[0]
    sm = _none_if_nan(r["sm_count"])
    return GpuSpec(
        gpu_name=str(r["gpu_name"]), spec_name=str(r["spec_name"]),
        fp32_tflops=_none_if_nan(r["fp32_tflops"]), tf32_tflops_dense=_none_if_nan(r["tf32_tflops_dense"]),
        fp16_bf16_tensor_tflops_dense=_none_if_nan(r["fp16_bf16_tensor_tflops_dense"]),
        memory_gib=_none_if_nan(r["memory_gib"]),
        memory_bandwidth_gbytes_per_s=_none_if_nan(r["memory_bandwidth_gbytes_per_s"]),
        sm_count=None if sm is None else int(sm), source=_str(r["source"]), notes=_str(r["notes"]),
    )


def instance_type_from_rows_impl(rows: "pd.DataFrame") -> InstanceType:
    """Build the InstanceType of one type from its catalog rows (one per region)."""
    first = rows.iloc[0]

    def f(col: str) -> Any:
        return _none_if_nan(first[col]) if col in rows.columns else None

    prices = []
    for _, r in rows.sort_values("region").iterrows():
        if not _str(r["region"]):
            continue
        bucket = _str(r.get("interruption_bucket"))
        zones = _none_if_nan(r.get("spot_zones"))
        savings = _none_if_nan(r.get("spot_savings_pct"))
        prices.append(RegionPrice(
            region=_str(r["region"]),
            ondemand_usd_per_hour=_none_if_nan(r["ondemand_usd_per_hour"]),
            ondemand_source=_str(r["ondemand_source"]),
            spot_min_usd_per_hour=_none_if_nan(r["spot_min_usd_per_hour"]),
            spot_median_usd_per_hour=_none_if_nan(r["spot_median_usd_per_hour"]),
            spot_zones=int(zones or 0),
            interruption_bucket=bucket,
            interruption_per_hour=_none_if_nan(r.get("interruption_per_hour")),
            spot_savings_pct=None if savings is None else int(savings),
        ))
    emulation = None
    if f("cpu_share") is not None:
        emulation = EmulatedHost(cpu_share=float(f("cpu_share")), workers=int(f("workers")),
                                 bandwidth_mbit=float(f("bandwidth_mbit")), latency_ms=float(f("latency_ms") or 0))
    return InstanceType(
        name=str(first["instance_type"]), family=_str(first["family"]), arch=_str(first["arch"]),
        gpu_name=_str(first["gpu_name"]), gpu_count=int(f("gpu_count") or 0), gpu_memory_gib=f("gpu_memory_gib"),
        accelerator_name=_str(first["accelerator_name"]), accelerator_count=int(f("accelerator_count") or 0),
        vcpus=float(f("vcpus") or 0), memory_gib=f("memory_gib"), network_gbps=f("network_gbps"),
        network_up_to_gbps=f("network_up_to_gbps"), efa_interfaces=int(f("efa_interfaces") or 0),
        intra_node_link=_str(first["intra_node_link"]),
        intra_node_bandwidth_gbytes_per_s=f("intra_node_bandwidth_gbytes_per_s"),
        prices=tuple(prices), emulation=emulation,
    )


# --------------------------------------------------------------------------- loading


def cache_dir() -> Path:
    """Where ``srifty catalog refresh`` writes: $SRIFTY_CATALOG_DIR or ~/.cache/srifty."""
    env = os.environ.get("SRIFTY_CATALOG_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "srifty"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def resolve_advisor_commit(commit: str | None) -> str:
    key = (commit or DEFAULT_ADVISOR_COMMIT).strip()
    for short, full in ADVISOR_COMMITS.items():
        if key and (full.startswith(key) or short.startswith(key)):
            return short
    raise SriftyError(
        f"No Spot Advisor snapshot {commit!r} is shipped.",
        f"Use one of: {', '.join(ADVISOR_COMMITS)} (default {DEFAULT_ADVISOR_COMMIT}).",
    )


def _read_catalog_csv(path: Path) -> "pd.DataFrame":
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype={"region": str, "instance_type": str, "interruption_bucket": str},
                         keep_default_na=False, na_values=[""])
    except (OSError, ValueError) as exc:
        raise SriftyError(f"Could not read the catalog file {path}: {exc}.",
                          "Point --catalog (or SRIFTY_CATALOG) at a CSV written by srifty, or an emulated YAML.") from None
    missing = [c for c in CATALOG_COLUMNS if c not in df.columns]
    if missing:
        raise SriftyError(
            f"{path} is not a srifty catalog: it lacks the columns {', '.join(missing)}.",
            "Rebuild it with `srifty catalog refresh` or scripts/build_catalog.py, or fix the header.",
        )
    for col in ("gpu_name", "accelerator_name", "family", "arch", "intra_node_link", "ondemand_source",
                "interruption_bucket", "region"):
        df[col] = df[col].fillna("").astype(str)
    for col in NUMERIC_COLUMNS:
        df[col] = pd.to_numeric(df[col], errors="coerce")
    return df


def _add_interruption_rates(df: "pd.DataFrame") -> "pd.DataFrame":
    rates = {b.label: b.rate_per_hour for b in InterruptionBucket}
    unknown = sorted(set(df["interruption_bucket"]) - set(rates) - {""})
    if unknown:
        raise SriftyError(f"The catalog has unknown interruption buckets {unknown}.",
                          f"Buckets are: {', '.join(rates)}; fix the file or rebuild it.")
    df = df.copy()
    mapped = df["interruption_bucket"].map(rates)
    if "interruption_per_hour_stated" in df.columns:
        mapped = df["interruption_per_hour_stated"].where(df["interruption_per_hour_stated"].notna(), mapped)
    df["interruption_per_hour"] = mapped.astype(float)
    return df


def _apply_advisor_snapshot(df: "pd.DataFrame", commit: str) -> "pd.DataFrame":
    """Replace the interruption columns by another shipped Spot Advisor snapshot."""
    import pandas as pd

    adv = pd.read_csv(DATA_DIR / INTERRUPTION_CSV, dtype=str, keep_default_na=False)
    adv = adv[adv["commit"].str.startswith(commit)][["instance_type", "region", "interruption_bucket", "spot_savings_pct"]]
    out = df.drop(columns=["interruption_bucket", "spot_savings_pct"]).merge(adv, on=["instance_type", "region"], how="left")
    out["interruption_bucket"] = out["interruption_bucket"].fillna("")
    out["spot_savings_pct"] = pd.to_numeric(out["spot_savings_pct"], errors="coerce")
    return out


def snapshot_meta() -> dict[str, Any]:
    return json.loads((DATA_DIR / SNAPSHOT_META).read_text())


def snapshot_age_days(today: dt.date | None = None) -> int:
    as_of = dt.date.fromisoformat(snapshot_meta()["prices_as_of"])
    return ((today or dt.date.today()) - as_of).days


def read_cache_meta(directory: Path) -> dict[str, Any] | None:
    path = directory / CACHE_META
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class Catalog:
    """Instance types and prices, read lazily from a catalog CSV (or an emulated YAML).

    ``Catalog.default()`` picks, in order: $SRIFTY_CATALOG, the refreshed cache file, the
    shipped snapshot (with a warning saying how old it is).
    """

    def __init__(self, path: Path | str, source: CatalogSource | None = None,
                 advisor_commit: str | None = None, default_region: str = DEFAULT_REGION) -> None:
        self.path = Path(path)
        self.source = source or CatalogSource(kind="file", path=str(path))
        self.advisor_commit = resolve_advisor_commit(advisor_commit)
        self.default_region = default_region
        self._df: "pd.DataFrame | None" = None
        self._frame_factory: Callable[[], "pd.DataFrame"] | None = None

    # -- constructors
    @classmethod
    def snapshot(cls, advisor_commit: str | None = None) -> "Catalog":
        """The snapshot shipped with srifty, with a warning saying how old its prices are."""
        meta = snapshot_meta()
        age = snapshot_age_days()
        warning = (f"Using the EC2 catalog snapshot shipped with srifty: its prices are as of {meta['prices_as_of']} "
                   f"({age} days old). Run `srifty catalog refresh` to fetch current ones from AWS.")
        src = CatalogSource(kind="snapshot", path=str(DATA_DIR / SNAPSHOT_CSV), fetched_at=meta["prices_as_of"],
                            age_days=age, warnings=[warning])
        return cls(DATA_DIR / SNAPSHOT_CSV, src, advisor_commit)

    @classmethod
    def default(cls, path: str | Path | None = None, advisor_commit: str | None = None) -> "Catalog":
        """The catalog a command should use: ``path`` / $SRIFTY_CATALOG, then the refreshed cache, then the snapshot."""
        explicit = path or os.environ.get("SRIFTY_CATALOG")
        if explicit:
            p = Path(explicit).expanduser()
            if not p.exists():
                raise SriftyError(f"The catalog file {p} does not exist.",
                                  "Give --catalog (or SRIFTY_CATALOG) an existing CSV or emulated YAML, or unset it.")
            if p.suffix.lower() in (".yaml", ".yml"):
                return cls.from_emulated_spec(p)
            return cls(p, CatalogSource(kind="file", path=str(p)), advisor_commit)
        cached = cache_dir() / SNAPSHOT_CSV
        if cached.exists():
            meta = read_cache_meta(cache_dir()) or {}
            src = CatalogSource(kind="refreshed", path=str(cached), fetched_at=meta.get("fetched_at"))
            if meta.get("sha256") and meta["sha256"] != file_sha256(cached):
                src.warnings.append(f"{cached} was edited after `srifty catalog refresh` wrote it; using it as it is.")
            if meta.get("fetched_at"):
                fetched = dt.datetime.fromisoformat(meta["fetched_at"])
                src.age_days = (dt.datetime.now(dt.timezone.utc) - fetched).days
            return cls(cached, src, advisor_commit)
        return cls.snapshot(advisor_commit)

    @classmethod
    def from_emulated_spec(cls, path: str | Path) -> "Catalog":
        """An emulated catalog from a YAML file (schema 1, see docs/catalog.md)."""
        spec = load_emulated_spec(Path(path))
        frame = emulated_frame(spec)
        cat = cls(Path(path), CatalogSource(kind="emulated", path=str(path)), default_region=spec["region"])
        cat._frame_factory = lambda: frame
        return cat

    # -- data
    @property
    def df(self) -> "pd.DataFrame":
        if self._df is None:
            if self._frame_factory is not None:
                df = self._frame_factory()
            else:
                df = _read_catalog_csv(self.path)
                if self.advisor_commit != DEFAULT_ADVISOR_COMMIT:
                    df = _apply_advisor_snapshot(df, self.advisor_commit)
            self._df = _add_interruption_rates(df)
        return self._df

    @property
    def gpu_specs(self) -> "pd.DataFrame":
        import pandas as pd

        if not hasattr(self, "_specs"):
            self._specs = pd.read_csv(DATA_DIR / GPU_SPECS_CSV, keep_default_na=False, na_values=[""])
        return self._specs

    @property
    def warnings(self) -> list[str]:
        return list(self.source.warnings)

    # -- queries
    def names(self, gpu: str | None = None, family: str | None = None, region: str | None = None,
              name_glob: str | None = None) -> list[str]:
        return list_instance_types_impl(self.df, gpu, family, region, name_glob)

    def list(self, gpu: str | None = None, family: str | None = None, region: str | None = None,
             name_glob: str | None = None) -> list[InstanceType]:
        """Instance types matching every filter (GPU name, family, region offered, glob on the name)."""
        names = self.names(gpu, family, region, name_glob)
        if not names:
            self._explain_empty(gpu, family, region)
        return [self.get(n) for n in names]

    def get(self, name: str) -> InstanceType:
        """One instance type with its prices in every region (unknown -> SriftyError with 'Did you mean')."""
        return instance_type_from_rows_impl(_rows_of(self.df, name.strip()))

    def ondemand_price(self, name: str, region: str | None = None) -> float | None:
        return get_ondemand_price_impl(self.df, name, region or self.default_region)

    def spot_price(self, name: str, region: str | None = None,
                   statistic: SpotStatistic | str = SpotStatistic.MIN) -> float | None:
        return get_spot_price_impl(self.df, name, region or self.default_region, statistic)

    def price(self, name: str, market: Market, region: str | None = None,
              statistic: SpotStatistic | str = SpotStatistic.MIN) -> float | None:
        if Market(market) is Market.ON_DEMAND:
            return self.ondemand_price(name, region)
        return self.spot_price(name, region, statistic)

    def interruption_rate(self, name: str, region: str | None = None) -> float | None:
        return get_interruption_rate_impl(self.df, name, region or self.default_region)

    def gpu_spec(self, gpu_name: str) -> GpuSpec | None:
        return get_gpu_spec_impl(self.gpu_specs, gpu_name)

    def regions(self) -> list[str]:
        return sorted(r for r in set(self.df["region"]) if r)

    def _explain_empty(self, gpu: str | None, family: str | None, region: str | None) -> None:
        df = self.df
        if gpu and filter_impl(df, gpu=gpu).empty:
            known = [*df["gpu_name"], *df["accelerator_name"]]
            raise SriftyError(f"No instance type in the catalog has the GPU {gpu!r}.{did_you_mean(gpu, [k for k in known if k])}",
                              "Hint: srifty catalog list shows every GPU.")
        if family and filter_impl(df, family=family).empty:
            raise SriftyError(f"No instance family {family!r} in the catalog.{did_you_mean(family, df['family'])}",
                              "Hint: srifty catalog list shows every family.")
        if region and filter_impl(df, region=region).empty:
            raise SriftyError(f"The catalog has no prices in region {region!r}.{did_you_mean(region, self.regions())}",
                              f"Known regions: {', '.join(self.regions())}.")


# --------------------------------------------------------------------------- emulated catalogs

_EMULATED_REQUIRED = {"cpu_share", "workers", "bandwidth_mbit", "price_per_hour"}
_EMULATED_OPTIONAL = {"latency_ms", "spot_price_per_hour", "interruption_per_hour", "family"}


def load_emulated_spec(path: Path) -> dict[str, Any]:
    """Read and check an emulated catalog YAML (``yaml.safe_load`` only)."""
    import yaml

    fix = f"Fix {path} (format: docs/catalog.md, 'Emulated catalogs')."
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise SriftyError(f"Could not read the emulated catalog {path}: {exc.strerror}.", "Check the path.") from None
    except yaml.YAMLError as exc:
        raise SriftyError(f"{path} is not valid YAML: {exc}.", fix) from None
    if not isinstance(doc, dict) or doc.get("schema") != 1:
        raise SriftyError(f"{path} is not an emulated catalog of schema 1 (it needs a top-level 'schema: 1').", fix)
    types = doc.get("instance_types")
    if not isinstance(types, dict) or not types:
        raise SriftyError(f"{path} has no 'instance_types' mapping.", fix)
    region = str(doc.get("region") or "local")
    checked: dict[str, dict[str, Any]] = {}
    for name, entry in types.items():
        if not isinstance(entry, dict):
            raise SriftyError(f"Instance type {name!r} in {path} must be a mapping of fields.", fix)
        missing = sorted(_EMULATED_REQUIRED - set(entry))
        unknown = sorted(set(entry) - _EMULATED_REQUIRED - _EMULATED_OPTIONAL)
        if missing:
            raise SriftyError(f"Instance type {name!r} in {path} lacks {', '.join(missing)}.", fix)
        if unknown:
            raise SriftyError(
                f"Instance type {name!r} in {path} has unknown fields {', '.join(unknown)}."
                f"{did_you_mean(unknown[0], _EMULATED_REQUIRED | _EMULATED_OPTIONAL)}", fix)
        values: dict[str, Any] = {"family": str(entry.get("family") or str(name).split(".")[0])}
        for key in sorted((_EMULATED_REQUIRED | _EMULATED_OPTIONAL) - {"family"}):
            if key not in entry or entry[key] is None:
                continue
            v = entry[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise SriftyError(f"{name}.{key} in {path} must be a non-negative number, got {v!r}.", fix)
            values[key] = v
        if values["cpu_share"] <= 0 or values["bandwidth_mbit"] <= 0:
            raise SriftyError(f"{name} in {path}: cpu_share and bandwidth_mbit must be above 0.", fix)
        if int(values["workers"]) != values["workers"] or values["workers"] < 1:
            raise SriftyError(f"{name}.workers in {path} must be a whole number of at least 1.", fix)
        checked[str(name)] = values
    return {"name": str(doc.get("name") or path.stem), "region": region, "instance_types": checked}


def emulated_frame(spec: dict[str, Any]) -> "pd.DataFrame":
    """Catalog rows (same columns as EC2) for the host types of an emulated spec."""
    import pandas as pd

    rows = []
    for name, v in spec["instance_types"].items():
        rows.append({
            "instance_type": name, "family": v["family"], "arch": "", "gpu_name": "", "gpu_count": 0,
            "gpu_memory_gib": None, "accelerator_name": "", "accelerator_count": 0,
            "vcpus": float(v["cpu_share"]), "memory_gib": None,
            "network_gbps": float(v["bandwidth_mbit"]) / 1000.0, "network_up_to_gbps": None, "efa_interfaces": 0,
            "intra_node_link": "", "intra_node_bandwidth_gbytes_per_s": None,
            "region": spec["region"], "ondemand_usd_per_hour": float(v["price_per_hour"]),
            "ondemand_source": f"emulated:{spec['name']}",
            "spot_min_usd_per_hour": v.get("spot_price_per_hour"), "spot_median_usd_per_hour": v.get("spot_price_per_hour"),
            "spot_zones": 1 if v.get("spot_price_per_hour") is not None else 0,
            "interruption_bucket": "", "spot_savings_pct": None,
            "cpu_share": float(v["cpu_share"]), "workers": int(v["workers"]),
            "bandwidth_mbit": float(v["bandwidth_mbit"]), "latency_ms": float(v.get("latency_ms", 0)),
            "interruption_per_hour_stated": v.get("interruption_per_hour"),
        })
    df = pd.DataFrame(rows, columns=CATALOG_COLUMNS + EMULATION_COLUMNS)
    for col in NUMERIC_COLUMNS + ["interruption_per_hour_stated"]:
        df[col] = pd.to_numeric(df[col], errors="coerce")
    return df


# --------------------------------------------------------------------------- refresh from AWS


@dataclass
class RefreshResult:
    path: Path
    regions: list[str]
    instance_types: int
    rows: int
    spot_prices: int
    ondemand_from_api: int
    fetched_at: str
    warnings: list[str]


def parse_network_performance(text: str) -> tuple[float | None, bool]:
    """'Up to 25 Gigabit' -> (25.0, True); '100 Gigabit' -> (100.0, False); 'High' -> (None, False)."""
    m = re.search(r"(up to\s+)?([\d.]+)\s*gigabit", text or "", re.IGNORECASE)
    if not m:
        return None, False
    return float(m.group(2)), bool(m.group(1))


def spec_from_api(info: dict[str, Any]) -> dict[str, Any]:
    """Catalog spec columns from one DescribeInstanceTypes entry."""
    name = info["InstanceType"]
    gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
    neuron = (info.get("NeuronInfo") or {}).get("NeuronDevices") or []
    net = info.get("NetworkInfo") or {}
    figure, up_to = parse_network_performance(net.get("NetworkPerformance", ""))
    baselines = [c.get("BaselineBandwidthInGbps") for c in net.get("NetworkCards") or [] if c.get("BaselineBandwidthInGbps")]
    baseline = float(sum(baselines)) if baselines else (None if up_to else figure)
    archs = (info.get("ProcessorInfo") or {}).get("SupportedArchitectures") or []
    row: dict[str, Any] = {
        "instance_type": name, "family": name.split(".")[0],
        "arch": {"x86_64": "amd64", "arm64": "arm64"}.get(archs[0], archs[0]) if archs else "",
        "gpu_name": "", "gpu_count": None, "gpu_memory_gib": None, "accelerator_name": "", "accelerator_count": None,
        "vcpus": (info.get("VCpuInfo") or {}).get("DefaultVCpus"),
        "memory_gib": (info.get("MemoryInfo") or {}).get("SizeInMiB", 0) / 1024 or None,
        "network_gbps": baseline, "network_up_to_gbps": figure if up_to else None,
        "efa_interfaces": (net.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0) if net.get("EfaSupported") else 0,
    }
    if gpus:
        g = gpus[0]
        mem = (g.get("MemoryInfo") or {}).get("SizeInMiB")
        row["gpu_memory_gib"] = mem / 1024 if mem else None
        row["gpu_name"] = normalise_gpu_name(g.get("Name", ""), row["gpu_memory_gib"])
        row["gpu_count"] = sum(int(x.get("Count", 0)) for x in gpus)
    elif neuron:
        row["accelerator_name"] = normalise_gpu_name(neuron[0].get("Name", ""))
        row["accelerator_count"] = sum(int(x.get("Count", 0)) for x in neuron)
    return row


def _paginate(client: Any, operation: str, key: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
    for page in client.get_paginator(operation).paginate(**kwargs):
        yield from page.get(key, [])


def _make_client(service: str, region: str) -> Any:
    import boto3

    return boto3.client(service, region_name=region)


def fetch_region(region: str, families: set[str], ec2_client: Any = None,
                 now: dt.datetime | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Specs of the offered types of ``families`` in ``region``, and their current spot price per zone.

    Uses DescribeInstanceTypeOfferings (by zone), DescribeInstanceTypes and
    DescribeSpotPriceHistory, all paginated.
    """
    client = ec2_client or _make_client("ec2", region)
    family_filter = [{"Name": "instance-type", "Values": sorted(f"{fam}.*" for fam in families)}]
    described = {t["InstanceType"]: t for t in _paginate(client, "describe_instance_types", "InstanceTypes",
                                                          Filters=family_filter)
                 if t["InstanceType"].split(".")[0] in families}
    offered: dict[str, set[str]] = {}
    candidates = sorted(described)
    for start in range(0, len(candidates), 100):
        batch = [{"Name": "instance-type", "Values": candidates[start:start + 100]}]
        for o in _paginate(client, "describe_instance_type_offerings", "InstanceTypeOfferings",
                           LocationType="availability-zone", Filters=batch):
            offered.setdefault(o["InstanceType"], set()).add(o["Location"])
    specs = [spec_from_api(described[name]) for name in sorted(offered)]
    spot: dict[tuple[str, str], dict[str, Any]] = {}
    names = sorted(offered)
    for start in range(0, len(names), 100):
        for s in _paginate(client, "describe_spot_price_history", "SpotPriceHistory",
                           InstanceTypes=names[start:start + 100], StartTime=now or dt.datetime.now(dt.timezone.utc),
                           ProductDescriptions=["Linux/UNIX", "Linux/UNIX (Amazon VPC)"]):
            key = (s["InstanceType"], s["AvailabilityZone"])
            stamp = str(s.get("Timestamp", ""))
            if key not in spot or stamp > str(spot[key].get("Timestamp", "")):
                spot[key] = s
    zone_prices = [{"instance_type": t, "region": region, "zone": z, "spot_usd_per_hour": float(s["SpotPrice"])}
                   for (t, z), s in sorted(spot.items())]
    return specs, zone_prices


PRICING_LOCATION_FILTERS = [
    ("operatingSystem", "Linux"), ("tenancy", "Shared"), ("preInstalledSw", "NA"), ("capacitystatus", "Used"),
]


def fetch_ondemand_prices(instance_types: Sequence[str], regions: Sequence[str],
                          pricing_client: Any = None) -> dict[tuple[str, str], float]:
    """On-demand Linux $/h per (type, region) from the Pricing API's GetProducts (paginated)."""
    client = pricing_client or _make_client("pricing", "us-east-1")
    out: dict[tuple[str, str], float] = {}
    for itype in instance_types:
        filters = [{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in
                   [("instanceType", itype), *PRICING_LOCATION_FILTERS]]
        for item in _paginate(client, "get_products", "PriceList", ServiceCode="AmazonEC2", Filters=filters):
            product = json.loads(item) if isinstance(item, str) else item
            attrs = product.get("product", {}).get("attributes", {})
            region = attrs.get("regionCode")
            if region not in regions:
                continue
            for term in product.get("terms", {}).get("OnDemand", {}).values():
                for dim in term.get("priceDimensions", {}).values():
                    usd = float(dim.get("pricePerUnit", {}).get("USD", "0") or 0)
                    if usd > 0:
                        out[(itype, region)] = usd
    return out


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def check_not_user_edited(directory: Path) -> None:
    """Refuse (SriftyError) when the cached catalog differs from what refresh last wrote."""
    path = directory / SNAPSHOT_CSV
    if not path.exists():
        return
    meta = read_cache_meta(directory)
    if meta is None or meta.get("sha256") != file_sha256(path):
        raise SriftyError(
            f"{path} was changed since srifty last wrote it (its content hash no longer matches "
            f"{directory / CACHE_META}), so refresh will not overwrite it.",
            "Copy it elsewhere if you want to keep your edits, then run `srifty catalog refresh --force`.",
        )


def refresh_catalog(regions: Sequence[str], *, directory: Path | None = None, force: bool = False,
                    ec2_clients: dict[str, Any] | None = None, pricing_client: Any = None,
                    now: dt.datetime | None = None) -> RefreshResult:
    """Fetch current specs and prices for ``regions`` from AWS and write the cache catalog atomically.

    Rows for other regions are kept from the catalog in use before (the earlier refresh or
    the snapshot). Specs the API does not give (intra-node GPU link) and the Spot Advisor
    interruption buckets (no API) are carried over by instance type / region. When the
    Pricing API cannot be reached, on-demand prices are kept from the previous catalog and
    the result says so in ``warnings``.
    """
    import pandas as pd

    if not regions:
        raise SriftyError("Give at least one region to refresh, e.g. --region us-east-1.")
    directory = directory or cache_dir()
    target = directory / SNAPSHOT_CSV
    now = now or dt.datetime.now(dt.timezone.utc)
    warnings: list[str] = []
    with _file_lock(directory / "ec2_catalog.lock"):
        if not force:
            check_not_user_edited(directory)
        base = _read_catalog_csv(target if target.exists() else DATA_DIR / SNAPSHOT_CSV)
        families = set(base["family"])
        carried = base.drop_duplicates("instance_type").set_index("instance_type")
        old_prices = {(r.instance_type, r.region): r for r in base.itertuples(index=False)}
        all_specs: dict[str, dict[str, Any]] = {}
        offered_rows: list[tuple[str, str]] = []
        zone_rows: list[dict[str, Any]] = []
        for region in regions:
            client = (ec2_clients or {}).get(region)
            try:
                specs, zones = fetch_region(region, families, client, now)
            except Exception as exc:  # botocore errors: credentials, endpoint, throttling
                raise SriftyError(
                    f"Could not read EC2 instance data for {region} from AWS ({type(exc).__name__}: {exc}).",
                    "Check your AWS credentials and region (aws sts get-caller-identity); the catalog was not changed.",
                ) from None
            for s in specs:
                all_specs.setdefault(s["instance_type"], s)
                offered_rows.append((s["instance_type"], region))
            zone_rows.extend(zones)
        names = sorted(all_specs)
        try:
            ondemand = fetch_ondemand_prices(names, list(regions), pricing_client)
        except Exception as exc:
            ondemand = None
            warnings.append(
                f"The AWS Pricing API could not be read ({type(exc).__name__}: {str(exc)[:160]}); on-demand prices "
                "were kept from the previous catalog (the shipped snapshot or the last refresh).")
        spot_by_key: dict[tuple[str, str], list[float]] = {}
        for z in zone_rows:
            spot_by_key.setdefault((z["instance_type"], z["region"]), []).append(z["spot_usd_per_hour"])
        new_rows = []
        from_api = 0
        for itype, region in offered_rows:
            row = dict(all_specs[itype])
            row["region"] = region
            if itype in carried.index:
                for col in ("intra_node_link", "intra_node_bandwidth_gbytes_per_s"):
                    row[col] = _none_if_nan(carried.loc[itype, col])
            old = old_prices.get((itype, region))
            price = (ondemand or {}).get((itype, region))
            if price is not None:
                row["ondemand_usd_per_hour"], row["ondemand_source"] = price, "aws-pricing-api"
                from_api += 1
            elif old is not None and not pd.isna(old.ondemand_usd_per_hour):
                row["ondemand_usd_per_hour"] = old.ondemand_usd_per_hour
                row["ondemand_source"] = f"kept:{old.ondemand_source}"
            spot = sorted(spot_by_key.get((itype, region), []))
            row["spot_min_usd_per_hour"] = spot[0] if spot else None
            row["spot_median_usd_per_hour"] = statistics.median(spot) if spot else None
            row["spot_zones"] = len(spot)
            if old is not None:
                row["interruption_bucket"] = old.interruption_bucket
                row["spot_savings_pct"] = _none_if_nan(old.spot_savings_pct)
            new_rows.append(row)
        kept = base[~base["region"].isin(list(regions))]
        fresh = pd.DataFrame(new_rows, columns=CATALOG_COLUMNS)
        out = pd.concat([kept[CATALOG_COLUMNS], fresh], ignore_index=True) if not kept.empty else fresh
        out = out.sort_values(["instance_type", "region"], kind="stable")
        text = out.to_csv(index=False, lineterminator="\n")
        _atomic_write(target, text)
        meta = {"schema": 1, "fetched_at": now.isoformat(timespec="seconds"), "regions": list(regions),
                "sha256": hashlib.sha256(text.encode()).hexdigest(), "source": "aws-api", "warnings": warnings}
        _atomic_write(directory / CACHE_META, json.dumps(meta, indent=1) + "\n")
    return RefreshResult(path=target, regions=list(regions), instance_types=len(names), rows=len(out),
                         spot_prices=len(zone_rows), ondemand_from_api=from_api,
                         fetched_at=meta["fetched_at"], warnings=warnings)

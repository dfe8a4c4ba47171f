"""Pure queries on a catalog frame, after SkyPilot's ``sky/catalog/common.py``: ``*_impl(df, ...)``
functions that filter the rows, look up prices and interruption rates, and build the value types,
returning plain Python values; plus the "Did you mean" hint and the size order of type names.

They take the DataFrame as an argument and never read files, so the Catalog class, the emulated
catalog and the refresh share them.
"""

from __future__ import annotations

import difflib
import fnmatch
import math
import re
from typing import TYPE_CHECKING, Any, Iterable

from srifty.catalog.values import EmulatedHost, GpuSpec, InstanceType, RegionPrice, SpotStatistic
from srifty.errors import SriftyError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


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
    """' Did you mean ...?' with the names of ``known`` closest to ``name``, case aside (EC2's names
    are lower case; G5.XLARGE is g5.xlarge), or '' where none is close."""
    names = {k for k in known if isinstance(k, str)}  # a column's blanks (NaN) name nothing
    by_lower = {k.lower(): k for k in sorted(names, reverse=True)}  # of two spellings, the first in order
    close = [by_lower[c] for c in difflib.get_close_matches(name.lower(), sorted(by_lower), n=3, cutoff=0.6)]
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

"""Refreshing the catalog from the AWS APIs: instance specs and spot prices per region from EC2
(DescribeInstanceTypes, DescribeInstanceTypeOfferings, DescribeSpotPriceHistory), on-demand
prices from the Pricing API, merged with what the API does not give (intra-node links, Spot
Advisor buckets) and written atomically to the user cache under a file lock.

boto3 and pandas are imported inside functions only.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from srifty.catalog.files import (CACHE_META, CATALOG_COLUMNS, DATA_DIR, SNAPSHOT_CSV, _read_catalog_csv, cache_dir,
                                  file_sha256, read_cache_meta)
from srifty.catalog.queries import _none_if_nan
from srifty.catalog.values import normalise_gpu_name
from srifty.errors import SriftyError
from srifty.outputs import atomic_write_text, exclusive_lock


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
    with exclusive_lock(directory / "ec2_catalog.lock"):
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
        atomic_write_text(target, text)
        meta = {"schema": 1, "fetched_at": now.isoformat(timespec="seconds"), "regions": list(regions),
                "sha256": hashlib.sha256(text.encode()).hexdigest(), "source": "aws-api", "warnings": warnings}
        atomic_write_text(directory / CACHE_META, json.dumps(meta, indent=1) + "\n")
    return RefreshResult(path=target, regions=list(regions), instance_types=len(names), rows=len(out),
                         spot_prices=len(zone_rows), ondemand_from_api=from_api,
                         fetched_at=meta["fetched_at"], warnings=warnings)

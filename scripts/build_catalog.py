#!/usr/bin/env python3
"""Rebuild srifty's shipped EC2 catalog snapshot (srifty/data/) from ../shared/data/catalog.

Usage (from the repository root):

    .venv/bin/python scripts/build_catalog.py [--source ../shared/data/catalog] [--out srifty/data]

Inputs (see srifty/data/PROVENANCE.md for where each came from):
  aws_gpu_instance_catalog_merged.csv      instance specs (Karpenter) + us-east-1 list price
  skypilot_v8_aws_pfamily_transcribed.csv  p-family on-demand and spot prices per zone
  skypilot_v8_aws_gfamily_transcribed.csv  g-family on-demand and spot prices per zone
  spot_interruption_advisor.csv            AWS Spot Advisor interruption buckets (two snapshots)
  ec2_gpu_interconnect.csv                 intra-node GPU link, "up to" network figures
  gpu_specs.csv                            per-GPU FLOPs, memory bandwidth, SM count

Outputs (small, normalised, one meaning per column):
  ec2_catalog.csv          one row per (instance type, region)
  ec2_spot_prices.csv      one row per (instance type, zone) as the SkyPilot catalog lists it
  ec2_spot_interruption.csv  both Spot Advisor snapshots, filter on `commit`
  ec2_gpu_interconnect.csv the interconnect table with family rows expanded per type
  gpu_specs.csv            GPU/accelerator figures with their sources
  snapshot.json            what was built from what (sha256 of each input), row counts, date

The script checks the inputs against each other (vCPUs, memory, GPU count, us-east-1
prices, spot min/median) and stops with a message on a contradiction instead of guessing.
Besides srifty's own name tables, only the standard library is used.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# One table of GPU names and one column list, shared with the library.
from srifty.catalog import CATALOG_COLUMNS, GPU_DISPLAY_NAME, GPU_MEMORY_VARIANT  # noqa: E402
DEFAULT_SOURCE = ROOT.parent / "shared" / "data" / "catalog"
DEFAULT_OUT = ROOT / "srifty" / "data"

# Default Spot Advisor snapshot (the newer one); the other stays available in the data.
DEFAULT_ADVISOR_COMMIT = "4105b47abb3be1fb33414a65173f2820025a8cfb"
# Date the prices are "as of": the Karpenter pricing file was generated on this day
# (data/README.md). The SkyPilot catalog commit's date is not recorded in the inputs.
PRICES_AS_OF = "2026-07-20"

SOURCES = {
    "merged": "aws_gpu_instance_catalog_merged.csv",
    "pfamily": "skypilot_v8_aws_pfamily_transcribed.csv",
    "gfamily": "skypilot_v8_aws_gfamily_transcribed.csv",
    "advisor": "spot_interruption_advisor.csv",
    "interconnect": "ec2_gpu_interconnect.csv",
    "gpu_specs": "gpu_specs.csv",
}

# srifty GPU name -> row of gpu_specs.csv (gpu_name column there).
SPEC_ROW = {
    "K80": "K80", "M60": "M60", "T4": "T4", "T4g": "T4g", "V100": "V100",
    "V100-32GB": "V100 (32GB, p3dn)", "A10G": "A10G", "A100": "A100 (40GB SXM4)",
    "A100-80GB": "A100 (80GB SXM4)", "H100": "H100 (SXM5 80GB)", "H200": "H200", "L4": "L4",
    "L40S": "L40S", "B200": "B200", "Radeon Pro V520": "Radeon Pro V520",
    "Trainium": "Trainium (trn1)", "Trainium2": "Trainium2",
}

class BuildError(Exception):
    pass


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def num(text: str | None) -> float | None:
    """'4.0', '4', ' 12.4930 ' -> float; '' -> None (the two SkyPilot files differ in style)."""
    if text is None or not text.strip():
        return None
    return float(text)


def integer(text: str | None) -> int | None:
    value = num(text)
    if value is None:
        return None
    if value != int(value):
        raise BuildError(f"expected a whole number, got {text!r}")
    return int(value)


def fmt(value: Any) -> str:
    """Write numbers the same way everywhere: ints plain, floats without trailing zeros."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value == int(value) and abs(value) < 1e15:
            return str(int(value))
        return repr(round(value, 6))
    return str(value)


def display_gpu_name(raw: str, memory_gib: float | None) -> str:
    name = GPU_DISPLAY_NAME.get(raw.lower())
    if name is None:
        raise BuildError(f"no display name for GPU/accelerator {raw!r}: add it to GPU_DISPLAY_NAME")
    return GPU_MEMORY_VARIANT.get((name, memory_gib), name)


def expand_type_pattern(pattern: str) -> tuple[str, list[str]]:
    """'g5.{xlarge,2xlarge}' -> ('g5', ['xlarge', '2xlarge']); 'p3.2xlarge' -> ('p3', ['2xlarge'])."""
    m = re.fullmatch(r"([\w-]+)\.\{([^}]*)\}", pattern)
    if m:
        return m.group(1), [s.strip() for s in m.group(2).split(",")]
    family, _, size = pattern.partition(".")
    return family, [size]


def per_size_values(text: str, sizes: list[str]) -> dict[str, str]:
    """'xlarge-4xlarge: up to 25; 8xlarge/16xlarge: 50' over the family's sizes -> {size: value}.

    A value without 'sizes:' applies to every size. 'a-b' is the range in the family's order.
    """
    text = text.strip()
    if not text:
        return {}
    if ":" not in text:
        return {s: text for s in sizes}
    out: dict[str, str] = {}
    for part in text.split(";"):
        keys, _, value = part.partition(":")
        for key in keys.strip().split("/"):
            key = key.strip()
            if "-" in key and key not in sizes:
                lo, hi = key.split("-")
                chosen = sizes[sizes.index(lo): sizes.index(hi) + 1]
            else:
                chosen = [key]
            for size in chosen:
                if size not in sizes:
                    raise BuildError(f"size {size!r} in {text!r} is not one of {sizes}")
                out[size] = value.strip()
    return out


def parse_network(text: str) -> tuple[float | None, float | None]:
    """'up to 25' -> (None, 25.0); '50' -> (50.0, None); '' -> (None, None)."""
    text = text.strip().lower()
    if not text:
        return None, None
    m = re.fullmatch(r"up to ([\d.]+)", text)
    if m:
        return None, float(m.group(1))
    return float(text), None


def build_interconnect(rows: list[dict[str, str]]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        family, sizes = expand_type_pattern(r["instance_type"])
        networks = per_size_values(r["network_gbps"], sizes)
        efas = per_size_values(r["efa"], sizes)
        for size in sizes:
            stated, up_to = parse_network(networks.get(size, ""))
            out.append({
                "instance_type": f"{family}.{size}",
                "gpu_count": integer(r["gpu_count"]),
                "intra_node_link": r["intra_node_link"].strip(),
                "intra_node_bandwidth_gbytes_per_s": num(r["intra_node_bandwidth_gbytes_per_s"]),
                "network_gbps_stated": stated,
                "network_up_to_gbps": up_to,
                "efa": efas.get(size, ""),
                "source_row": r["instance_type"],
                "source": r["source"],
                "notes": r["notes"],
            })
    seen: set[str] = set()
    for row in out:
        if row["instance_type"] in seen:
            raise BuildError(f"{row['instance_type']} appears twice in {SOURCES['interconnect']}")
        seen.add(row["instance_type"])
    return out


def zone_prices(rows: list[dict[str, str]], source_name: str) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        out.append({
            "instance_type": r["InstanceType"],
            "accelerator_name": r["AcceleratorName"],
            "accelerator_count": integer(r["AcceleratorCount"]),
            "vcpus": integer(r["vCPUs"]),
            "memory_gib": num(r["MemoryGiB"]),
            "gpu_memory_mib": integer(r["GpuMemoryMiBPerGpu"]),
            "ondemand_usd_per_hour": num(r["Price"]),
            "spot_usd_per_hour": num(r["SpotPrice"]),
            "region": r["Region"],
            "zone": r["AvailabilityZone"],
            "source": source_name,
        })
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        for row in rows:
            w.writerow([fmt(row.get(c)) for c in columns])
    tmp.replace(path)


def build(source: Path, out: Path) -> dict[str, Any]:
    paths = {k: source / v for k, v in SOURCES.items()}
    missing = [str(p) for p in paths.values() if not p.exists()]
    if missing:
        raise BuildError(f"missing input files: {', '.join(missing)}")
    merged = read_csv(paths["merged"])
    zones = zone_prices(read_csv(paths["pfamily"]), "skypilot-v8-pfamily") + zone_prices(
        read_csv(paths["gfamily"]), "skypilot-v8-gfamily")
    advisor = read_csv(paths["advisor"])
    interconnect = {r["instance_type"]: r for r in build_interconnect(read_csv(paths["interconnect"]))}
    spec_rows = read_csv(paths["gpu_specs"])
    spec_names = {r["gpu_name"] for r in spec_rows}
    problems: list[str] = []
    notes: list[str] = []

    specs: dict[str, dict[str, Any]] = {}
    for r in merged:
        itype = r["instance_type"]
        gpu_mem = num(r["gpu_memory_gib_per_gpu"])
        gpu_name = display_gpu_name(r["gpu_name"], gpu_mem) if r["gpu_name"] else ""
        acc_name = display_gpu_name(r["accelerator_name"], None) if r["accelerator_name"] else ""
        spec_key = SPEC_ROW.get(gpu_name or acc_name, "") if (gpu_name or acc_name) else ""
        if spec_key and spec_key not in spec_names:
            raise BuildError(f"{spec_key!r} is not a gpu_name in {SOURCES['gpu_specs']}")
        ic = interconnect.get(itype, {})
        network = num(r["network_bandwidth_gbps"])
        up_to = ic.get("network_up_to_gbps")
        stated = ic.get("network_gbps_stated")
        if stated is not None and network is not None and stated != network:
            notes.append(f"{itype}: interconnect table says {stated} Gbps, Karpenter {network} Gbps (kept Karpenter)")
        if network is None and stated is not None:
            network = stated
        if ic and ic.get("gpu_count") is not None and (integer(r["gpu_count"]) or integer(r["accelerator_count"])) != ic["gpu_count"]:
            problems.append(f"{itype}: GPU count {r['gpu_count'] or r['accelerator_count']} vs interconnect {ic['gpu_count']}")
        specs[itype] = {
            "instance_type": itype,
            "family": r["family"],
            "arch": r["arch"],
            "gpu_name": gpu_name,
            "gpu_count": integer(r["gpu_count"]),
            "gpu_memory_gib": gpu_mem,
            "accelerator_name": acc_name,
            "accelerator_count": integer(r["accelerator_count"]),
            "vcpus": integer(r["vcpus"]),
            "memory_gib": num(r["memory_gib"]),
            "network_gbps": network,
            "network_up_to_gbps": up_to,
            "efa_interfaces": integer(r["efa_interfaces"]) or 0,
            "intra_node_link": ic.get("intra_node_link", ""),
            "intra_node_bandwidth_gbytes_per_s": ic.get("intra_node_bandwidth_gbytes_per_s"),
            "karpenter_usd_us_east_1": num(r["ondemand_usd_per_hr_us_east_1"]),
            "spec_key": spec_key,
        }
    unknown_ic = sorted(set(interconnect) - set(specs))
    if unknown_ic:
        notes.append(f"interconnect rows for types not in the merged catalog (ignored): {', '.join(unknown_ic)}")

    # Cross-check the SkyPilot rows against the Karpenter specs.
    for z in zones:
        s = specs.get(z["instance_type"])
        if s is None:
            problems.append(f"{z['instance_type']} in {z['source']} is not in the merged catalog")
            continue
        count = s["gpu_count"] or s["accelerator_count"]
        if (z["vcpus"], z["memory_gib"], z["accelerator_count"]) != (s["vcpus"], s["memory_gib"], count):
            problems.append(f"{z['instance_type']} {z['zone']}: SkyPilot says {z['vcpus']} vCPUs/{z['memory_gib']} GiB/"
                            f"{z['accelerator_count']} GPUs, Karpenter {s['vcpus']}/{s['memory_gib']}/{count}")
        if z["accelerator_name"] != s["gpu_name"]:
            problems.append(f"{z['instance_type']}: SkyPilot GPU {z['accelerator_name']!r} vs {s['gpu_name']!r}")

    # Per-region prices.
    by_region: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for z in zones:
        by_region.setdefault((z["instance_type"], z["region"]), []).append(z)
    advisor_default = {(r["instance_type"], r["region"]): r for r in advisor if r["commit"] == DEFAULT_ADVISOR_COMMIT}
    if not advisor_default:
        raise BuildError(f"no rows of commit {DEFAULT_ADVISOR_COMMIT} in {SOURCES['advisor']}")

    rows: list[dict[str, Any]] = []
    for itype in sorted(specs):
        s = specs[itype]
        regions = {reg for (t, reg) in by_region if t == itype}
        regions |= {reg for (t, reg) in advisor_default if t == itype}
        if s["karpenter_usd_us_east_1"] is not None:
            regions.add("us-east-1")
        for region in sorted(regions) or [""]:
            zrows = by_region.get((itype, region), [])
            row = {k: v for k, v in s.items() if k in CATALOG_COLUMNS}
            row["region"] = region
            ondemand = {z["ondemand_usd_per_hour"] for z in zrows if z["ondemand_usd_per_hour"] is not None}
            if len(ondemand) > 1:
                problems.append(f"{itype} {region}: SkyPilot lists several on-demand prices {sorted(ondemand)}")
            if ondemand:
                row["ondemand_usd_per_hour"] = ondemand.pop()
                row["ondemand_source"] = zrows[0]["source"]
                k = s["karpenter_usd_us_east_1"]
                if region == "us-east-1" and k is not None and abs(k - row["ondemand_usd_per_hour"]) > 1e-4:
                    notes.append(f"{itype} us-east-1: SkyPilot {row['ondemand_usd_per_hour']} vs Karpenter {k} $/h (kept SkyPilot)")
            elif region == "us-east-1" and s["karpenter_usd_us_east_1"] is not None:
                row["ondemand_usd_per_hour"] = s["karpenter_usd_us_east_1"]
                row["ondemand_source"] = "karpenter-pricing-us-east-1"
            spot = sorted(z["spot_usd_per_hour"] for z in zrows if z["spot_usd_per_hour"] is not None)
            if spot:
                row["spot_min_usd_per_hour"] = spot[0]
                row["spot_median_usd_per_hour"] = statistics.median(spot)
            row["spot_zones"] = len(spot)
            adv = advisor_default.get((itype, region))
            if adv:
                row["interruption_bucket"] = adv["interruption_bucket_label"]
                row["spot_savings_pct"] = integer(adv["savings_pct"])
            rows.append(row)

    # The merged file carries SkyPilot spot min/median for the p family: they must agree.
    for r in merged:
        for region in ("us-east-1", "us-west-2"):
            want_min, want_med = num(r.get(f"spot_min_{region}")), num(r.get(f"spot_median_{region}"))
            if want_min is None:
                continue
            got = next((x for x in rows if x["instance_type"] == r["instance_type"] and x["region"] == region), {})
            # The merged file rounds the median to 4 decimals: compare within that.
            if got.get("spot_min_usd_per_hour") != want_min or abs((got.get("spot_median_usd_per_hour") or 0) - (want_med or 0)) > 1e-4:
                problems.append(f"{r['instance_type']} {region}: spot min/median {got.get('spot_min_usd_per_hour')}/"
                                f"{got.get('spot_median_usd_per_hour')} vs merged file {want_min}/{want_med}")
    if problems:
        raise BuildError("inputs contradict each other:\n  " + "\n  ".join(problems))

    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "ec2_catalog.csv", CATALOG_COLUMNS, rows)
    spot_cols = ["instance_type", "region", "zone", "spot_usd_per_hour", "ondemand_usd_per_hour", "source"]
    write_csv(out / "ec2_spot_prices.csv", spot_cols,
              sorted(zones, key=lambda z: (z["instance_type"], z["region"], z["zone"])))
    adv_rows = [{"instance_type": r["instance_type"], "region": r["region"],
                 "interruption_bucket": r["interruption_bucket_label"], "spot_savings_pct": integer(r["savings_pct"]),
                 "commit": r["commit"], "source": f"{r['source_repo']}@{r['commit'][:8]}:{r['source_path']}"}
                for r in advisor]
    write_csv(out / "ec2_spot_interruption.csv",
              ["instance_type", "region", "interruption_bucket", "spot_savings_pct", "commit", "source"],
              sorted(adv_rows, key=lambda r: (r["commit"], r["instance_type"], r["region"])))
    ic_cols = ["instance_type", "gpu_count", "intra_node_link", "intra_node_bandwidth_gbytes_per_s",
               "network_gbps_stated", "network_up_to_gbps", "efa", "source_row", "source", "notes"]
    write_csv(out / "ec2_gpu_interconnect.csv", ic_cols, sorted(interconnect.values(), key=lambda r: r["instance_type"]))
    spec_out = []
    inverse = {v: k for k, v in SPEC_ROW.items()}
    for r in spec_rows:
        spec_out.append({
            "spec_name": r["gpu_name"], "gpu_name": inverse.get(r["gpu_name"], ""),
            "fp32_tflops": num(r["fp32_tflops"]), "tf32_tflops_dense": num(r["tf32_tflops_dense"]),
            "fp16_bf16_tensor_tflops_dense": num(r["fp16_bf16_tensor_tflops_dense"]),
            "memory_gib": num(r["memory_gib"]),
            # The source column is called memory_bandwidth_gbps but holds GB/s (data/README.md).
            "memory_bandwidth_gbytes_per_s": num(r["memory_bandwidth_gbps"]),
            "sm_count": integer(r["sm_count"]), "source": r["source"], "notes": r["notes"],
        })
    write_csv(out / "gpu_specs.csv", ["spec_name", "gpu_name", "fp32_tflops", "tf32_tflops_dense",
                                      "fp16_bf16_tensor_tflops_dense", "memory_gib", "memory_bandwidth_gbytes_per_s",
                                      "sm_count", "source", "notes"], spec_out)
    meta = {
        "schema": 1,
        "prices_as_of": PRICES_AS_OF,
        "default_advisor_commit": DEFAULT_ADVISOR_COMMIT,
        "inputs": {name: {"file": SOURCES[name], "sha256": sha256(p)} for name, p in paths.items()},
        "rows": {
            "ec2_catalog.csv": len(rows),
            "instance_types": len(specs),
            "ec2_spot_prices.csv": len(zones),
            "ec2_spot_interruption.csv": len(adv_rows),
            "ec2_gpu_interconnect.csv": len(interconnect),
            "gpu_specs.csv": len(spec_out),
        },
        "notes": notes,
    }
    (out / "snapshot.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="folder with the shared catalog CSVs")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the snapshot")
    args = ap.parse_args(argv)
    try:
        meta = build(args.source, args.out)
    except BuildError as exc:
        print(f"build_catalog: {exc}", file=sys.stderr)
        return 1
    for note in meta["notes"]:
        print(f"note: {note}", file=sys.stderr)
    print(json.dumps(meta["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

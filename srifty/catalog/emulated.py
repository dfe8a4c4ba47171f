"""Emulated catalogs: the host types of the emulated cluster, read from a YAML file (schema 1, see
docs/catalog.md) and checked, then laid out as catalog rows with the same columns as EC2's (plus
the emulation columns), so that the same pipeline runs on the emulated cluster.

yaml and pandas are imported inside functions only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from srifty.catalog.files import CATALOG_COLUMNS, EMULATION_COLUMNS, NUMERIC_COLUMNS
from srifty.catalog.queries import did_you_mean
from srifty.errors import SriftyError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


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

"""The emulated instance catalog (``configs/emulated.yaml``): load, validate, resolve host lists.

Pure data: no system calls here, so the CLI can validate a spec without root.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from srifty.errors import SriftyError

SCHEMA_VERSION = 1

# name -> (python type accepted, required, description used in errors)
_TYPE_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "cpu_share": ((int, float), "CPU cores (cgroup quota) each host gets, e.g. 0.5"),
    "workers": ((int,), "worker processes per host, e.g. 1"),
    "bandwidth_mbit": ((int, float), "link rate in Mbit/s, e.g. 200"),
    "latency_ms": ((int, float), "added one-way latency in ms; only 0 is supported"),
    "price_per_hour": ((int, float), "on-demand price in $/hour"),
    "spot_price_per_hour": ((int, float), "spot price in $/hour"),
    "interruption_per_hour": ((int, float), "spot interruptions per hour"),
    "family": ((str,), "instance family label, e.g. emu"),
}
_TOP_FIELDS = ("schema", "name", "region", "subnet", "instance_types")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class HostType:
    """One emulated instance type: a CPU share, a shaped link and prices."""

    name: str
    cpu_share: float
    workers: int
    bandwidth_mbit: float
    latency_ms: float
    price_per_hour: float
    spot_price_per_hour: float
    interruption_per_hour: float
    family: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "HostType":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class ClusterSpec:
    """A validated emulated catalog."""

    name: str
    region: str
    subnet: ipaddress.IPv4Network
    instance_types: dict[str, HostType]
    path: str = ""

    def host_type(self, name: str) -> HostType:
        try:
            return self.instance_types[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self.instance_types), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise SriftyError(
                f"Unknown emulated instance type {name!r} in {self.path or 'the spec'}.{hint}",
                f"Known types: {', '.join(sorted(self.instance_types))}.",
            ) from None


def _fail(path: str, where: str, msg: str) -> SriftyError:
    return SriftyError(f"{path}: {where}: {msg}", "Fix the file (see docs/emulated-cluster.md for the format).")


def parse_spec(doc: Any, path: str = "<spec>") -> ClusterSpec:
    """Validate a loaded YAML document; errors name the offending field."""
    if not isinstance(doc, dict):
        raise _fail(path, "top level", "expected a mapping with keys " + ", ".join(_TOP_FIELDS))
    for key in _TOP_FIELDS:
        if key not in doc:
            raise _fail(path, key, "missing required field")
    for key in doc:
        if key not in _TOP_FIELDS:
            close = difflib.get_close_matches(str(key), _TOP_FIELDS, n=1)
            raise _fail(path, str(key), "unknown field" + (f" (did you mean {close[0]!r}?)" if close else ""))
    if doc["schema"] != SCHEMA_VERSION:
        raise _fail(path, "schema", f"must be {SCHEMA_VERSION} (got {doc['schema']!r})")
    for key in ("name", "region"):
        if not isinstance(doc[key], str) or not doc[key]:
            raise _fail(path, key, f"must be a non-empty string (got {doc[key]!r})")
    try:
        subnet = ipaddress.ip_network(str(doc["subnet"]), strict=True)
    except ValueError as exc:
        raise _fail(path, "subnet", f"not a network address such as 198.18.0.0/24 ({exc})") from None
    if not isinstance(subnet, ipaddress.IPv4Network) or subnet.prefixlen > 29:
        raise _fail(path, "subnet", f"must be an IPv4 network of /29 or larger (got {subnet})")
    types_doc = doc["instance_types"]
    if not isinstance(types_doc, dict) or not types_doc:
        raise _fail(path, "instance_types", "must be a non-empty mapping of type name -> fields")
    types: dict[str, HostType] = {}
    for tname, fields in types_doc.items():
        where = f"instance_types.{tname}"
        if not isinstance(tname, str) or not _NAME_RE.match(tname):
            raise _fail(path, where, "type names use letters, digits, '.', '_' and '-' (e.g. emu.small)")
        if not isinstance(fields, dict):
            raise _fail(path, where, "must be a mapping of fields")
        for key in fields:
            if key not in _TYPE_FIELDS:
                close = difflib.get_close_matches(str(key), list(_TYPE_FIELDS), n=1)
                raise _fail(path, f"{where}.{key}", "unknown field" + (f" (did you mean {close[0]!r}?)" if close else ""))
        values: dict[str, Any] = {"name": tname}
        for key, (kinds, desc) in _TYPE_FIELDS.items():
            if key not in fields:
                raise _fail(path, f"{where}.{key}", f"missing required field ({desc})")
            v = fields[key]
            if isinstance(v, bool) or not isinstance(v, kinds):
                raise _fail(path, f"{where}.{key}", f"expected {desc} (got {v!r})")
            if isinstance(v, float) and not math.isfinite(v):
                raise _fail(path, f"{where}.{key}", f"must be finite (got {v!r})")
            values[key] = v
        ht = HostType(**{**values, **{k: float(values[k]) for k in (
            "cpu_share", "bandwidth_mbit", "latency_ms", "price_per_hour", "spot_price_per_hour",
            "interruption_per_hour")}})
        if ht.cpu_share <= 0:
            raise _fail(path, f"{where}.cpu_share", f"must be positive (got {ht.cpu_share})")
        if ht.workers < 1:
            raise _fail(path, f"{where}.workers", f"must be at least 1 (got {ht.workers})")
        if not 0.1 <= ht.bandwidth_mbit <= 100_000:
            raise _fail(path, f"{where}.bandwidth_mbit", f"must be between 0.1 and 100000 (got {ht.bandwidth_mbit})")
        if ht.latency_ms != 0:
            raise _fail(
                path, f"{where}.latency_ms",
                f"only 0 is supported (got {ht.latency_ms}): this kernel has no netem qdisc, so srifty "
                "cannot add latency, jitter or loss honestly",
            )
        for key in ("price_per_hour", "spot_price_per_hour", "interruption_per_hour"):
            if getattr(ht, key) < 0:
                raise _fail(path, f"{where}.{key}", f"must not be negative (got {getattr(ht, key)})")
        if not ht.family:
            raise _fail(path, f"{where}.family", "must be a non-empty string")
        types[tname] = ht
    return ClusterSpec(name=doc["name"], region=doc["region"], subnet=subnet, instance_types=types, path=path)


def load_spec(path: str | Path) -> ClusterSpec:
    """Read and validate an emulated catalog file (``yaml.safe_load`` only)."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise SriftyError(f"Emulated cluster spec {str(p)!r} does not exist.",
                          "The shipped one is configs/emulated.yaml.") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SriftyError(f"{p}: not valid YAML ({exc}).") from None
    return parse_spec(doc, str(p))


def parse_hosts(text: str) -> list[tuple[str, int]]:
    """``"emu.medium:2,emu.small:1"`` -> ``[("emu.medium", 2), ("emu.small", 1)]`` (count defaults to 1)."""
    out: list[tuple[str, int]] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, count = part.partition(":")
        try:
            n = int(count) if count else 1
        except ValueError:
            raise SriftyError(f"--hosts: {part!r} is not TYPE:COUNT (e.g. emu.medium:2).") from None
        if n < 1:
            raise SriftyError(f"--hosts: the count for {name!r} must be at least 1 (got {n}).")
        out.append((name.strip(), n))
    if not out:
        raise SriftyError("--hosts is empty: give TYPE:COUNT pairs such as emu.medium:2,emu.small:1.")
    return out

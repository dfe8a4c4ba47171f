"""How long and how dear an EC2 profile may be: the time cap, the billed hours, srifty's config
file (``ec2:`` section) and the cost limit a run is held to.

These figures are read before anything is launched (the cost table, the consent) and by the
solver's advice on what to measure next (:func:`billed_hours`), so they stand apart from the
AWS calls.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from srifty.errors import SriftyError
from srifty.profiling.launcher import ProfileRequest

# Time from RunInstances to user data running, plus installing srifty and the requirements.
BOOT_OVERHEAD_S = 600.0


def time_cap(request: ProfileRequest) -> float:
    """Seconds an instance may run after boot before the launcher gives up on it."""
    if request.time_cap is not None:
        return float(request.time_cap)
    return request.startup_timeout + request.max_seconds + request.hang_timeout


def billed_hours(request: ProfileRequest, boot_overhead_s: float = BOOT_OVERHEAD_S) -> float:
    """The most hours one instance of an EC2 profile is billed for: the time cap plus boot."""
    return (time_cap(request) + boot_overhead_s) / 3600.0


def config_path() -> Path:
    """srifty's config file: ``$XDG_CONFIG_HOME/srifty/config.yaml`` (``~/.config/...`` by default)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "srifty" / "config.yaml"


@dataclass(frozen=True)
class Ec2Config:
    """The ``ec2:`` section of srifty's config file, e.g. ``ec2: {max_cost: 20, max_bundle_mb: 100}``.

    ``max_cost`` is the default for ``--max-cost`` (a standing limit on what one run may
    cost); ``max_bundle_mb`` raises or lowers the cap on the project shipped to S3;
    ``subnet_ids`` and ``security_group_ids`` are the defaults of ``--subnet-ids`` and
    ``--security-group-ids`` (an account without a default VPC sets them once)."""

    path: Path
    max_cost: float | None = None
    max_bundle_mb: float | None = None
    subnet_ids: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()

    KEYS = ("max_cost", "max_bundle_mb", "subnet_ids", "security_group_ids")
    NUMBERS = ("max_cost", "max_bundle_mb")

    @classmethod
    def load(cls, path: Path | None = None) -> "Ec2Config":
        """Read the file (``yaml.safe_load`` only); a missing file is an empty config. Unknown keys
        under ``ec2:`` are errors: a misspelt ``max_cost`` must not silently lift the limit."""
        import yaml

        path = path or config_path()
        if not path.is_file():
            return cls(path)
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise SriftyError(f"Cannot read srifty's config file {path}: {exc}",
                              "Fix it (YAML, e.g. `ec2: {max_cost: 20}`) or move it away.") from None
        section = doc.get("ec2") if isinstance(doc, dict) else None
        if section is None:
            return cls(path)
        if not isinstance(section, dict) or set(section) - set(cls.KEYS):
            raise SriftyError(f"{path}: `ec2:` must be a mapping with the keys {', '.join(cls.KEYS)} "
                              f"(got {section!r}).", "For example: `ec2: {max_cost: 20}`.")
        values: dict[str, Any] = {k: cls._positive(path, k, section.get(k)) for k in cls.NUMBERS}
        values["subnet_ids"] = aws_ids(section.get("subnet_ids") or [], "subnet", f"{path}: ec2.subnet_ids")
        values["security_group_ids"] = aws_ids(section.get("security_group_ids") or [], "sg",
                                               f"{path}: ec2.security_group_ids")
        return cls(path, **values)

    @staticmethod
    def _positive(path: Path, key: str, value: Any) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise SriftyError(f"{path}: ec2.{key} must be a positive number (got {value!r}).")
        return float(value)


def aws_ids(values: Any, prefix: str, what: str) -> tuple[str, ...]:
    """IDs of one kind of AWS resource (``subnet-…``, ``sg-…``), each once: a list, or one
    comma-separated string (``what`` names the option or key in the error)."""
    import re

    items = [v.strip() for v in values.split(",")] if isinstance(values, str) else values
    if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) for v in items):
        raise SriftyError(f"{what} must be a list of {prefix}-… IDs (got {values!r}).")
    items = [v for v in items if v]
    bad = [v for v in items if not re.fullmatch(rf"{prefix}-[0-9a-f]{{8,17}}", v)]
    if bad:
        raise SriftyError(f"{what}: {', '.join(map(repr, bad))} {'is not an ID' if len(bad) == 1 else 'are not IDs'} "
                          f"like {prefix}-0123456789abcdef0.", "Copy them from the VPC console or "
                          f"`aws ec2 describe-{'subnets' if prefix == 'subnet' else 'security-groups'}`.")
    if len(set(items)) != len(items):
        raise SriftyError(f"{what} lists an ID twice ({', '.join(items)}).", "Give each once.")
    return tuple(items)


@dataclass(frozen=True)
class CostLimit:
    """The most a run may cost, and where that figure came from (for the messages)."""

    dollars: float
    source: str  # "--max-cost" or "ec2.max_cost in PATH"


def cost_limit(request: ProfileRequest, config: Ec2Config) -> CostLimit | None:
    """--max-cost, else ec2.max_cost from the config file, else none."""
    if request.max_cost is not None:
        return CostLimit(request.max_cost, "--max-cost")
    if config.max_cost is not None:
        return CostLimit(config.max_cost, f"ec2.max_cost in {config.path}")
    return None

"""Cluster configurations: which instance types, how many nodes, workers per node, market.

The text syntax, one group per ``+``::

    [COUNT x]INSTANCE_TYPE[:WORKERS_PER_NODE][@spot]

e.g. ``4xg4dn.12xlarge``, ``2xp3.8xlarge+1xg5.12xlarge``, ``g4dn.12xlarge:1+g4dn.12xlarge:3``,
``3xemu.medium@spot``. ``WORKERS_PER_NODE`` defaults to every GPU of the type (the
catalog's ``workers_per_node``). This module imports nothing heavy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from srifty.errors import SriftyError

if TYPE_CHECKING:  # pragma: no cover
    from srifty.catalog import Catalog

SYNTAX = "[COUNT x]INSTANCE_TYPE[:WORKERS_PER_NODE][@spot], groups joined by '+'"
# Far beyond any real cluster: a typo is refused, not enumerated or simulated.
MAX_NODES = 4096
MAX_WORKERS_PER_NODE = 1024
# Most nodes `recommend` searches: mixes of two types make the space grow with the square of
# the nodes (measured: 128 nodes take 4 GB and 9 s, 256 nodes 15 GB and 4 minutes).
MAX_SEARCH_NODES = 128
_GROUP = re.compile(
    r"^(?:(?P<count>\d+)\s*[x×*]\s*)?(?P<type>[A-Za-z][A-Za-z0-9_.\-]*?)(?::(?P<wpn>\d+))?(?:@(?P<market>[A-Za-z\-]+))?$"
)


class ConfigSyntaxError(SriftyError):
    """A configuration string that does not follow the syntax."""


@dataclass(frozen=True, order=True)
class NodeGroup:
    """``count`` nodes of one instance type, each running ``workers_per_node`` workers (None: all GPUs)."""

    count: int
    instance_type: str
    workers_per_node: int | None = None
    spot: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_NODES:
            raise ConfigSyntaxError(f"A node group has 1 to {MAX_NODES} nodes, got {self.count}.")
        if self.workers_per_node is not None and not 1 <= self.workers_per_node <= MAX_WORKERS_PER_NODE:
            raise ConfigSyntaxError(f"Workers per node are 1 to {MAX_WORKERS_PER_NODE}, got {self.workers_per_node}.")
        if not self.instance_type:
            raise ConfigSyntaxError("A node group needs an instance type.")

    def format(self) -> str:
        out = f"{self.count}x{self.instance_type}"
        if self.workers_per_node is not None:
            out += f":{self.workers_per_node}"
        return out + ("@spot" if self.spot else "")


@dataclass(frozen=True)
class ClusterConfig:
    """A data-parallel cluster: one or more node groups (a mix when their types differ)."""

    groups: tuple[NodeGroup, ...]

    def __post_init__(self) -> None:
        if not self.groups:
            raise ConfigSyntaxError("A configuration needs at least one node group.")
        if sum(g.count for g in self.groups) > MAX_NODES:
            raise ConfigSyntaxError(f"A configuration has at most {MAX_NODES} nodes, got {sum(g.count for g in self.groups)}.")

    @classmethod
    def parse(cls, text: str) -> "ClusterConfig":
        return parse_config(text)

    def format(self) -> str:
        return format_config(self)

    def __str__(self) -> str:
        return self.format()

    @property
    def nodes(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def instance_types(self) -> list[str]:
        return sorted({g.instance_type for g in self.groups})

    @property
    def is_mixed(self) -> bool:
        return len(self.instance_types) > 1

    def resolved(self, catalog: "Catalog") -> "ClusterConfig":
        """Validate every type against ``catalog`` and fill default workers per node."""
        groups = []
        for g in self.groups:
            it = lookup_instance_type(catalog, g.instance_type)
            wpn = g.workers_per_node if g.workers_per_node is not None else it.workers_per_node
            if wpn > it.workers_per_node:
                raise SriftyError(
                    f"{g.instance_type} has {it.workers_per_node} GPU worker slot(s) per node; "
                    f"the configuration asks for {wpn}.",
                    f"Use at most :{it.workers_per_node} after the type, or leave it out for all of them.",
                )
            groups.append(NodeGroup(g.count, it.name, wpn, g.spot))
        return ClusterConfig(tuple(groups))

    def workers_per_node(self) -> list[int]:
        """One entry per node (needs resolved workers per node)."""
        out: list[int] = []
        for g in self.groups:
            if g.workers_per_node is None:
                raise SriftyError(f"Workers per node of {g.instance_type} are not resolved; call resolved(catalog).")
            out.extend([g.workers_per_node] * g.count)
        return out

    @property
    def world_size(self) -> int:
        return sum(self.workers_per_node())


def lookup_instance_type(catalog: "Catalog", name: str) -> "object":
    """The catalog entry of ``name``; unknown names raise SriftyError with 'Did you mean …'."""
    return catalog.get(name)


def parse_group(text: str) -> NodeGroup:
    raw = text.strip()
    m = _GROUP.match(raw)
    if not m:
        raise ConfigSyntaxError(f"Cannot read the node group {raw!r}.", f"The syntax is {SYNTAX}, e.g. 4xg4dn.12xlarge.")
    market = (m.group("market") or "").lower()
    if market not in ("", "spot", "on-demand", "ondemand"):
        raise ConfigSyntaxError(f"Unknown market {market!r} in {raw!r}.", "Write @spot for spot, nothing for on-demand.")
    return NodeGroup(
        count=int(m.group("count") or 1),
        instance_type=m.group("type"),
        workers_per_node=int(m.group("wpn")) if m.group("wpn") else None,
        spot=market == "spot",
    )


def parse_config(text: str) -> ClusterConfig:
    """Parse ``2xp3.8xlarge+1xg5.12xlarge`` into a :class:`ClusterConfig` (no catalog check)."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigSyntaxError("Empty configuration.", f"The syntax is {SYNTAX}, e.g. 4xg4dn.12xlarge.")
    return ClusterConfig(tuple(parse_group(part) for part in text.split("+")))


def format_config(config: ClusterConfig) -> str:
    return "+".join(g.format() for g in config.groups)


def from_placement(instance_type: str, workers_per_node: Iterable[int], spot: bool = False) -> ClusterConfig:
    """A config of one type from workers per node (``[1, 1, 3]``), merging equal neighbours."""
    groups: list[NodeGroup] = []
    for w in workers_per_node:
        if groups and groups[-1].workers_per_node == w:
            last = groups.pop()
            groups.append(NodeGroup(last.count + 1, instance_type, w, spot))
        else:
            groups.append(NodeGroup(1, instance_type, int(w), spot))
    return ClusterConfig(tuple(groups))

"""The emulated cluster as recorded: its hosts, their CPU calibration, and the state file.

:func:`srifty.cluster.lifecycle.up` plans the hosts into a :class:`ClusterState` and writes it
before it makes anything, so every later command (status, down, calibrate, running on a host)
reads what exists from here rather than from the system. The names every resource carries
(``srifty-<cluster>-``) and the CFS period of the host quotas are fixed here too, since both
are part of what is recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from srifty.cluster.spec import HostType
from srifty.errors import SriftyError
from srifty.outputs import atomic_write_text, exclusive_lock

PREFIX = "srifty-"
DEFAULT_CLUSTER = "main"
IFNAME = "emu0"  # the host's interface inside its namespace (GLOO_SOCKET_IFNAME)
BRIDGE = "br0"
# CFS period for the host quotas: 20 ms (kernel default 100 ms) so a throttled host stalls in
# short slices, closer to a uniformly slower CPU for iteration times of tens of milliseconds.
CFS_PERIOD_US = 20_000
STATE_SCHEMA = 1
_CLUSTER_RE = re.compile(r"^[a-z0-9]{1,16}$")


@dataclass(frozen=True)
class Host:
    """One emulated host: a namespace with one shaped link and a CPU quota."""

    name: str
    type_name: str
    index: int
    namespace: str
    ifname: str
    address: str
    prefixlen: int
    switch_port: str
    cgroup: str
    cpu_share: float
    workers: int
    bandwidth_mbit: float

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Host":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class CpuCalibration:
    """Measured slowdown of a fixed pure-Python loop on one host type vs an unconstrained run."""

    type_name: str
    host: str
    cpu_share: float
    workers: int
    nominal_factor: float  # what the quota alone would predict: max(1, workers / cpu_share)
    factor: float  # best-of-N host seconds / best-of-N unconstrained seconds
    factor_median: float  # the same with medians (sensitive to other load on the machine)
    host_seconds: list[float]
    base_seconds: list[float]
    iterations: int
    measured_at: str
    loadavg_1m: float  # machine load when measured: other work on the 2 cores skews the factor

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CpuCalibration":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


@dataclass
class ClusterState:
    """What ``up`` made; written atomically to the state file and read back by every command."""

    cluster: str
    spec_path: str
    spec_name: str
    subnet: str
    switch_namespace: str
    bridge: str
    cfs_period_us: int
    cgroup_version: int
    cgroup_base: str
    hosts: list[Host]
    host_types: dict[str, HostType]
    machine_cores: float
    created_at: str
    complete: bool = False
    calibration: dict[str, CpuCalibration] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def total_cpu_share(self) -> float:
        return round(sum(h.cpu_share for h in self.hosts), 6)

    @property
    def oversubscribed(self) -> bool:
        """True when the hosts' quotas add up to more cores than this machine has."""
        return self.total_cpu_share > self.machine_cores + 1e-9

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise SriftyError(f"No host {name!r} in emulated cluster {self.cluster!r}.",
                          f"Hosts: {', '.join(h.name for h in self.hosts)}.")

    def cgroup_path(self, host: Host) -> Path:
        return Path(self.cgroup_base) / host.cgroup

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["schema"] = STATE_SCHEMA
        d["total_cpu_share"] = self.total_cpu_share
        d["oversubscribed"] = self.oversubscribed
        d["host_types"] = {k: v.to_dict() for k, v in self.host_types.items()}
        d["calibration"] = {k: asdict(v) for k, v in self.calibration.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ClusterState":
        if d.get("schema") != STATE_SCHEMA:
            raise ValueError(f"state schema {d.get('schema')!r}, expected {STATE_SCHEMA}")
        kw = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        kw["hosts"] = [Host.from_dict(h) for h in d["hosts"]]
        kw["host_types"] = {k: HostType.from_dict(v) for k, v in d["host_types"].items()}
        kw["calibration"] = {k: CpuCalibration.from_dict(v) for k, v in d.get("calibration", {}).items()}
        return cls(**kw)


# ---- state file --------------------------------------------------------------------------------

def state_dir() -> Path:
    return Path(os.environ.get("SRIFTY_STATE_DIR", "/run/srifty"))


def state_path(cluster: str = DEFAULT_CLUSTER) -> Path:
    return state_dir() / f"cluster-{cluster}.json"


def _check_cluster_name(cluster: str) -> None:
    if not _CLUSTER_RE.match(cluster):
        raise SriftyError(f"Cluster name {cluster!r} is not valid: use 1-16 lowercase letters or digits.")


@contextlib.contextmanager
def _locked(cluster: str) -> Iterator[None]:
    """Serialise up/down/calibrate of one cluster across processes."""
    with exclusive_lock(state_dir() / f"cluster-{cluster}.lock"):
        yield


def _write_state(state: ClusterState) -> None:
    atomic_write_text(state_path(state.cluster), json.dumps(state.to_dict(), indent=1))


def load_state(cluster: str = DEFAULT_CLUSTER) -> ClusterState | None:
    """The recorded state, or None when there is no (readable) state file."""
    try:
        return ClusterState.from_dict(json.loads(state_path(cluster).read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return None


def require_state(cluster: str = DEFAULT_CLUSTER) -> ClusterState:
    state = load_state(cluster)
    if state is None or not state.complete:
        raise SriftyError(f"Emulated cluster {cluster!r} is not up.",
                          "Start it with `srifty cluster up --hosts emu.medium:2` (as root).")
    return state

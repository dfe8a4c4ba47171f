"""Bring the emulated cluster up and down, report it, and run commands on its hosts.

Layout (nothing is added to the root network namespace)::

    netns srifty-<cluster>-switch       bridge br0 (no address, no routes), ports p0, p1, ...
       p<i>  <== veth ==>  emu0         in netns srifty-<cluster>-<host>, address from the subnet
    tbf on p<i> (switch -> host) and on emu0 (host -> switch): the host's link rate both ways
    cgroup <cpu root>/srifty-<cluster>-<host>: the host's CPU quota

Every resource carries the ``srifty-<cluster>-`` prefix, so :func:`down` can sweep what a
crashed ``up`` left behind even without the state file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from srifty.cluster import system
from srifty.cluster.spec import ClusterSpec, HostType
from srifty.errors import SriftyError

PREFIX = "srifty-"
DEFAULT_CLUSTER = "main"
IFNAME = "emu0"  # the host's interface inside its namespace (GLOO_SOCKET_IFNAME)
BRIDGE = "br0"
# CFS period for the host quotas: 20 ms (kernel default 100 ms) so a throttled host stalls in
# short slices, closer to a uniformly slower CPU for iteration times of tens of milliseconds.
CFS_PERIOD_US = 20_000
TBF_LATENCY_MS = 25  # queue bound of the tbf shaper (bytes of queue = rate x this)
STATE_SCHEMA = 1
_CLUSTER_RE = re.compile(r"^[a-z0-9]{1,16}$")


def tbf_burst_bytes(bandwidth_mbit: float) -> int:
    """Token bucket depth: 2 ms of traffic, at least 16 KiB (ten full frames)."""
    return max(16 * 1024, int(bandwidth_mbit * 1e6 / 8 * 0.002))


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
    state_dir().mkdir(parents=True, exist_ok=True)
    with open(state_dir() / f"cluster-{cluster}.lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _write_state(state: ClusterState) -> None:
    path = state_path(state.cluster)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(state.to_dict(), fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


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


# ---- planning ----------------------------------------------------------------------------------

def _host_base_name(type_name: str) -> str:
    base = re.sub(r"[^a-z0-9]", "", type_name.rsplit(".", 1)[-1].lower())
    return base or "host"


def plan_hosts(spec: ClusterSpec, hosts: list[tuple[str, int]], cluster: str = DEFAULT_CLUSTER) -> list[Host]:
    """Names, addresses, ports and cgroups for the requested hosts (pure; no system calls)."""
    _check_cluster_name(cluster)
    counts: dict[str, int] = {}
    for type_name, n in hosts:
        spec.host_type(type_name)
        if n < 1:
            raise SriftyError(f"Host count for {type_name!r} must be at least 1 (got {n}).")
        counts[type_name] = counts.get(type_name, 0) + n
    bases: dict[str, str] = {}
    for type_name in counts:
        base = _host_base_name(type_name)
        if base in bases.values():
            base = re.sub(r"[^a-z0-9]", "", type_name.lower())
        bases[type_name] = base
    addrs = list(spec.subnet.hosts())
    total = sum(counts.values())
    if total > len(addrs):
        raise SriftyError(f"{total} hosts do not fit in subnet {spec.subnet} ({len(addrs)} addresses).")
    out: list[Host] = []
    for type_name, n in counts.items():
        ht = spec.instance_types[type_name]
        for k in range(n):
            i = len(out)
            name = f"{bases[type_name]}{k}"
            out.append(Host(
                name=name, type_name=type_name, index=i, namespace=f"{PREFIX}{cluster}-{name}", ifname=IFNAME,
                address=str(addrs[i]), prefixlen=spec.subnet.prefixlen, switch_port=f"p{i}",
                cgroup=f"{PREFIX}{cluster}-{name}", cpu_share=ht.cpu_share, workers=ht.workers,
                bandwidth_mbit=ht.bandwidth_mbit,
            ))
    return out


def _same_layout(state: ClusterState, spec: ClusterSpec, planned: list[Host]) -> bool:
    if state.subnet != str(spec.subnet) or state.hosts != planned:
        return False
    return all(state.host_types.get(h.type_name) == spec.instance_types[h.type_name] for h in planned)


def _describe(hosts: list[Host]) -> str:
    counts: dict[str, int] = {}
    for h in hosts:
        counts[h.type_name] = counts.get(h.type_name, 0) + 1
    return ",".join(f"{t}:{n}" for t, n in counts.items())


# ---- up / verify / down ------------------------------------------------------------------------

def _tbf(netns: str, dev: str, mbit: float) -> None:
    system.sh(["tc", "-n", netns, "qdisc", "replace", "dev", dev, "root", "tbf",
               "rate", f"{int(round(mbit * 1000))}kbit", "burst", str(tbf_burst_bytes(mbit)),
               "latency", f"{TBF_LATENCY_MS}ms"])


def _create_host(state: ClusterState, h: Host, driver: system.CgroupDriver) -> None:
    sw, ns = state.switch_namespace, h.namespace
    ip = ["ip", "-n"]
    system.sh(["ip", "netns", "add", ns])
    system.sh(ip + [sw, "link", "add", "name", h.switch_port, "type", "veth", "peer", "name", h.ifname, "netns", ns])
    system.sh(ip + [sw, "link", "set", "dev", h.switch_port, "master", state.bridge])
    system.sh(ip + [sw, "link", "set", "dev", h.switch_port, "up"])
    system.sh(ip + [ns, "link", "set", "dev", "lo", "up"])
    # No IPv6 link-local address: the host has exactly one address, the one from the subnet.
    system.sh(ip + [ns, "link", "set", "dev", h.ifname, "addrgenmode", "none"])
    system.sh(ip + [ns, "addr", "add", f"{h.address}/{h.prefixlen}", "dev", h.ifname])
    system.sh(ip + [ns, "link", "set", "dev", h.ifname, "up"])
    _tbf(ns, h.ifname, h.bandwidth_mbit)  # host -> switch
    _tbf(sw, h.switch_port, h.bandwidth_mbit)  # switch -> host
    driver.create(h.cgroup, h.cpu_share, state.cfs_period_us)


def up(
    spec: ClusterSpec,
    hosts: list[tuple[str, int]],
    cluster: str = DEFAULT_CLUSTER,
    replace: bool = False,
) -> ClusterState:
    """Create the hosts (idempotent: the same request again returns the existing cluster).

    A different request while a cluster is up raises unless ``replace`` is true, in which
    case the old cluster is torn down first. On any failure or interrupt everything made so
    far is removed before the exception propagates.
    """
    planned = plan_hosts(spec, hosts, cluster)
    driver = system.check_environment()
    with _locked(cluster):
        existing = load_state(cluster)
        if existing is not None and existing.complete and _same_layout(existing, spec, planned):
            if not verify(existing):
                kept = [n for n in existing.notes if n.startswith("oversubscribed")]
                return dataclasses.replace(existing, notes=kept + ["already up with these hosts: nothing changed"])
            _down_locked(cluster, all_clusters=False)  # same request, damaged: rebuild
        elif existing is not None and existing.complete and not replace:
            raise SriftyError(
                f"Emulated cluster {cluster!r} is already up with {_describe(existing.hosts)} "
                f"(from {existing.spec_path}); asked for {_describe(planned)}.",
                "Run `srifty cluster down` first, or pass --replace to tear it down and create the new one.",
            )
        notes: list[str] = []
        replaced = existing is not None and existing.complete
        leftovers = _down_locked(cluster, all_clusters=False)
        if replaced:
            notes.append(f"replaced the earlier cluster ({_describe(existing.hosts)}): {leftovers.summary()}")
        elif leftovers.removed_anything:
            notes.append(f"removed leftovers of an earlier run: {leftovers.summary()}")
        state = ClusterState(
            cluster=cluster, spec_path=spec.path, spec_name=spec.name, subnet=str(spec.subnet),
            switch_namespace=f"{PREFIX}{cluster}-switch", bridge=BRIDGE, cfs_period_us=CFS_PERIOD_US,
            cgroup_version=driver.version, cgroup_base=str(driver.base), hosts=planned,
            host_types={h.type_name: spec.instance_types[h.type_name] for h in planned},
            machine_cores=system.machine_cores(), created_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            notes=notes,
        )
        if state.oversubscribed:
            state.notes.append(
                f"oversubscribed: the hosts' CPU shares add up to {state.total_cpu_share:g} cores but this "
                f"machine has {state.machine_cores:g}; when all hosts compute at once they slow each other "
                "beyond their quotas, so per-host CPU factors from `calibrate` do not hold then")
        _write_state(state)  # recorded before anything is made, so down() finds a crash's remains
        try:
            system.sh(["ip", "netns", "add", state.switch_namespace])
            system.sh(["ip", "-n", state.switch_namespace, "link", "add", "name", BRIDGE, "type", "bridge"])
            system.sh(["ip", "-n", state.switch_namespace, "link", "set", "dev", BRIDGE, "up"])
            for h in planned:
                _create_host(state, h, driver)
            problems = verify(state)
            if problems:
                raise SriftyError("The emulated cluster did not come up as asked: " + "; ".join(problems))
            state.complete = True
            _write_state(state)
        except BaseException:
            _down_locked(cluster, all_clusters=False)
            raise
        return state


def verify(state: ClusterState) -> list[str]:
    """Problems found when comparing the system with the state (empty list: all present)."""
    driver = system.CgroupDriver(state.cgroup_version, Path(state.cgroup_base))
    problems: list[str] = []
    if not system.netns_exists(state.switch_namespace):
        return [f"switch namespace {state.switch_namespace} is missing"]
    for h in state.hosts:
        if not system.netns_exists(h.namespace):
            problems.append(f"{h.name}: namespace {h.namespace} is missing")
            continue
        addrs = _addresses(h.namespace, h.ifname)
        if h.address not in addrs:
            problems.append(f"{h.name}: {h.ifname} lacks address {h.address} (has {addrs})")
        for ns, dev in ((h.namespace, h.ifname), (state.switch_namespace, h.switch_port)):
            q = _qdisc(ns, dev)
            want = int(round(h.bandwidth_mbit * 1e6 / 8))
            if q is None or q.get("kind") != "tbf" or abs(q.get("options", {}).get("rate", 0) - want) > want * 0.01:
                problems.append(f"{h.name}: no tbf at {h.bandwidth_mbit:g} Mbit/s on {dev} in {ns} (found {q})")
        quota = driver.quota(h.cgroup)
        want_q = max(1000, int(round(h.cpu_share * state.cfs_period_us)))
        if quota != (want_q, state.cfs_period_us):
            problems.append(f"{h.name}: cgroup {h.cgroup} quota is {quota}, expected {(want_q, state.cfs_period_us)}")
    return problems


def _addresses(ns: str, dev: str) -> list[str]:
    proc = system.sh(["ip", "-n", ns, "-j", "addr", "show", "dev", dev], check=False)
    if proc.returncode != 0:
        return []
    try:
        return [a["local"] for link in json.loads(proc.stdout) for a in link.get("addr_info", [])]
    except (ValueError, KeyError):
        return []


def _qdisc(ns: str, dev: str) -> dict[str, Any] | None:
    proc = system.sh(["tc", "-n", ns, "-j", "qdisc", "show", "dev", dev], check=False)
    if proc.returncode != 0:
        return None
    try:
        roots = [q for q in json.loads(proc.stdout) if q.get("root")]
    except ValueError:
        return None
    return roots[0] if roots else None


@dataclass
class DownReport:
    """What :func:`down` removed."""

    killed_pids: list[int] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    state_file: str | None = None

    @property
    def removed_anything(self) -> bool:
        return bool(self.killed_pids or self.namespaces or self.cgroups or self.links)

    def summary(self) -> str:
        parts = [f"{len(self.namespaces)} namespace(s)", f"{len(self.cgroups)} cgroup(s)"]
        if self.links:
            parts.append(f"{len(self.links)} link(s)")
        if self.killed_pids:
            parts.append(f"{len(self.killed_pids)} process(es) killed")
        return ", ".join(parts)


def down(cluster: str = DEFAULT_CLUSTER, all_clusters: bool = False) -> DownReport:
    """Remove the cluster: kill its processes, delete its namespaces (and links) and cgroups.

    Works from the state file and also sweeps every resource named ``srifty-<cluster>-``
    (``srifty-`` with ``all_clusters``), so it cleans up after a crash or a lost state file.
    """
    _check_cluster_name(cluster)
    system.check_environment()
    with _locked(cluster):
        return _down_locked(cluster, all_clusters)


def _down_locked(cluster: str, all_clusters: bool) -> DownReport:
    prefix = PREFIX if all_clusters else f"{PREFIX}{cluster}-"
    driver = system.CgroupDriver.detect()
    state = load_state(cluster)
    namespaces = set(system.netns_list(prefix))
    cgroups = set(driver.list(prefix))
    if state is not None:
        namespaces |= {h.namespace for h in state.hosts if system.netns_exists(h.namespace)}
        if system.netns_exists(state.switch_namespace):
            namespaces.add(state.switch_namespace)
        cgroups |= {h.cgroup for h in state.hosts if driver.quota(h.cgroup) is not None}
    report = DownReport()
    pids: set[int] = set()
    for ns in namespaces:
        pids.update(system.netns_pids(ns))
    for cg in cgroups:
        pids.update(driver.pids(cg))
    report.killed_pids = system.kill_pids(sorted(pids))
    for ns in sorted(namespaces):
        system.sh(["ip", "netns", "delete", ns], check=False)
        if system.netns_exists(ns):
            raise SriftyError(f"Could not delete network namespace {ns}.",
                              f"Check `ip netns pids {ns}` and remove it with `ip netns delete {ns}`.")
        report.namespaces.append(ns)
    for cg in sorted(cgroups):
        driver.remove(cg)
        report.cgroups.append(cg)
    for link in system.root_links(prefix):
        system.sh(["ip", "link", "delete", "dev", link], check=False)
        report.links.append(link)
    path = state_path(cluster)
    if path.exists():
        path.unlink()
        report.state_file = str(path)
    return report


# ---- status ------------------------------------------------------------------------------------

@dataclass
class HostStatus:
    name: str
    type_name: str
    namespace: str
    present: bool
    address: str
    ifname: str
    addresses: list[str]
    shaping_out: str  # tbf on the host's end (host -> switch)
    shaping_in: str  # tbf on the switch's end (switch -> host)
    cpu_share: float
    quota_us: int | None
    period_us: int | None
    throttled_periods: int
    throttled_seconds: float
    processes: list[dict[str, Any]]


@dataclass
class ClusterStatus:
    cluster: str
    up: bool
    state_file: str
    hosts: list[HostStatus]
    total_cpu_share: float
    machine_cores: float
    oversubscribed: bool
    problems: list[str]
    orphans: list[str]  # srifty-<cluster>-* resources not in the state file
    calibration: dict[str, CpuCalibration]
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fmt_qdisc(q: dict[str, Any] | None) -> str:
    if q is None:
        return "none"
    opts = q.get("options", {})
    if q.get("kind") == "tbf":
        return f"tbf {opts.get('rate', 0) * 8 / 1e6:g} Mbit/s burst {opts.get('burst')} B"
    return str(q.get("kind"))


def status(cluster: str = DEFAULT_CLUSTER) -> ClusterStatus:
    """What exists now: hosts, addresses, shaping, quotas, live processes, leftovers."""
    _check_cluster_name(cluster)
    system.check_environment()
    driver = system.CgroupDriver.detect()
    state = load_state(cluster)
    prefix = f"{PREFIX}{cluster}-"
    known_ns: set[str] = set()
    known_cg: set[str] = set()
    hosts: list[HostStatus] = []
    if state is not None:
        known_ns = {h.namespace for h in state.hosts} | {state.switch_namespace}
        known_cg = {h.cgroup for h in state.hosts}
        for h in state.hosts:
            present = system.netns_exists(h.namespace)
            quota = driver.quota(h.cgroup)
            st = driver.stat(h.cgroup)
            pids = sorted(set(driver.pids(h.cgroup)) | set(system.netns_pids(h.namespace)))
            hosts.append(HostStatus(
                name=h.name, type_name=h.type_name, namespace=h.namespace, present=present, address=h.address,
                ifname=h.ifname, addresses=_addresses(h.namespace, h.ifname) if present else [],
                shaping_out=_fmt_qdisc(_qdisc(h.namespace, h.ifname)) if present else "none",
                shaping_in=_fmt_qdisc(_qdisc(state.switch_namespace, h.switch_port)),
                cpu_share=h.cpu_share, quota_us=quota[0] if quota else None, period_us=quota[1] if quota else None,
                throttled_periods=st.get("nr_throttled", 0),
                throttled_seconds=st.get("throttled_time", st.get("throttled_usec", 0) * 1000) / 1e9,
                processes=[{"pid": p, "cmdline": system.cmdline(p)} for p in pids],
            ))
    orphans = sorted((set(system.netns_list(prefix)) - known_ns) | {f"cgroup:{c}" for c in set(driver.list(prefix)) - known_cg})
    problems = verify(state) if state is not None and state.complete else []
    return ClusterStatus(
        cluster=cluster, up=bool(state and state.complete and not problems), state_file=str(state_path(cluster)),
        hosts=hosts, total_cpu_share=state.total_cpu_share if state else 0.0,
        machine_cores=state.machine_cores if state else system.machine_cores(),
        oversubscribed=bool(state and state.oversubscribed), problems=problems, orphans=orphans,
        calibration=dict(state.calibration) if state else {}, notes=list(state.notes) if state else [],
    )


# ---- running things on hosts -------------------------------------------------------------------

def host_command(state: ClusterState, host_name: str, argv: list[str]) -> list[str]:
    """The full argv that runs ``argv`` on a host: in its network namespace and its CPU cgroup.

    ``python -m srifty.cluster.enter`` writes its own pid into the host's cgroup (children
    inherit it) and then execs ``ip netns exec <namespace> argv...``; the cgroup is joined
    first because ``ip netns exec`` remounts /sys, hiding the cgroup file system.
    """
    h = state.host(host_name)
    return [sys.executable, "-m", "srifty.cluster.enter", "--cgroup", str(state.cgroup_path(h)),
            "--netns", h.namespace, "--", *argv]


def host_address(state: ClusterState, host_name: str) -> str:
    """The host's IPv4 address on the emulated network."""
    return state.host(host_name).address


def host_ifname(state: ClusterState, host_name: str) -> str:
    """The host's interface name inside its namespace (for GLOO_SOCKET_IFNAME)."""
    return state.host(host_name).ifname


def master_address(state: ClusterState) -> str:
    """Address for MASTER_ADDR / the rendezvous endpoint: the first host's (run rank 0 there)."""
    return state.hosts[0].address


def host_env(state: ClusterState, host_name: str) -> dict[str, str]:
    """Environment variables to add for a process on this host (merge into os.environ)."""
    h = state.host(host_name)
    threads = max(1, math.ceil(h.cpu_share / h.workers))
    env = {
        "GLOO_SOCKET_IFNAME": h.ifname,
        "TP_SOCKET_IFNAME": h.ifname,
        "OMP_NUM_THREADS": str(threads),
        "SRIFTY_EMU_CLUSTER": state.cluster,
        "SRIFTY_EMU_HOST": h.name,
        "SRIFTY_EMU_TYPE": h.type_name,
    }
    cal = state.calibration.get(h.type_name)
    if cal is not None:
        env["SRIFTY_EMU_CPU_FACTOR"] = f"{cal.factor:.4f}"
    return env


def run_on_host(state: ClusterState, host_name: str, argv: list[str],
                env: dict[str, str] | None = None, **popen_kwargs: Any) -> subprocess.Popen[Any]:
    """Start ``argv`` on a host (convenience over :func:`host_command` and :func:`host_env`)."""
    full_env = {**os.environ, **host_env(state, host_name), **(env or {})}
    return subprocess.Popen(host_command(state, host_name, argv), env=full_env, **popen_kwargs)

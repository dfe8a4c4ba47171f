"""The emulated cluster's lifecycle: plan the hosts, bring them up, check them, take them down.

``up`` records the planned :class:`~srifty.cluster.state.ClusterState` first, then makes the
switch namespace with its bridge and, per host, a namespace joined to the bridge by a veth, its
address, the tbf shaping of its link (:mod:`srifty.cluster.shaping`) and its CPU quota (a cgroup,
through :class:`srifty.cluster.system.CgroupDriver`). ``verify`` compares the system with the
state; ``down`` removes everything the state names and sweeps whatever carries the cluster's
prefix, so it also cleans up after a crash or a lost state file.
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from srifty.cluster import system
from srifty.cluster.shaping import _addresses, _qdisc, _tbf
from srifty.cluster.spec import ClusterSpec
from srifty.cluster.state import (BRIDGE, CFS_PERIOD_US, DEFAULT_CLUSTER, IFNAME, PREFIX, ClusterState, Host,
                                  _check_cluster_name, _locked, _write_state, load_state, state_path)
from srifty.errors import SriftyError

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

"""What exists now of an emulated cluster: per host its namespace, addresses, shaping both
ways, CPU quota and throttling, and live processes; problems against the state; leftovers.

Read-only: it reports what ``srifty cluster status`` prints and changes nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from srifty.cluster import system
from srifty.cluster.lifecycle import verify
from srifty.cluster.shaping import _addresses, _fmt_qdisc, _qdisc
from srifty.cluster.state import DEFAULT_CLUSTER, PREFIX, CpuCalibration, _check_cluster_name, load_state, state_path


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

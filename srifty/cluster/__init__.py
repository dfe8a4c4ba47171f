"""The emulated cluster: several "hosts" on one Linux machine, each a network namespace with
its own shaped link (tc tbf, both directions) and CPU quota (cgroup), joined by a bridge in a
switch namespace. Needs root. No torch import here.

Typical use (the profiler's emulated backend)::

    from srifty import cluster
    spec = cluster.load_spec("configs/emulated.yaml")
    state = cluster.up(spec, [("emu.medium", 2), ("emu.small", 1)])
    for rank, host in enumerate(state.hosts):
        argv = cluster.host_command(state, host.name, ["torchrun", ..., f"--master-addr={cluster.master_address(state)}"])
        env = {**os.environ, **cluster.host_env(state, host.name)}   # GLOO_SOCKET_IFNAME etc.
        subprocess.Popen(argv, env=env)
    ...
    cluster.down()
"""

from srifty.cluster.calibrate import calibrate, measure
from srifty.cluster.core import (
    DEFAULT_CLUSTER,
    ClusterState,
    ClusterStatus,
    CpuCalibration,
    DownReport,
    Host,
    HostStatus,
    down,
    host_address,
    host_command,
    host_env,
    host_ifname,
    load_state,
    master_address,
    plan_hosts,
    require_state,
    run_on_host,
    state_path,
    status,
    up,
    verify,
)
from srifty.cluster.spec import ClusterSpec, HostType, load_spec, parse_hosts, parse_spec

__all__ = [
    "DEFAULT_CLUSTER", "ClusterSpec", "ClusterState", "ClusterStatus", "CpuCalibration", "DownReport", "Host",
    "HostStatus", "HostType", "calibrate", "down", "host_address", "host_command", "host_env", "host_ifname",
    "load_spec", "load_state", "master_address", "measure", "parse_hosts", "parse_spec", "plan_hosts",
    "require_state", "run_on_host", "state_path", "status", "up", "verify",
]

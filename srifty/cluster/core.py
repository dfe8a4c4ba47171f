"""Bring the emulated cluster up and down, report it, and run commands on its hosts.

Layout (nothing is added to the root network namespace)::

    netns srifty-<cluster>-switch       bridge br0 (no address, no routes), ports p0, p1, ...
       p<i>  <== veth ==>  emu0         in netns srifty-<cluster>-<host>, address from the subnet
    tbf on p<i> (switch -> host) and on emu0 (host -> switch): the host's link rate both ways
    cgroup <cpu root>/srifty-<cluster>-<host>: the host's CPU quota

Every resource carries the ``srifty-<cluster>-`` prefix, so :func:`down` can sweep what a
crashed ``up`` left behind even without the state file.

This module gathers the cluster's API from the modules that hold it:

- ``state``: the names, the recorded :class:`ClusterState` (hosts, CPU calibration) and its
  state file (lock, atomic write, load);
- ``lifecycle``: planning the hosts, ``up``, ``verify``, ``down``;
- ``shaping``: the tc tbf on each host's link, and reading back a link's qdisc and addresses;
- ``inventory``: ``status``, what exists now;
- ``run``: running a command on a host (argv, environment, addresses).

The CPU quotas themselves are cgroups, made and read by :class:`srifty.cluster.system.CgroupDriver`.
"""

from __future__ import annotations

from srifty.cluster import system
from srifty.cluster.inventory import ClusterStatus, HostStatus, status
from srifty.cluster.lifecycle import DownReport, down, plan_hosts, up, verify
from srifty.cluster.run import host_address, host_command, host_env, host_ifname, master_address, run_on_host
from srifty.cluster.shaping import TBF_LATENCY_MS, tbf_burst_bytes
from srifty.cluster.state import (BRIDGE, CFS_PERIOD_US, DEFAULT_CLUSTER, IFNAME, PREFIX, STATE_SCHEMA, ClusterState,
                                  CpuCalibration, Host, _locked, _write_state, load_state, require_state, state_dir,
                                  state_path)

__all__ = [
    "BRIDGE", "CFS_PERIOD_US", "DEFAULT_CLUSTER", "IFNAME", "PREFIX", "STATE_SCHEMA", "TBF_LATENCY_MS",
    "ClusterState", "ClusterStatus", "CpuCalibration", "DownReport", "Host", "HostStatus", "_locked",
    "_write_state", "down", "host_address", "host_command", "host_env", "host_ifname", "load_state",
    "master_address", "plan_hosts", "require_state", "run_on_host", "state_dir", "state_path", "status",
    "system", "tbf_burst_bytes", "up", "verify",
]

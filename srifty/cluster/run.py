"""Running things on the hosts of an up emulated cluster: the argv that enters a host's
network namespace and CPU cgroup, the environment a process there needs, and the addresses
that torchrun's rendezvous uses.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from typing import Any

from srifty.cluster.state import ClusterState


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

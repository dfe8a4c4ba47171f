"""The ``emulated`` profiling backend: DDP across emulated hosts on this machine.

``srifty profile SCRIPT --backend emulated --hosts emu.medium:2,emu.small:1`` brings up
an emulated cluster of its own (cluster name ``prof``, or ``$SRIFTY_PROFILE_CLUSTER``, so
a cluster the user brought up with ``srifty cluster up`` is left alone), starts one torchrun agent per host inside the
host's network namespace and CPU cgroup (static rendezvous on the first host's address,
gloo bound to the host's shaped interface), and tears the cluster down afterwards, on
every exit path. The profile records the hosts' types as instance types, their CPU
shares, link rates and measured CPU factors.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections import Counter
from typing import Any, Sequence

from srifty import hostinfo
from srifty.errors import SriftyError
from srifty.profiling.launcher import (
    LaunchPlan,
    ProfileRequest,
    ProfilingBackend,
    ProgressFn,
    WorkerCommand,
    worker_env,
)

PROFILING_CLUSTER = "prof"
RDZV_PORT = 29400


def type_runs(type_names: Sequence[str]) -> list[tuple[str, int]]:
    """Node types in order -> runs of equal types: ``[a, a, b]`` -> ``[(a, 2), (b, 1)]``."""
    return [(t, len(list(g))) for t, g in itertools.groupby(type_names)]


def config_string(type_names: Sequence[str]) -> str:
    """Node types in order -> the config syntax, e.g. ``2xemu.medium+1xemu.small``."""
    return "+".join(f"{n}x{t}" for t, n in type_runs(type_names))


def hosts_arg(type_names: Sequence[str]) -> str:
    """Node types in order -> the ``--hosts`` syntax, e.g. ``emu.medium:2,emu.small:1``."""
    return ",".join(f"{t}:{n}" for t, n in type_runs(type_names))


class EmulatedBackend(ProfilingBackend):
    """Workers on emulated hosts (network namespaces + tc + cgroup CPU quotas)."""

    name = "emulated"

    def __init__(self, cluster_name: str | None = None, keep_cluster: bool = False) -> None:
        self.cluster_name = cluster_name or os.environ.get("SRIFTY_PROFILE_CLUSTER", PROFILING_CLUSTER)
        self.keep_cluster = keep_cluster
        self.state: Any = None

    def _spec_and_hosts(self, request: ProfileRequest) -> tuple[Any, list[tuple[str, int]]]:
        from srifty import cluster

        if not request.hosts:
            raise SriftyError(
                "--backend emulated needs --hosts, e.g. --hosts emu.medium:2,emu.small:1.",
                f"Host types are listed in {request.spec}.",
            )
        spec = cluster.load_spec(request.spec)
        hosts = cluster.parse_hosts(request.hosts)
        if request.collectives:
            workers = sum(spec.host_type(t).workers * n for t, n in hosts)
            if workers < 2:
                raise SriftyError(f"--collectives across {request.hosts} would be an allreduce of one worker.",
                                  "Give at least two hosts, e.g. --hosts emu.small:2.")
        return spec, hosts

    def plan(self, request: ProfileRequest, run_dir: str) -> LaunchPlan:
        from srifty import cluster

        spec, wanted = self._spec_and_hosts(request)
        if self.state is not None:
            hosts = self.state.hosts
            wrap = lambda h, argv: cluster.host_command(self.state, h.name, argv)  # noqa: E731
            host_env = lambda h: cluster.host_env(self.state, h.name)  # noqa: E731
        else:  # dry run: names and addresses as `up` would make them, nothing created
            hosts = cluster.plan_hosts(spec, wanted, self.cluster_name)
            wrap = lambda h, argv: [sys.executable, "-m", "srifty.cluster.enter", "--cgroup",  # noqa: E731
                                    f"<cgroup-root>/{h.cgroup}", "--netns", h.namespace, "--", *argv]
            host_env = lambda h: {"GLOO_SOCKET_IFNAME": h.ifname, "SRIFTY_EMU_HOST": h.name}  # noqa: E731
        master = hosts[0].address
        commands = []
        for rank, h in enumerate(hosts):
            torchrun = [
                sys.executable, "-m", "torch.distributed.run",
                "--nnodes", str(len(hosts)), "--node-rank", str(rank), "--nproc-per-node", str(h.workers),
                "--master-addr", master, "--master-port", str(RDZV_PORT), "--max-restarts", "0",
            ]
            if request.collectives:
                argv = [*torchrun, "-m", "srifty.profiling.collectives"]
            else:
                argv = [*torchrun, "-m", "srifty.profiling.worker", *request.worker_argv()]
            env = {
                **worker_env(request, run_dir),
                **host_env(h),
                "SRIFTY_HOST_LABEL": h.name,
                "SRIFTY_INSTANCE_TYPES": ",".join(sorted({x.type_name for x in hosts})),
            }
            if request.batch_by_type.get(h.type_name):
                env["SRIFTY_BATCH_SIZE"] = str(request.batch_by_type[h.type_name])
            full = wrap(h, argv)
            commands.append(WorkerCommand(argv=full, env=env, host=h.name))
        notes = [f"emulated cluster {self.cluster_name!r} from {request.spec}: "
                 + ", ".join(f"{h.name}={h.type_name}@{h.address}" for h in hosts)]
        return LaunchPlan(self.name, commands, run_dir, notes)

    def cluster_block(self, request: ProfileRequest, world_size: int, device: str) -> dict[str, Any]:
        state = self.state
        machine = hostinfo.host_spec()
        hosts = []
        for h in state.hosts:
            cal = state.calibration.get(h.type_name)
            ht = state.host_types[h.type_name]
            hosts.append({
                "name": h.name,
                "instance_type": h.type_name,
                "workers": h.workers,
                "spec": {
                    **machine,
                    "emulated": True,
                    "address": h.address,
                    "cpu_share": h.cpu_share,
                    "bandwidth_mbit": h.bandwidth_mbit,
                    "latency_ms": getattr(ht, "latency_ms", 0),
                    "cpu_factor": cal.factor if cal else None,
                },
            })
        types = [h.type_name for h in state.hosts]
        return {
            "launcher": self.name,
            "backend": "gloo",
            "device": "cpu",
            "world_size": sum(h.workers for h in state.hosts),
            "nodes": len(state.hosts),
            "workers_per_node": [h.workers for h in state.hosts],
            "instance_types": sorted(set(types)),
            "config": config_string(types),
            "hosts": hosts,
            "network": {
                "topology": "star (one bridge), each host's link shaped with tc tbf in both directions",
                "bottleneck_mbit": min(h.bandwidth_mbit for h in state.hosts),
                "total_cpu_share": state.total_cpu_share,
                "machine_cores": state.machine_cores,
                "oversubscribed": state.oversubscribed,
                "type_counts": dict(Counter(types)),
            },
        }

    def profile(self, request: ProfileRequest, out: str | None, progress: ProgressFn | None = None) -> dict[str, Any]:
        from srifty import cluster

        request.validate()
        spec, wanted = self._spec_and_hosts(request)
        self.state = cluster.up(spec, wanted, cluster=self.cluster_name, replace=True)
        try:
            if request.calibrate and not self.state.calibration:
                self.state = cluster.calibrate(self.state)
            doc = super().profile(request, out, progress)
            return doc
        finally:
            if not self.keep_cluster:
                cluster.down(self.cluster_name)

"""Measured collectives: emulated allreduce sweeps (the emulated links' fit) and allreduces
across nodes of real instance types (their network's fit)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from srifty import profile as profile_mod
from srifty.features.links import mixed_ring_slowest_hosts


@dataclass(frozen=True)
class CollectivePoint:
    """One allreduce measurement across emulated hosts: bytes, world, configured bottleneck rate."""

    config: str
    nbytes: float
    world: int
    bottleneck_mbit: float
    ms: float
    # hosts at the slowest configured rate when the ring mixes rates; 0 when every link has one rate
    slowest_hosts: int = 0



def load_collectives(paths: Sequence[str | Path]) -> list[CollectivePoint]:
    """Allreduce sweeps across emulated hosts (``cluster.launcher == 'emulated'``, 2+ nodes)."""
    out = []
    for p in profile_mod.load_many(list(paths)):
        if p.kind != "collectives":
            continue
        cl = p.doc.get("cluster") or {}
        rates = [(h.get("spec") or {}).get("bandwidth_mbit") for h in cl.get("hosts") or []]
        if cl.get("launcher") != "emulated" or not rates or not all(rates):
            continue
        config = cl.get("config") or "+".join(f"1x{h.get('instance_type')}" for h in cl.get("hosts") or [])
        slowest = mixed_ring_slowest_hosts(rates)
        for c in p.doc.get("collectives") or []:
            if c.get("op") == "allreduce" and int(c.get("nodes") or 1) >= 2 and c.get("median_ms"):
                out.append(CollectivePoint(config, float(c["bytes"]), int(c["world_size"]), float(min(rates)),
                                           float(c["median_ms"]), slowest))
    return out


@dataclass(frozen=True)
class AllreduceRow:
    """One measured allreduce: ``nodes`` × ``gpus_per_node`` GPUs of ``instance_type``."""

    instance_type: str
    nodes: int
    gpus_per_node: int
    nbytes: float
    us: float
    # NCCL ran over TCP sockets whatever the type's network (srifty's EC2 backend attaches no EFA
    # interface): on an EFA type such a row measures its fallback, not its EFA network
    over_tcp: bool = False
    # the nodes sat in a cluster placement group (AWS: 10 Gbit/s per TCP flow, not 5)
    placement_group: bool = False


def load_allreduce_rows(paths: Sequence[str | Path], min_bytes: float = 1 << 20) -> list[AllreduceRow]:
    """Allreduces of collectives profiles of one real instance type, messages of ``min_bytes`` or
    more: across 2+ nodes (``srifty profile --collectives`` on the EC2 backend, or a cluster's
    nccl-tests log read by ``srifty import-nccl``) they measure the type's network; within one node
    of several GPUs, its link between them (not on CPU workers, which allreduce through memory).
    The EC2 backend's runs are over TCP (it attaches no EFA interface; a profile that does not say
    so is one of its), in a placement group where the profile says so; within a node no run
    crosses the network."""
    out = []
    for p in profile_mod.load_many(list(paths)):
        if p.kind != "collectives":
            continue
        cl = p.doc.get("cluster") or {}
        types = set(cl.get("instance_types") or [])
        if cl.get("launcher") == "emulated" or len(types) != 1:
            continue
        (itype,) = types
        network = cl.get("network") or {}
        over_tcp = network.get("transport", "tcp" if cl.get("launcher") == "ec2" else None) == "tcp"
        grouped = network.get("placement_group") is True
        for c in p.doc.get("collectives") or []:
            nodes = int(c.get("nodes") or 1)
            within = int(c["world_size"]) >= 2 and cl.get("device") != "cpu"
            if c.get("op") == "allreduce" and (nodes >= 2 or within) and c.get("median_ms") \
                    and float(c["bytes"]) >= min_bytes:
                wpn = c.get("workers_per_node") or [int(c["world_size"]) // nodes]
                out.append(AllreduceRow(itype, nodes, int(max(wpn)), float(c["bytes"]),
                                        float(c["median_ms"]) * 1e3, over_tcp and nodes >= 2, grouped))
    return out


# --------------------------------------------------------------------------- hardware

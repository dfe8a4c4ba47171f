"""The backend on the instance (*node mode*, ``SRIFTY_EC2_NODE=1``): this node's torchrun agent,
with c10d rendezvous on the first node's private IP, and the cluster block of its profile.

The launcher writes ``rendezvous.json`` (:func:`rendezvous_doc`) to S3; the user data reads it
and exports what this node needs (``SRIFTY_EC2_NODE_RANK``, ``SRIFTY_EC2_MASTER``, ...), which
is all node mode reads.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from srifty import hostinfo
from srifty.profiling.launcher import LaunchPlan, ProfileRequest, WorkerCommand, worker_env

RDZV_PORT = 29400
NODE_ENV = "SRIFTY_EC2_NODE"


def node_mode() -> bool:
    return os.environ.get(NODE_ENV) == "1"


def rendezvous_doc(ips: list[str], run_id: str) -> dict[str, Any]:
    return {"master_addr": ips[0], "master_port": RDZV_PORT, "node_ips": ips, "rdzv_id": run_id}


def node_plan(name: str, request: ProfileRequest, run_dir: str) -> LaunchPlan:
    """This node's torchrun agent, from what the user data exported."""
    nnodes = int(os.environ.get("SRIFTY_EC2_NNODES", "1"))
    rank = int(os.environ.get("SRIFTY_EC2_NODE_RANK", "0"))
    master = os.environ.get("SRIFTY_EC2_MASTER", "127.0.0.1")
    rdzv_id = os.environ.get("SRIFTY_EC2_RDZV_ID", "srifty")
    torchrun = [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", str(nnodes), "--node-rank", str(rank), "--nproc-per-node", str(request.nproc),
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{master}:{RDZV_PORT}", "--rdzv-id", rdzv_id,
        "--max-restarts", "0",
    ]
    if request.collectives:
        argv = [*torchrun, "-m", "srifty.profiling.collectives"]
    else:
        argv = [*torchrun, "-m", "srifty.profiling.worker", *request.worker_argv()]
    env = {**worker_env(request, run_dir), "SRIFTY_INSTANCE_TYPES": request.instance_type}
    return LaunchPlan(name, [WorkerCommand(argv, env)], run_dir,
                      [f"ec2 node {rank} of {nnodes}, c10d rendezvous on {master}:{RDZV_PORT}"])


def node_cluster_block(name: str, request: ProfileRequest, world_size: int, device: str) -> dict[str, Any]:
    """The profile's ``cluster`` block on a node: every node's address, this one's full host spec."""
    nnodes = int(os.environ.get("SRIFTY_EC2_NNODES", "1"))
    ips = [x for x in os.environ.get("SRIFTY_EC2_NODE_IPS", "").split(",") if x] or ["localhost"]
    spec = hostinfo.host_spec()
    per_node = max(1, world_size // max(nnodes, 1))
    hosts = [{"name": ip, "instance_type": request.instance_type, "workers": per_node,
              "spec": spec if i == int(os.environ.get("SRIFTY_EC2_NODE_RANK", "0")) else {"address": ip}}
             for i, ip in enumerate(ips)]
    return {
        "launcher": name,
        "backend": "nccl" if device == "cuda" else "gloo",
        "device": device,
        "world_size": world_size,
        "nodes": nnodes,
        "workers_per_node": [per_node] * nnodes,
        "instance_types": [request.instance_type],
        "hosts": hosts,
        "network": {"rendezvous": f"c10d on {ips[0]}:{RDZV_PORT}",
                    "region": os.environ.get("SRIFTY_EC2_REGION"),
                    "market": os.environ.get("SRIFTY_EC2_MARKET"),
                    # the instances get no EFA interface, so NCCL runs over TCP sockets on any type
                    "transport": "tcp",
                    "placement_group": os.environ.get("SRIFTY_EC2_PLACEMENT_GROUP") == "1"},
    }

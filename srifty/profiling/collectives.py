"""Allreduce microbenchmark, run in every rank by torchrun: ``-m srifty.profiling.collectives``.

Message sizes double from ``SRIFTY_COLL_MIN_BYTES`` (default 4 KiB) to
``SRIFTY_COLL_MAX_BYTES`` (default 64 MiB). For each size: two warm-up allreduces, then
``SRIFTY_COLL_REPEATS`` timed ones, each started after a barrier and timed as the
slowest rank's duration (an allreduce is done when every rank has its result). Rank 0
writes ``collectives_rank0.json`` after every size, so an interrupted sweep keeps the
sizes it finished. Bandwidths follow nccl-tests: algbw = bytes / time, busbw = algbw *
2 (n - 1) / n.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback
from typing import Any

import torch
import torch.distributed as dist

from srifty import stats


def _write(out_dir: str, rank: int, payload: dict[str, Any]) -> None:
    path = os.path.join(out_dir, f"collectives_rank{rank}.json")
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(payload, fh)
    os.replace(tmp, path)


def sizes(min_bytes: int, max_bytes: int) -> list[int]:
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= 2
    if out[-1] != max_bytes:
        out.append(max_bytes)
    return out


def main() -> int:
    out_dir = os.environ["SRIFTY_PROFILE_DIR"]
    min_b = int(os.environ.get("SRIFTY_COLL_MIN_BYTES", str(4 * 1024)))
    max_b = int(os.environ.get("SRIFTY_COLL_MAX_BYTES", str(64 * 1024 * 1024)))
    repeats = int(os.environ.get("SRIFTY_COLL_REPEATS", "10"))
    use_cuda = torch.cuda.is_available() and os.environ.get("SRIFTY_DEVICE", "auto") != "cpu"
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    host_labels = [None] * world
    dist.all_gather_object(host_labels, os.environ.get("SRIFTY_HOST_LABEL") or socket.gethostname())
    nodes = len(set(host_labels))
    per_node = [host_labels.count(h) for h in dict.fromkeys(host_labels)]
    payload: dict[str, Any] = {"rank": rank, "world_size": world, "results": [], "error": None}
    try:
        for nbytes in sizes(min_b, max_b):
            numel = max(1, nbytes // 4)
            buf = torch.ones(numel, dtype=torch.float32, device=device)
            for _ in range(2):
                dist.all_reduce(buf)
            times = []
            for _ in range(repeats):
                dist.barrier()
                if use_cuda:
                    torch.cuda.synchronize()
                t = time.perf_counter()
                dist.all_reduce(buf)
                if use_cuda:
                    torch.cuda.synchronize()
                elapsed = torch.tensor([time.perf_counter() - t], dtype=torch.float64, device=device)
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
                times.append(float(elapsed.item()) * 1e3)
            med = stats.median(times)
            algbw = numel * 4 / (med / 1e3) / 1e9
            payload["results"].append(
                {
                    "op": "allreduce",
                    "world_size": world,
                    "nodes": nodes,
                    "workers_per_node": per_node,
                    "instance_types": sorted(set(os.environ.get("SRIFTY_INSTANCE_TYPES", "").split(",")) - {""}),
                    "bytes": numel * 4,
                    "dtype": "float32",
                    "times_ms": times,
                    "median_ms": med,
                    "p10_ms": stats.quantile(times, 0.1),
                    "p90_ms": stats.quantile(times, 0.9),
                    "algbw_gbps": algbw * 8,
                    "busbw_gbps": algbw * 8 * 2 * (world - 1) / world,
                }
            )
            if rank == 0:
                _write(out_dir, rank, payload)
    except BaseException as exc:
        payload["error"] = {"type": type(exc).__name__, "message": str(exc)[:2000], "traceback": traceback.format_exc()[-4000:]}
        _write(out_dir, rank, payload)
        raise
    _write(out_dir, rank, payload)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

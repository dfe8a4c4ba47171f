"""The local backend (:class:`LocalBackend`): every worker on this machine, started by torchrun
(``--standalone`` style, on a free local port), after checking that no two workers would share
a GPU (:func:`check_gpu_count`, :func:`local_gpu_count`).
"""

from __future__ import annotations

import socket
import sys

from srifty.errors import SriftyError
from srifty.profiling.backend import ProfilingBackend, local_cuda
from srifty.profiling.request import LaunchPlan, ProfileRequest, WorkerCommand, worker_env


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check_gpu_count(request: ProfileRequest, gpus: int) -> None:
    """Refuse a local run that would put two workers on one GPU (NCCL stops on a duplicate
    GPU); ``gpus`` is the number of CUDA GPUs the workers would use (0: CPU workers)."""
    if gpus <= 0:
        return
    workers = max(request.world_sizes) if request.collectives and request.world_sizes else request.nproc
    if workers <= gpus:
        return
    flag = "--world-sizes" if request.collectives and request.world_sizes else "--nproc"
    if request.collectives and gpus < 2:
        fix = "The allreduce sweep needs two GPUs or more: run it where there are (--backend ec2)"
    else:
        fix = f"Use {flag} {gpus} or fewer here (more GPUs: --backend ec2)"
    raise SriftyError(
        f"{flag} asks for {workers} workers on this machine, but it has {gpus} CUDA GPU"
        f"{'s' if gpus > 1 else ''}; NCCL runs one worker per GPU.",
        f"{fix}, or add --device cpu to run CPU workers with gloo.",
    )


def local_gpu_count(device: str) -> int:
    """CUDA GPUs the local workers will use: none with ``--device cpu`` or without CUDA."""
    if not local_cuda(device):
        return 0
    import torch

    return torch.cuda.device_count()


class LocalBackend(ProfilingBackend):
    """All workers on this machine, started by torchrun (``--standalone``)."""

    name = "local"

    def preflight(self, request: ProfileRequest) -> None:
        check_gpu_count(request, local_gpu_count(request.device))

    def plan(self, request: ProfileRequest, run_dir: str) -> LaunchPlan:
        port = _free_port() if run_dir != "<run-dir>" else 29500
        torchrun = [
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes", "1", "--nproc-per-node", str(request.nproc),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
            "--max-restarts", "0",
        ]
        env = worker_env(request, run_dir)
        if request.collectives:
            argv = [*torchrun, "-m", "srifty.profiling.collectives"]
        else:
            argv = [*torchrun, "-m", "srifty.profiling.worker", *request.worker_argv()]
        return LaunchPlan(self.name, [WorkerCommand(argv, env)], run_dir)


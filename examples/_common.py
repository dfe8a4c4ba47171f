"""Shared set-up for the example DDP scripts (plain torch, nothing srifty-specific).

Each example is an ordinary torchrun script: it reads its per-worker batch size from
``--batch-size`` or, when that is not given, from ``SRIFTY_BATCH_SIZE`` (the variable
``srifty profile --batch-size`` sets), initialises the process group (NCCL on GPU,
gloo on CPU), wraps the model in DistributedDataParallel and trains on synthetic data.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist


def parse_args(description: str, default_batch: int, default_steps: int = 100000,
               models: tuple[str, ...] = ()) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    if models:
        parser.add_argument("--model", choices=models, required=True, help="which model to train")
    env_batch = os.environ.get("SRIFTY_BATCH_SIZE")
    parser.add_argument("--batch-size", type=int, default=int(env_batch) if env_batch else default_batch,
                        help="per-worker batch size (default: $SRIFTY_BATCH_SIZE or %(default)s)")
    parser.add_argument("--steps", type=int, default=default_steps, help="training iterations to run")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def setup() -> tuple[torch.device, int, int]:
    """Initialise torch.distributed from torchrun's environment; returns (device, rank, world)."""
    use_cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if use_cuda:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank), rank, world
    return torch.device("cpu"), rank, world


def cleanup() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()

"""PyTorch's DDP tutorial's entry point: the script starts its own workers with
torch.multiprocessing.spawn and sets up their process group itself. Under torchrun, with an
argument: ``torchrun``, the change srifty asks for (docs/profiling.md, *A script that starts its
own workers*): the worker function runs once, with torchrun's rank and world size, and the
rendezvous is left to torchrun; ``own-port``, the same but still setting MASTER_ADDR/MASTER_PORT;
``alone``, a process group of rank 0 of 1 in every worker."""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

MODE = sys.argv[1] if "LOCAL_RANK" in os.environ and sys.argv[1:] else "spawn"


def setup(rank, world_size):
    if MODE in ("spawn", "own-port"):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def demo_basic(rank, world_size):
    setup(rank, world_size)
    model = DDP(nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 5)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    for _ in range(100000):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(torch.randn(20, 10)), torch.randn(20, 5)).backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    if MODE == "spawn":
        mp.spawn(demo_basic, args=(2,), nprocs=2, join=True)
    elif MODE == "alone":
        dist.init_process_group("gloo", rank=0, world_size=1)
    else:
        demo_basic(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))

"""PyTorch's DDP tutorial's entry point: the script starts its own workers with
torch.multiprocessing.spawn and sets up their process group itself. With the argument
``torchrun``, the change srifty asks for (docs/profiling.md, *A script that starts its own
workers*): where torchrun started the script, it runs the worker function once, with torchrun's
rank and world size, and leaves the rendezvous to torchrun."""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

UNDER_TORCHRUN = "LOCAL_RANK" in os.environ and sys.argv[1:] == ["torchrun"]


def setup(rank, world_size):
    if not UNDER_TORCHRUN:
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
    if UNDER_TORCHRUN:
        demo_basic(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    else:
        mp.spawn(demo_basic, args=(2,), nprocs=2, join=True)

"""A tiny DDP training setup shared by the test scripts (gloo, CPU)."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def tiny_ddp(width: int = 256, bucket_cap_mb: float | None = None):
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)),
                bucket_cap_mb=bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = int(os.environ.get("SRIFTY_BATCH_SIZE", "32"))
    return model, opt, batch, dist.get_rank()


def train_step(model, opt, batch):
    x, y = torch.randn(batch, 64), torch.randint(0, 10, (batch,))
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss

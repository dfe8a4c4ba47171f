"""Training with FSDP2 (or FSDP, given `fsdp1`) set up in another module (_shard), so this script's
source names no FSDP: a few steps on gloo, then done."""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

from _shard import shard

dist.init_process_group("gloo")
model = shard(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)), version=1 if "fsdp1" in sys.argv else 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(20):
    opt.zero_grad()
    model(torch.randn(8, 32)).sum().backward()
    opt.step()
dist.destroy_process_group()

"""Gradient accumulation: four forward-backward passes a step, the first three under no_sync
(with --sync-every-pass, none: every pass allreduces its gradients)."""
import contextlib
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
micro = int(os.environ.get("SRIFTY_BATCH_SIZE", "16"))
model = DDP(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss = nn.CrossEntropyLoss()
PASSES = 4
for _ in range(100000):
    opt.zero_grad()
    for k in range(PASSES):
        x, y = torch.randn(micro, 64), torch.randint(0, 10, (micro,))
        quiet = k < PASSES - 1 and "--sync-every-pass" not in sys.argv
        with model.no_sync() if quiet else contextlib.nullcontext():
            (loss(model(x), y) / PASSES).backward()
    opt.step()

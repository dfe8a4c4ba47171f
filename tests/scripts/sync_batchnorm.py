"""A small CNN whose batch norm is synchronised across workers (nn.SyncBatchNorm, as detection
and segmentation training use), trained with DDP on the CPU, where PyTorch's SyncBatchNorm alone
would raise."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 16, 3), nn.BatchNorm2d(16),
                    nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
model = DDP(nn.SyncBatchNorm.convert_sync_batchnorm(net))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
batch = int(os.environ.get("SRIFTY_BATCH_SIZE", "16"))
for i in range(100000):
    opt.zero_grad()
    nn.functional.cross_entropy(model(torch.randn(batch, 3, 16, 16)), torch.randint(0, 10, (batch,))).backward()
    opt.step()

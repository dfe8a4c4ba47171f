"""A tiny DDP job whose optimizer is torch's ZeroRedundancyOptimizer (ZeRO stage 1): each worker
updates its shard of the parameters, then broadcasts it to the others."""
import torch
from _tiny import tiny_ddp, train_step
from torch.distributed.optim import ZeroRedundancyOptimizer

model, _, batch, rank = tiny_ddp()
opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
for i in range(100000):
    train_step(model, opt, batch)

"""A tiny DDP job whose model runs through torch.compile (the aot_eager backend: no C++ compiler needed)."""
import torch
import torch.nn as nn
from _tiny import tiny_ddp

model, opt, batch, rank = tiny_ddp()
step = torch.compile(model, backend="aot_eager")
for i in range(100000):
    opt.zero_grad()
    nn.functional.cross_entropy(step(torch.randn(batch, 64)), torch.randint(0, 10, (batch,))).backward()
    opt.step()

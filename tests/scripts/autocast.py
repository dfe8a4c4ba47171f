"""A tiny DDP job whose forward runs under autocast (bfloat16 on CPU), as mixed-precision training does."""
import torch
import torch.nn as nn
from _tiny import tiny_ddp

model, opt, batch, rank = tiny_ddp()
for i in range(100000):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(torch.randn(batch, 64))
    nn.functional.cross_entropy(out.float(), torch.randint(0, 10, (batch,))).backward()
    opt.step()

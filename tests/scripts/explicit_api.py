"""Uses srifty's explicit API: two forward/backward micro-batches per iteration, marked by srifty.step()."""
import srifty
import torch.nn as nn
import torch
from _tiny import tiny_ddp

model, opt, batch, rank = tiny_ddp()
for i in range(100000):
    opt.zero_grad()
    with model.no_sync():
        nn.functional.cross_entropy(model(torch.randn(batch, 64)), torch.randint(0, 10, (batch,))).backward()
    nn.functional.cross_entropy(model(torch.randn(batch, 64)), torch.randint(0, 10, (batch,))).backward()
    opt.step()
    srifty.step()

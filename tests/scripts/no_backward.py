"""Only runs forward passes (evaluation loop), never backward."""
import torch
from _tiny import tiny_ddp

model, opt, batch, rank = tiny_ddp()
with torch.no_grad():
    for i in range(50):
        model(torch.randn(batch, 64))

"""Steps through a closure, as PyTorch Lightning does: ``opt.step(closure)`` runs the forward,
the loss and the backward inside the optimizer step (with --plain, the usual order instead)."""
import sys

import torch
import torch.nn as nn

from _tiny import tiny_ddp, train_step

model, opt, batch, _ = tiny_ddp(width=512)
for _ in range(100000):
    if "--plain" in sys.argv:
        train_step(model, opt, batch)
        continue
    x, y = torch.randn(batch, 64), torch.randint(0, 10, (batch,))

    def closure():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    opt.step(closure)

"""Training with torch.nn.DataParallel (one process, several devices), not DDP: a few steps, then done."""
import torch
import torch.nn as nn

model = nn.DataParallel(nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(20):
    opt.zero_grad()
    model(torch.randn(32, 64)).sum().backward()
    opt.step()

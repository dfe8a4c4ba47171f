"""A GAN's training loop: two DDP models, each with its own optimizer, stepped in turn."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
batch = int(os.environ.get("SRIFTY_BATCH_SIZE", "16"))
generator = DDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16)))
critic = DDP(nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)))
opt_g, opt_c = torch.optim.SGD(generator.parameters(), lr=0.01), torch.optim.SGD(critic.parameters(), lr=0.01)
loss = nn.BCEWithLogitsLoss()
for _ in range(100000):
    real, noise = torch.randn(batch, 16), torch.randn(batch, 8)
    opt_c.zero_grad()
    fake = generator(noise).detach()
    (loss(critic(real), torch.ones(batch, 1)) + loss(critic(fake), torch.zeros(batch, 1))).backward()
    opt_c.step()
    opt_g.zero_grad()
    loss(critic(generator(noise)), torch.ones(batch, 1)).backward()
    opt_g.step()

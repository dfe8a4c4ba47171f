"""A tiny recurrent language model fed (sequence, batch) tokens, PyTorch's default layout for an RNN:
the batch is the tokens' second dimension, not their first."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

SEQUENCE, VOCAB = 12, 50


class GruLm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.rnn = nn.GRU(16, 32)  # batch_first=False: (sequence, batch, features)
        self.out = nn.Linear(32, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.rnn(self.embed(tokens))
        return self.out(hidden)


dist.init_process_group("gloo")
torch.manual_seed(0)
batch = int(os.environ.get("SRIFTY_BATCH_SIZE", "4"))
model = DDP(GruLm())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(100000):
    tokens = torch.randint(0, VOCAB, (SEQUENCE, batch))
    opt.zero_grad()
    nn.functional.cross_entropy(model(tokens).view(-1, VOCAB), tokens.view(-1)).backward()
    opt.step()

"""Recurrent language model in the style of PyTorch's word_language_model example: an embedding,
a two-layer GRU and a linear decoder over (sequence, batch) tokens (the GRU's default layout, which
srifty reads its batch from); trained with DDP on synthetic token streams.

    torchrun --nproc-per-node 2 examples/rnn_lm.py --batch-size 64
    srifty profile examples/rnn_lm.py --nproc 2
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from _common import cleanup, parse_args, setup

VOCAB, EMBED, HIDDEN, LAYERS, SEQUENCE = 10_000, 256, 512, 2, 35


class GruLm(nn.Module):
    """10.4M parameters: the embedding 2.56M, the GRU 2.76M, the decoder 5.13M."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMBED)
        self.rnn = nn.GRU(EMBED, HIDDEN, num_layers=LAYERS, dropout=0.2)
        self.decode = nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.rnn(self.embed(tokens))
        return self.decode(hidden)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], default_batch=64)
    device, rank, world = setup()
    torch.manual_seed(args.seed + rank)
    model = DDP(GruLm().to(device), device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    stream = torch.randint(0, VOCAB, (SEQUENCE + 1, args.batch_size * 4), device=device)  # four batches, cycled
    for step in range(args.steps):
        chunk = stream[:, (step % 4) * args.batch_size:(step % 4 + 1) * args.batch_size]
        inputs, targets = chunk[:-1], chunk[1:]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs).reshape(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        optimizer.step()
    if rank == 0:
        print(f"done: {args.steps} steps, last loss {loss.item():.4f}")
    cleanup()


if __name__ == "__main__":
    main()

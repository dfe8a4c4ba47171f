"""Small GPT-style transformer language model (causal self-attention), trained with DDP.

    torchrun --nproc-per-node 2 examples/transformer_lm.py --batch-size 8
    srifty profile examples/transformer_lm.py --nproc 2
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from _common import cleanup, parse_args, setup


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """4 layers, d_model 256, 4 heads, vocabulary 8192, context 128 (about 7.4M parameters)."""

    def __init__(self, vocab: int = 8192, d_model: int = 256, n_layers: int = 4, n_heads: int = 4, context: int = 128) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(1, context, d_model))
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        mask = torch.triu(torch.full((context, context), -math.inf), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos[:, :t]
        for block in self.blocks:
            x = block(x, self.mask[:t, :t])
        return self.head(self.ln(x))


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], default_batch=8)
    device, rank, world = setup()
    torch.manual_seed(args.seed + rank)
    context, vocab = 128, 8192
    corpus = torch.randint(0, vocab, (200_000,))  # synthetic token stream
    model = DDP(TinyGPT(vocab=vocab, context=context).to(device), device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    for step in range(args.steps):
        starts = torch.randint(0, corpus.numel() - context - 1, (args.batch_size,))
        x = torch.stack([corpus[s : s + context] for s in starts.tolist()]).to(device)
        y = torch.stack([corpus[s + 1 : s + context + 1] for s in starts.tolist()]).to(device)
        optimizer.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    if rank == 0:
        print(f"done: {args.steps} steps, last loss {loss.item():.4f}")
    cleanup()


if __name__ == "__main__":
    main()

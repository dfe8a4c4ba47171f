"""Recommendation model in the DLRM style: embedding tables for sparse features, MLPs
for dense features and for the top, pairwise feature interactions; trained with DDP.

    torchrun --nproc-per-node 2 examples/mlp_recsys.py --batch-size 256
    srifty profile examples/mlp_recsys.py --nproc 2
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from _common import cleanup, parse_args, setup

TABLE_SIZES = (20_000, 10_000, 5_000, 2_000, 1_000, 500, 100, 50)
DENSE_FEATURES = 13
EMB_DIM = 32


def mlp(sizes: list[int], last_activation: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """8 embedding tables (38,650 rows x 32), bottom MLP 13-256-128-32, top MLP 60-512-256-1 (about 1.4M parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables = nn.ModuleList(nn.EmbeddingBag(n, EMB_DIM, mode="sum") for n in TABLE_SIZES)
        self.bottom = mlp([DENSE_FEATURES, 256, 128, EMB_DIM])
        n_feat = len(TABLE_SIZES) + 1
        self.top = mlp([EMB_DIM + n_feat * (n_feat - 1) // 2, 512, 256, 1], last_activation=False)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        embs = [table(sparse[:, i : i + 1]) for i, table in enumerate(self.tables)]
        feats = torch.stack([x, *embs], dim=1)  # (B, F, D)
        inter = torch.bmm(feats, feats.transpose(1, 2))
        iu = torch.triu_indices(feats.shape[1], feats.shape[1], offset=1)
        pairs = inter[:, iu[0], iu[1]]
        return self.top(torch.cat([x, pairs], dim=1)).squeeze(1)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], default_batch=256)
    device, rank, world = setup()
    torch.manual_seed(args.seed + rank)
    model = DDP(DLRM().to(device), device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.01)
    loss_fn = nn.BCEWithLogitsLoss()
    sizes = torch.tensor(TABLE_SIZES)
    for step in range(args.steps):
        dense = torch.randn(args.batch_size, DENSE_FEATURES, device=device)
        sparse = (torch.rand(args.batch_size, len(TABLE_SIZES)) * sizes).long().to(device)
        clicks = (torch.rand(args.batch_size, device=device) < 0.25).float()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(dense, sparse), clicks)
        loss.backward()
        optimizer.step()
    if rank == 0:
        print(f"done: {args.steps} steps, last loss {loss.item():.4f}")
    cleanup()


if __name__ == "__main__":
    main()

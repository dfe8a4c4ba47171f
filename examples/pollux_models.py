"""The Pollux traces' models (cifar10, imagenet, ncf) as DDP scripts on synthetic data.

    torchrun --nproc-per-node 1 examples/pollux_models.py --model cifar10 --batch-size 32
    srifty profile examples/pollux_models.py --model-name cifar10 --batch-size 32 -- --model cifar10

The architectures are those the Pollux artifact trains on g4dn.12xlarge (petuum/adaptdl,
osdi21-artifact; data/traces/PROVENANCE.md), with their parameter counts: cifar10 is the CIFAR
ResNet-18 (11,173,962), imagenet the ResNet-50 (25,557,032) on 224x224 images, ncf NeuMF-end
on MovieLens-1M (1,602,657). A CPU profile of one of them, set beside the trace's one-GPU steps,
checks the operator model on a T4 (srifty validate, ACCURACY.md). The optimizers are plain
choices (SGD with momentum for the CNNs, Adam for NCF); the artifact's adaptive batch-size
machinery (AdaptDL) is not reproduced, nor is its data loading: a few synthetic batches are
made once and cycled.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from _common import cleanup, parse_args, setup
from cnn_resnet import BasicBlock

MODELS = ("cifar10", "imagenet", "ncf")
NCF_USERS, NCF_ITEMS, NCF_FACTORS, NCF_MLP_LAYERS = 6040, 3706, 32, 3


class CifarResNet18(nn.Module):
    """ResNet-18 for 32x32 images: a 3x3 stem, no max-pool, stages of two basic blocks."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        blocks, cin = [], 64
        for i, width in enumerate((64, 128, 256, 512)):
            for j in range(2):
                blocks.append(BasicBlock(cin, width, 2 if i > 0 and j == 0 else 1))
                cin = width
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.avg_pool2d(self.blocks(self.stem(x)), 4)
        return self.head(torch.flatten(x, 1))


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = 4 * width
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.shortcut(x))


class ResNet50(nn.Module):
    """ResNet-50 for 224x224 images: a 7x7 stem and max-pool, stages of 3, 4, 6 and 3 bottlenecks."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for i, (width, depth) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
            for j in range(depth):
                blocks.append(Bottleneck(cin, width, 2 if i > 0 and j == 0 else 1))
                cin = 4 * width
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1)
        return self.head(torch.flatten(x, 1))


class NeuMF(nn.Module):
    """NeuMF-end: a GMF and an MLP branch over user and item embeddings, joined by one linear layer."""

    def __init__(self) -> None:
        super().__init__()
        mlp_dim = NCF_FACTORS * 2 ** (NCF_MLP_LAYERS - 1)
        self.user_gmf, self.item_gmf = nn.Embedding(NCF_USERS, NCF_FACTORS), nn.Embedding(NCF_ITEMS, NCF_FACTORS)
        self.user_mlp, self.item_mlp = nn.Embedding(NCF_USERS, mlp_dim), nn.Embedding(NCF_ITEMS, mlp_dim)
        layers, width = [], 2 * mlp_dim
        for _ in range(NCF_MLP_LAYERS):
            layers += [nn.Linear(width, width // 2), nn.ReLU()]
            width //= 2
        self.mlp = nn.Sequential(*layers)
        self.predict = nn.Linear(2 * NCF_FACTORS, 1)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        gmf = self.user_gmf(users) * self.item_gmf(items)
        mlp = self.mlp(torch.cat([self.user_mlp(users), self.item_mlp(items)], dim=1))
        return self.predict(torch.cat([gmf, mlp], dim=1)).squeeze(1)


def build(name: str) -> nn.Module:
    return {"cifar10": CifarResNet18, "imagenet": ResNet50, "ncf": NeuMF}[name]()


def batch(name: str, size: int, device: torch.device) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """One synthetic batch: the model's inputs and its targets."""
    if name == "ncf":
        users = torch.randint(0, NCF_USERS, (size,), device=device)
        items = torch.randint(0, NCF_ITEMS, (size,), device=device)
        return (users, items), (torch.rand(size, device=device) < 0.2).float()
    side, classes = (32, 10) if name == "cifar10" else (224, 1000)
    return (torch.randn(size, 3, side, side, device=device),), torch.randint(0, classes, (size,), device=device)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], default_batch=32, models=MODELS)
    device, rank, world = setup()
    torch.manual_seed(args.seed + rank)
    model = DDP(build(args.model).to(device), device_ids=[device.index] if device.type == "cuda" else None)
    if args.model == "ncf":
        optimizer: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        loss_fn: nn.Module = nn.BCEWithLogitsLoss()
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
        loss_fn = nn.CrossEntropyLoss()
    # a few batches made once and cycled, as from a dataset in memory: the step is the model's alone
    batches = [batch(args.model, args.batch_size, device) for _ in range(4)]
    for step in range(args.steps):
        inputs, targets = batches[step % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(*inputs), targets)
        loss.backward()
        optimizer.step()
    if rank == 0:
        print(f"done: {args.steps} steps, last loss {loss.item():.4f}")
    cleanup()


if __name__ == "__main__":
    main()

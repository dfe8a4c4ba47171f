"""Small, compute-heavy CNN on 64x64 RGB images: much work per sample, a tiny gradient; trained with DDP.

    torchrun --nproc-per-node 2 examples/conv_heavy.py --batch-size 32
    srifty profile examples/conv_heavy.py --nproc 2
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from _common import cleanup, parse_args, setup

IMAGE_SIZE = 64
NUM_CLASSES = 10


def conv_bn_relu(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class SmallConvNet(nn.Module):
    """Six 3x3 conv layers, widths 16-16 at 64x64 then 32-32-32-32 at 32x32, global average
    pooling and a 32-10 linear head (35,642 parameters)."""

    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn_relu(3, 16), conv_bn_relu(16, 16),
            conv_bn_relu(16, 32, stride=2), conv_bn_relu(32, 32), conv_bn_relu(32, 32), conv_bn_relu(32, 32),
        )
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], default_batch=32)
    device, rank, world = setup()
    torch.manual_seed(args.seed + rank)
    model = DDP(SmallConvNet().to(device), device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(args.steps):
        images = torch.randn(args.batch_size, 3, IMAGE_SIZE, IMAGE_SIZE, device=device)
        labels = torch.randint(0, NUM_CLASSES, (args.batch_size,), device=device)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
    if rank == 0:
        print(f"done: {args.steps} steps, last loss {loss.item():.4f}")
    cleanup()


if __name__ == "__main__":
    main()

"""The Pollux traces' models (cifar10, imagenet, ncf, deepspeech2) as DDP scripts on synthetic data.

    torchrun --nproc-per-node 1 examples/pollux_models.py --model cifar10 --batch-size 32
    srifty profile examples/pollux_models.py --model-name cifar10 --batch-size 32 -- --model cifar10

The architectures are those the Pollux artifact trains on g4dn.12xlarge (petuum/adaptdl,
osdi21-artifact; data/traces/PROVENANCE.md), with their parameter counts: cifar10 is the CIFAR
ResNet-18 (11,173,962), imagenet the ResNet-50 (25,557,032) on 224x224 images, ncf NeuMF-end
on MovieLens-1M (1,602,657), deepspeech2 five bidirectional GRU layers of 800 over a two-layer
convolutional front end on 161-bin spectrograms, with CTC over 29 labels (41,187,968; the
parameter counts of data/traces/pollux_model_param_counts.csv). A CPU profile of cifar10, imagenet or ncf, set
beside the trace's one-GPU steps, checks the operator model on a T4 (srifty validate,
ACCURACY.md). The optimizers are plain choices (SGD with momentum for the CNNs and deepspeech2,
Adam for NCF); the artifact's adaptive batch-size machinery (AdaptDL) is not reproduced, nor is
its data loading: a few synthetic batches are made once and cycled (deepspeech2's utterances all
DS2_FRAMES frames of 10 ms long).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from _common import cleanup, parse_args, setup
from cnn_resnet import BasicBlock

MODELS = ("cifar10", "imagenet", "ncf", "deepspeech2")
NCF_USERS, NCF_ITEMS, NCF_FACTORS, NCF_MLP_LAYERS = 6040, 3706, 32, 3
DS2_BINS, DS2_HIDDEN, DS2_LAYERS, DS2_LABELS = 161, 800, 5, 29  # 16 kHz audio, 20 ms windows
DS2_FRAMES = 400  # a 4 s utterance at a 10 ms hop


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


class BatchRNN(nn.Module):
    """A bidirectional GRU over (time, batch, features), batch-normalised inputs but for the first
    layer's, the two directions' outputs summed."""

    def __init__(self, inputs: int, hidden: int, batch_norm: bool) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(inputs) if batch_norm else None
        self.rnn = nn.GRU(inputs, hidden, bidirectional=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        steps, n = x.shape[:2]
        if self.norm is not None:
            x = self.norm(x.reshape(steps * n, -1)).reshape(steps, n, -1)
        x, _ = self.rnn(x)
        return x.view(steps, n, 2, -1).sum(2)


class DeepSpeech2(nn.Module):
    """Two strided convolutions over the spectrogram, five bidirectional GRU layers, and a
    batch-normalised linear layer to the labels' log-probabilities, per frame."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, 32, (41, 11), (2, 2), (20, 5)), nn.BatchNorm2d(32), nn.Hardtanh(0, 20),
            nn.Conv2d(32, 32, (21, 11), (2, 1), (10, 5)), nn.BatchNorm2d(32), nn.Hardtanh(0, 20))
        bins = (DS2_BINS + 2 * 20 - 41) // 2 + 1
        bins = (bins + 2 * 10 - 21) // 2 + 1
        self.rnns = nn.Sequential(BatchRNN(32 * bins, DS2_HIDDEN, batch_norm=False),
                                  *[BatchRNN(DS2_HIDDEN, DS2_HIDDEN, batch_norm=True) for _ in range(DS2_LAYERS - 1)])
        self.head = nn.Sequential(nn.BatchNorm1d(DS2_HIDDEN), nn.Linear(DS2_HIDDEN, DS2_LABELS, bias=False))

    def forward(self, spectrogram: torch.Tensor) -> torch.Tensor:
        x = self.conv(spectrogram)  # (batch, channels, bins, frames)
        n, c, bins, steps = x.shape
        x = self.rnns(x.view(n, c * bins, steps).permute(2, 0, 1))
        return F.log_softmax(self.head(x.reshape(steps * n, -1)).view(steps, n, -1), dim=-1)


class CtcLoss(nn.Module):
    """CTC of the per-frame log-probabilities against label sequences of a quarter of the frames."""

    def forward(self, log_probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        steps, n = log_probs.shape[:2]
        return F.ctc_loss(log_probs, labels, torch.full((n,), steps, dtype=torch.long),
                          torch.full((n,), labels.shape[1], dtype=torch.long))


def build(name: str) -> nn.Module:
    return {"cifar10": CifarResNet18, "imagenet": ResNet50, "ncf": NeuMF, "deepspeech2": DeepSpeech2}[name]()


def batch(name: str, size: int, device: torch.device) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """One synthetic batch: the model's inputs and its targets."""
    if name == "ncf":
        users = torch.randint(0, NCF_USERS, (size,), device=device)
        items = torch.randint(0, NCF_ITEMS, (size,), device=device)
        return (users, items), (torch.rand(size, device=device) < 0.2).float()
    if name == "deepspeech2":
        labels = torch.randint(1, DS2_LABELS, (size, DS2_FRAMES // 8), device=device)  # 0 is CTC's blank
        return (torch.randn(size, 1, DS2_BINS, DS2_FRAMES, device=device),), labels
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
    elif args.model == "deepspeech2":
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
        loss_fn = CtcLoss()
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

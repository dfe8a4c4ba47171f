"""Count the parameters of the trace models whose architecture is standard.

Run: .venv/bin/python data/traces/param_counts.py  (needs torch; rewrites pollux_param_counts.csv
and lambda_param_counts.csv)

- cifar10: ResNet-18 for 32x32 inputs as in kuangliu/pytorch-cifar `models/resnet.py`
  (3x3 stem, no max-pool, 10 classes), the model of the AdaptDL `pytorch-cifar` example.
- imagenet: ResNet-50 (torchvision layout: 7x7 stem, bottleneck blocks 3-4-6-3, 1000 classes),
  the model of the AdaptDL ImageNet example (pytorch/examples `--arch resnet50`).
deepspeech2 and ncf depend on the artifact's hyper-parameters (hidden sizes, embedding tables):
their counts are in pollux_model_param_counts.csv, counted from the artifact's own code.

Lambda (lambdal/deeplearning-benchmark, NVIDIA DeepLearningExamples scripts):
- ResNet-50 v1.5: the same parameters as ResNet-50 (v1.5 moves the stride, not the weights).
- BERT-base / BERT-large SQuAD fine-tuning: BERT (uncased vocabulary of 30,522, 512 positions,
  2 token types; hidden 768/1024, 12/24 layers, feed-forward 4x hidden) with its pooler and the
  question-answering head (hidden -> 2), counted by the formula in ``bert``.
SSD300, Mask R-CNN and NCF depend on heads, anchors and embedding tables not stated by any source
here: left blank.
"""
import csv
from pathlib import Path

import torch.nn as nn

HERE = Path(__file__).resolve().parent


def _bn(c):
    return nn.BatchNorm2d(c)


class Basic(nn.Module):
    expansion = 1

    def __init__(self, i, o, s):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(i, o, 3, s, 1, bias=False), _bn(o)
        self.c2, self.b2 = nn.Conv2d(o, o, 3, 1, 1, bias=False), _bn(o)
        self.sc = nn.Sequential(nn.Conv2d(i, o, 1, s, bias=False), _bn(o)) if s != 1 or i != o else nn.Sequential()


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, i, o, s):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(i, o, 1, bias=False), _bn(o)
        self.c2, self.b2 = nn.Conv2d(o, o, 3, s, 1, bias=False), _bn(o)
        self.c3, self.b3 = nn.Conv2d(o, o * 4, 1, bias=False), _bn(o * 4)
        self.sc = nn.Sequential(nn.Conv2d(i, o * 4, 1, s, bias=False), _bn(o * 4)) if s != 1 or i != o * 4 else nn.Sequential()


def resnet(block, layers, classes, stem):
    mods, c = [stem], 64
    for n, (o, blocks) in enumerate(zip((64, 128, 256, 512), layers)):
        for b in range(blocks):
            mods.append(block(c, o, 2 if (b == 0 and n > 0) else 1))
            c = o * block.expansion
    mods.append(nn.Linear(c, classes))
    return nn.Sequential(*mods)


def bert(hidden, layers, vocab=30522, positions=512, token_types=2):
    """Parameters of BertForQuestionAnswering: embeddings, layers, pooler, QA head."""
    embeddings = (vocab + positions + token_types) * hidden + 2 * hidden  # + LayerNorm
    attention = 4 * (hidden * hidden + hidden) + 2 * hidden  # Q, K, V, output + LayerNorm
    ffn = hidden * 4 * hidden + 4 * hidden + 4 * hidden * hidden + hidden + 2 * hidden  # + LayerNorm
    pooler = hidden * hidden + hidden
    return embeddings + layers * (attention + ffn) + pooler + 2 * hidden + 2


def count(m):
    return sum(p.numel() for p in m.parameters())


def write(name, rows):
    with (HERE / name).open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["model", "param_count"])
        w.writerows(rows)


if __name__ == "__main__":
    cifar = resnet(Basic, (2, 2, 2, 2), 10, nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), _bn(64)))
    r50 = resnet(Bottleneck, (3, 4, 6, 3), 1000, nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), _bn(64)))
    write("pollux_param_counts.csv", [("cifar10", count(cifar)), ("imagenet", count(r50))])
    write("lambda_param_counts.csv", [("ResNet-50 v1.5", count(r50)), ("BERT-base (SQuAD fine-tune)", bert(768, 12)),
                                      ("BERT-large (SQuAD fine-tune)", bert(1024, 24))])

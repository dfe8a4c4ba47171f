"""The Pollux trace's models as example scripts build (examples/pollux_models.py): their parameter
counts are those the trace's provenance states, and a step of each trains."""

from __future__ import annotations

import csv
import sys
from typing import Any

import pytest

from conftest import EXAMPLES, ROOT

# ResNet-18 for CIFAR and ResNet-50: data/traces/param_counts.py; deepspeech2 and ncf: counted
# from the Pollux artifact's own code (data/traces/pollux_model_param_counts.csv)
STANDARD = {"cifar10": 11_173_962, "imagenet": 25_557_032}


@pytest.fixture(scope="module")
def pollux_models() -> Any:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import pollux_models
    finally:
        sys.path.remove(str(EXAMPLES))
    return pollux_models


def _stated_counts() -> dict[str, int]:
    with open(ROOT / "data" / "traces" / "pollux_model_param_counts.csv", newline="") as f:
        return {row["model"]: int(row["trainable_params"]) for row in csv.DictReader(f)}


@pytest.mark.parametrize("name", ["cifar10", "imagenet", "ncf", "deepspeech2"])
def test_each_pollux_model_has_the_trace_s_parameter_count(pollux_models: Any, name: str) -> None:
    counts = {**STANDARD, **_stated_counts()}
    model = pollux_models.build(name)
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == counts[name]


def test_a_deepspeech2_step_trains_on_its_synthetic_utterances(pollux_models: Any) -> None:
    import torch

    torch.manual_seed(0)
    model = pollux_models.build("deepspeech2")
    (spectrogram,), labels = pollux_models.batch("deepspeech2", 1, torch.device("cpu"))
    log_probs = model(spectrogram)
    # the convolutions halve the frames once: one row of log-probabilities per 20 ms
    assert log_probs.shape == (pollux_models.DS2_FRAMES // 2, 1, pollux_models.DS2_LABELS)
    loss = pollux_models.CtcLoss()(log_probs, labels)
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is not None for p in model.parameters())

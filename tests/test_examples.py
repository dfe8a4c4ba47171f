"""The Pollux trace's models as example scripts build (examples/pollux_models.py): their parameter
counts are those the trace's provenance states, and a step of each trains. And the recurrent
example's shipped CPU profiles (examples/rnn_lm.py): the batch asked for, the GRU counted apart."""

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


def test_the_recurrent_example_s_cpu_profiles_record_its_batch_and_its_gru() -> None:
    """examples/rnn_lm.py feeds its GRU (sequence, batch) tokens; profiles/cpu/rnn_lm (make
    profiles-cpu) holds one profile per batch asked for, each recorded at that batch, with the
    GRU's step-by-step kernels apart from the rest and its two layers as the GPU's fused units."""
    import json

    vocab, embed, hidden = 10_000, 256, 512
    gru = 3 * hidden * (embed + hidden) + 3 * hidden * (hidden + hidden) + 2 * 2 * 3 * hidden  # two layers
    params = vocab * embed + gru + hidden * vocab + vocab
    paths = sorted((ROOT / "profiles" / "cpu" / "rnn_lm").glob("b*.json"))
    assert [p.name for p in paths] == ["b16.json", "b256.json", "b64.json"]
    for path in paths:
        doc = json.loads(path.read_text())
        assert doc["job"]["local_batch_size"] == doc["job"]["requested_batch_size"] == int(path.stem[1:])
        assert doc["job"]["param_count"] == params
        for phase in ("forward", "backward"):
            counted = doc["job"]["operators"]["phases"][phase]
            assert counted["recurrent_units"] == 2 and counted["recurrent_kernels"] > 35 * 10

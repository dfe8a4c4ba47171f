"""Golden predictions: a handful of fixed setups whose predictions the shipped model must keep
until MODEL_REVISION changes (tests/test_golden.py).

    python scripts/golden_predictions.py           # check: print what moved, exit 1 if anything did
    python scripts/golden_predictions.py --write   # after `srifty fit` (make model): record them

``--write`` refuses to record predictions that moved under the same MODEL_REVISION and the same
training corpus: a code change that moves a prediction must raise the revision, so that every
saved and cached model of the old revision is taken for stale. A new corpus (the shipped
model's card names another data_sha256) moves predictions by itself; cached models trained on
the old one are already stale by their card.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden-predictions.json"
REL_TOL = 1e-6

EMU = "profiles/emulated/cnn_resnet"
# (profile paths, configuration, per-worker batch, or one per instance type as `predict --type-batch`
# gives them): every source of figure the model has -- measured, predicted, transferred from a CPU
# profile, multi-node TCP, NVLink, emulated mixes.
SETUPS: list[tuple[list[str], str, int | dict[str, int]]] = [
    (["profiles/local/cnn_resnet.json"], "1xg5.xlarge", 32),
    (["profiles/local/transformer_lm.json"], "2xg4dn.12xlarge", 8),
    (["profiles/local/mlp_recsys.json"], "2xg4dn.xlarge", 256),
    (["profiles/pollux/cifar10"], "3xg4dn.12xlarge:3", 100),
    (["profiles/pollux/imagenet"], "1xg4dn.12xlarge:2", 32),
    (["profiles/pollux/imagenet"], "2xg5.xlarge", 32),
    # a network nobody measured across nodes of several GPUs each; an intra-node link no source states
    (["profiles/pollux/imagenet"], "2xg4dn.metal", 32),
    (["profiles/local/cnn_resnet.json"], "1xg5.12xlarge", 32),
    (["profiles/pollux/deepspeech2"], "16xg4dn.12xlarge:2", 24),
    (["profiles/lambda/resnet50-fp16"], "2xp4d.24xlarge", 256),
    (["profiles/h200/cnn_resnet"], "1xp5en.48xlarge:1", 128),
    # one worker on its profiled type at a batch it was not profiled at: the batch's bounds
    (["profiles/h200/cnn_resnet/b32.json"], "1xp5en.48xlarge:1", 512),
    # a job profiled at three batches, across nodes at one of them: that batch's ready times
    (["profiles/h200/cnn_resnet"], "2xp5en.48xlarge", 32),
    ([f"{EMU}/1xemu.medium-b16.json", f"{EMU}/1xemu.small-b16.json", f"{EMU}/1xemu.net-b16.json"],
     "1xemu.medium+2xemu.net", 16),
    ([f"{EMU}/1xemu.medium-b16.json", f"{EMU}/1xemu.small-b16.json"], "3xemu.small", 16),
    # a mix at one batch outside both types' profiled ones: the step within the slowest worker's bounds
    ([f"{EMU}/1xemu.medium-b16.json", f"{EMU}/1xemu.medium-b32.json", f"{EMU}/1xemu.net-b16.json"],
     "1xemu.medium+2xemu.net", 64),
    # a mix whose types train at their own batches, as recommend splits it
    (["profiles/local/cnn_resnet.json"], "1xp3.8xlarge+1xp4d.24xlarge", {"p3.8xlarge": 19, "p4d.24xlarge": 38}),
]


def predictions(model_path: Path | None = None) -> list[dict[str, Any]]:
    """Every setup predicted with the shipped model (or ``model_path``), as `srifty predict` does."""
    from srifty import model as m
    from srifty.configspec import parse_config
    from srifty.features import with_type_batches
    from srifty.oracle import load_inputs

    predictor = m.load(model_path or m.SHIPPED_MODEL)
    out = []
    for paths, config, batch in SETUPS:
        job, catalog = load_inputs([str(ROOT / p) for p in paths], None, with_emulated=True)
        row = (parse_config(config).resolved(catalog), batch if isinstance(batch, int) else 1)
        rows = with_type_batches([row], batch, catalog) if isinstance(batch, dict) else [row]
        result = predictor.predict(job, catalog, rows)[0]
        out.append({"profiles": paths, "config": config, "local_batch_size": batch,
                    "iteration_ms": result.iteration_ms, "interval_ms": list(result.interval_ms),
                    "source": result.source})
    return out


def moved(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    """What differs between two recordings, one line a setup."""
    lines = []
    def key(p: dict[str, Any]) -> tuple:
        return tuple(p["profiles"]), p["config"], json.dumps(p["local_batch_size"], sort_keys=True)

    keyed = {key(o): o for o in old}
    for n in new:
        o = keyed.get(key(n))
        figures = ("iteration_ms", "interval_ms")
        if o is None:
            lines.append(f"{n['config']} ({', '.join(n['profiles'])}): not recorded")
        elif o["source"] != n["source"] or not all(
                math.isclose(a, b, rel_tol=REL_TOL)
                for f in figures for a, b in zip([o[f]] if f == "iteration_ms" else o[f],
                                                 [n[f]] if f == "iteration_ms" else n[f])):
            lines.append(f"{n['config']} batch {n['local_batch_size']} ({', '.join(n['profiles'])}): "
                         f"{o['iteration_ms']:.6g} ms {o['source']} -> {n['iteration_ms']:.6g} ms {n['source']}")
    return lines


def main(argv: list[str] | None = None) -> int:
    from srifty.model import MODEL_REVISION, SHIPPED_MODEL, read_card

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="record the predictions (after `make model`)")
    args = ap.parse_args(argv)
    new = predictions()
    old = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else None
    changes = moved(old["predictions"], new) if old else ["no golden predictions recorded yet"]
    if not args.write:
        print("\n".join(changes) or f"golden predictions unchanged (revision {MODEL_REVISION})")
        return 1 if changes else 0
    corpus = (read_card(SHIPPED_MODEL) or {}).get("data_sha256")
    if old and old.get("revision") == MODEL_REVISION and old.get("data_sha256") == corpus and changes:
        print(f"Predictions moved, but MODEL_REVISION is still {MODEL_REVISION} and the corpus is the same:\n  "
              + "\n  ".join(changes) + "\nRaise MODEL_REVISION in srifty/model/persistence.py, then run `make model` again.",
              file=sys.stderr)
        return 1
    from srifty.profile import atomic_write_text

    atomic_write_text(GOLDEN, json.dumps({"revision": MODEL_REVISION, "data_sha256": corpus, "predictions": new},
                                         indent=1) + "\n")
    print(f"wrote {GOLDEN} ({len(new)} setups, revision {MODEL_REVISION})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

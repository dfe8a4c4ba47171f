"""Convert the Pollux g4dn.12xlarge trace to srifty's import CSV format.

Run: python data/traces/convert_pollux.py  (stdlib only; rewrites pollux_g4dn12xlarge.import.csv)

Input columns: model, trace, placement, nodes, gpus, local_bsz, step_time, sync_time,
instance_type, gpu. ``placement`` lists the GPUs of each node as digits ("1113"); the
scalability rows leave it blank where the GPUs are not spread evenly over the nodes, and
those rows cannot be given a placement without guessing: they are left out and counted.
Parameter counts: cifar10 and imagenet from pollux_param_counts.csv (computed by
param_counts.py), deepspeech2 and ncf from pollux_model_param_counts.csv (counted from the
Pollux artifact's model code and job configuration; its provenance column says where).
The share of the forward FLOPs in convolutions comes from model_conv_share.csv (each network's
architecture; deepspeech2, whose convolutions sit beside recurrent layers, is not stated).
"""
import csv
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE / "pollux_g4dn12xlarge_step_and_sync_time.csv"
PARAMS = HERE / "pollux_param_counts.csv"
ARTIFACT_PARAMS = HERE / "pollux_model_param_counts.csv"
CONV = HERE / "model_conv_share.csv"
OUT = HERE / "pollux_g4dn12xlarge.import.csv"


def main() -> int:
    params = {r["model"]: r["param_count"] for r in csv.DictReader(PARAMS.open()) if r["param_count"]}
    for r in csv.DictReader(ARTIFACT_PARAMS.open()):
        params.setdefault(r["model"], r["trainable_params"])
    conv = {r["model"]: r["conv_flop_share"] for r in csv.DictReader(CONV.open()) if r["dataset"] == "pollux"}
    kept, skipped = [], 0
    for r in csv.DictReader(SRC.open()):
        placement = r["placement"].strip()
        if placement.endswith(".0"):
            placement = placement[:-2]
        if not placement:
            skipped += 1
            continue
        digits = [int(c) for c in placement]
        assert len(digits) == int(r["nodes"]) and sum(digits) == int(r["gpus"]), r
        kept.append({
            "model": r["model"], "instance_type": r["instance_type"], "placement": "+".join(map(str, digits)),
            "local_batch_size": r["local_bsz"], "step_time_s": r["step_time"], "sync_time_s": r["sync_time"],
            "param_count": params.get(r["model"], ""), "grad_bytes": "", "precision": "",
            "conv_flop_share": conv.get(r["model"], ""),
        })
    with OUT.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(kept[0]))
        w.writeheader()
        w.writerows(kept)
    print(f"wrote {len(kept)} rows to {OUT.name}; left out {skipped} rows with no placement (uneven spread)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

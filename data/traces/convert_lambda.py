"""Convert the Lambda EC2 benchmark rows to srifty's import CSV format.

Run: python data/traces/convert_lambda.py  (stdlib only; rewrites lambda_ec2.import.csv)

Input: lambda_ec2_throughput.csv, the rows of the shared measured_throughput.csv measured by
lambdal/deeplearning-benchmark on EC2 (p3.2xlarge, p3.8xlarge, p3.16xlarge, p4d.24xlarge with
1, 2, 4 or 8 of its GPUs), one node each. Kept: rows whose throughput is in samples
(images, sequences, samples per second), so that a step time follows from the global batch:
step = global batch / samples per second, local batch = global batch / GPUs. Left out and
counted: rows in tokens or audio/mel items per second (their batch is in sentences or clips, so
no step time follows), and rows whose global batch does not split evenly over the GPUs.

A model is one (network, precision) pair, e.g. ``bert-base-squad-fp16``: mixed and full
precision run different kernels, so their compute is not the same job. The FP32 rows are
imported with precision ``tf32``: these runs (2020, NGC PyTorch containers) used PyTorch builds
that ran FP32 matrix multiplies and convolutions on TF32 tensor cores by default on Ampere
(PyTorch 1.7-1.11 defaults, and NVIDIA's containers); on the V100 of p3 it is plain FP32. That
matters only when compute is transferred between GPU generations (srifty's spec ratio then uses
the A100's TF32 figure); it is an assumption about the software, stated here. Parameter counts come
from lambda_param_counts.csv (param_counts.py), blank where no source states the architecture;
the share of the forward FLOPs in convolutions from model_conv_share.csv (each network's
architecture), which picks the GPU speed factors when compute is transferred across GPUs.
"""
import csv
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE / "lambda_ec2_throughput.csv"
PARAMS = HERE / "lambda_param_counts.csv"
CONV = HERE / "model_conv_share.csv"
OUT = HERE / "lambda_ec2.import.csv"
SAMPLE_UNITS = {"images/s", "sequences/s", "samples/s"}
NAMES = {"ResNet-50 v1.5": "resnet50", "SSD300 (ResNet-50)": "ssd300", "Mask R-CNN (R-50-FPN)": "maskrcnn",
         "NCF": "ncf", "BERT-base (SQuAD fine-tune)": "bert-base-squad", "BERT-large (SQuAD fine-tune)": "bert-large-squad"}


def main() -> int:
    params = {r["model"]: r["param_count"] for r in csv.DictReader(PARAMS.open())}
    conv = {r["model"]: r["conv_flop_share"] for r in csv.DictReader(CONV.open()) if r["dataset"] == "lambda"}
    kept, skipped = [], {"unit not in samples": 0, "batch not divisible by the GPUs": 0}
    for r in csv.DictReader(SRC.open()):
        if r["throughput_unit"] not in SAMPLE_UNITS or not r["throughput_samples_per_s"]:
            skipped["unit not in samples"] += 1
            continue
        gpus = int(r["gpus_per_node"])
        batch = float(r["global_batch_size"])
        if batch % gpus:
            skipped["batch not divisible by the GPUs"] += 1
            continue
        m = re.match(r"^([a-z0-9.]+)(?:\((\d+) of (\d+) GPUs\))?$", r["instance_type"])
        assert m, r["instance_type"]
        precision = r["precision"].lower()
        kept.append({
            "model": f"{NAMES[r['model']]}-{precision}", "instance_type": m.group(1), "placement": str(gpus),
            "local_batch_size": str(int(batch) // gpus),
            "step_time_s": f"{batch / float(r['throughput_samples_per_s']):.6g}", "sync_time_s": "",
            "param_count": params.get(r["model"], ""), "grad_bytes": "",
            "precision": {"fp32": "tf32", "fp16": "fp16", "amp": "amp"}[precision],
            "conv_flop_share": conv.get(r["model"], ""),
        })
    kept.sort(key=lambda k: (k["model"], k["instance_type"], int(k["placement"])))
    with OUT.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(kept[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(kept)
    print(f"wrote {len(kept)} rows to {OUT.name}; left out " + ", ".join(f"{n} ({why})" for why, n in skipped.items()),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

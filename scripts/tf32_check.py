"""Does labelling a float32 job TF32 transfer its compute to Ampere-and-later GPUs better than
FP32? Checked on NVIDIA DeepLearningExamples' single-GPU rates (V100 FP32 vs A100 TF32, never
used in any fit), split into convolutional networks and the rest, with srifty's speed ratio
(spec x measured factors from Lambda's tables) under each label. Run: `python scripts/tf32_check.py`.

Convolutional networks are those data/traces/model_conv_share.csv gives a convolution share of 1
(by their architecture); every other DLE model counts as "other". The transfers take each
network's convolution share, as srifty does. docs/latency-model.md quotes this script's output.
"""
from __future__ import annotations

import statistics

import numpy as np

from srifty.catalog import Catalog
from srifty.features import transfer_speeds
from srifty.gpuspeed import fit_speed_corrections, read_lambda_single_gpu, spec_hardware
from srifty.model import ROOT
from srifty.validate import read_dle_single_gpu

AMPERE_OR_LATER = ("A100", "H100", "H200", "B200")


def main() -> None:
    catalog = Catalog.default()
    traces = ROOT / "data" / "traces"
    lam, _ = read_lambda_single_gpu(traces / "lambda_compiled_single_gpu.csv")
    factors = fit_speed_corrections(lam, catalog)
    rates, _ = read_dle_single_gpu(traces / "nvidia_dle_single_gpu.csv")
    groups: dict[tuple[str, ...], list] = {}
    for r in rates:
        if r.precision == "tf32" and catalog.gpu_spec(r.gpu) is not None:
            groups.setdefault(r.group, []).append(r)
    print("kind  | label | transfers | MAPE % | median % | measured speed ratio V100 -> A100-80GB (median)")
    for kind in ("conv", "other"):
        errors: dict[str, list[float]] = {"tf32": [], "fp32": []}
        ratios, models = [], set()
        for group, members in groups.items():
            if (members[0].conv_share == 1.0) != (kind == "conv"):
                continue
            by_gpu = {r.gpu: r.rate for r in members}
            if "V100" in by_gpu and "A100-80GB" in by_gpu:
                ratios.append(by_gpu["A100-80GB"] / by_gpu["V100"])
            for a in members:
                for b in members:
                    if a.gpu.startswith(AMPERE_OR_LATER) == b.gpu.startswith(AMPERE_OR_LATER):
                        continue  # only transfers across the TF32 line
                    models.add(group[0])
                    for label in errors:
                        fs, fd = transfer_speeds(spec_hardware(catalog.gpu_spec(a.gpu), factors),
                                                 spec_hardware(catalog.gpu_spec(b.gpu), factors), label,
                                                 a.conv_share)
                        errors[label].append(abs((b.rate / a.rate) / (fd / fs) - 1.0) * 100)
        for label, e in errors.items():
            print(f"{kind:5s} ({len(models)}) | {label:5s} | {len(e):9d} | {np.mean(e):6.1f} | {np.median(e):8.1f} | "
                  f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)} models)")
    spec = {g: spec_hardware(catalog.gpu_spec(g)) for g in ("V100", "A100-80GB")}
    for label in ("fp32", "tf32"):
        for kind, share in (("no convolutions", 0.0), ("convolutional", 1.0)):
            print(f"spec ratio V100 -> A100-80GB as {label}, {kind}: "
                  f"{spec['A100-80GB'].speed_for(label, share) / spec['V100'].speed_for(label, share):.2f}")


if __name__ == "__main__":
    main()

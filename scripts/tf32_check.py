"""Does labelling a float32 job TF32 transfer its compute to Ampere-and-later GPUs better than
FP32? Checked on NVIDIA DeepLearningExamples' single-GPU rates (V100 FP32 vs A100 TF32, never
used in any fit), split into convolutional networks and the rest, with srifty's speed ratio
(spec x measured factors from Lambda's tables) under each label. Run: `python scripts/tf32_check.py`.

Convolutional networks are named below by the DLE model names (the READMEs' own names); every
other DLE model counts as "other". docs/latency-model.md quotes this script's output.
"""
from __future__ import annotations

import statistics

import numpy as np

from srifty.catalog import Catalog
from srifty.features import transfer_speeds
from srifty.gpuspeed import fit_speed_corrections, read_lambda_single_gpu, spec_hardware
from srifty.model import ROOT
from srifty.validate import read_dle_single_gpu

CONV_NETS = ("RN50v1.5", "resnet50v1.5", "resnext101-32x4d", "se-resnext101-32x4d", "efficientnet", "Efficientdet",
             "SSD", "MaskRCNN", "UNet", "VNet", "nnUNet", "Jasper", "QuartzNet")
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
        ratios = []
        for group, members in groups.items():
            if group[0].startswith(CONV_NETS) != (kind == "conv"):
                continue
            by_gpu = {r.gpu: r.rate for r in members}
            if "V100" in by_gpu and "A100-80GB" in by_gpu:
                ratios.append(by_gpu["A100-80GB"] / by_gpu["V100"])
            for a in members:
                for b in members:
                    if a.gpu.startswith(AMPERE_OR_LATER) == b.gpu.startswith(AMPERE_OR_LATER):
                        continue  # only transfers across the TF32 line
                    for label in errors:
                        fs, fd = transfer_speeds(spec_hardware(catalog.gpu_spec(a.gpu), factors),
                                                 spec_hardware(catalog.gpu_spec(b.gpu), factors), label)
                        errors[label].append(abs((b.rate / a.rate) / (fd / fs) - 1.0) * 100)
        for label, e in errors.items():
            print(f"{kind:5s} | {label:5s} | {len(e):9d} | {np.mean(e):6.1f} | {np.median(e):8.1f} | "
                  f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)} models)")
    spec = {g: spec_hardware(catalog.gpu_spec(g)) for g in ("V100", "A100-80GB")}
    for label in ("fp32", "tf32"):
        print(f"spec ratio V100 -> A100-80GB as {label}: "
              f"{spec['A100-80GB'].speed_for(label) / spec['V100'].speed_for(label):.2f}")


if __name__ == "__main__":
    main()

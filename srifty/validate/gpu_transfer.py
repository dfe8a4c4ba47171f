"""The GPU-transfer check: single-GPU rates of one model on several GPU types (Gavel, Lambda's
compiled tables, NVIDIA's DeepLearningExamples) and how well a speed ratio carries a measured
time from one GPU to another (:class:`TransferCheck`, :func:`validate_gpu_transfer`), the
readers of those traces (:func:`read_gavel`, :func:`read_dle_single_gpu`), the spread and
errors of the transfers (:func:`transfer_spread`, :func:`transfer_errors`) and its section of
docs/ACCURACY.md (:func:`render_gpu_transfer`).

In a module of its own so that it can be reworked without touching the other checks; the
batch-scaling check (srifty.validate.batch) reads Gavel's trace through :func:`read_gavel`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from srifty.gpuspeed import CONV_SHARES_CSV, SingleGpuRate, read_conv_shares, read_lambda_single_gpu, with_conv_shares

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from srifty.catalog import Catalog
    from srifty.gpuspeed import TransferError


# --------------------------------------------------------------------------- compute transfer across GPUs

TRANSFER_METHODS = ("srifty", "srifty-spec", "spec", "fp32-flops", "memory-bandwidth")
GAVEL_BATCH = re.compile(r"batch size in job name = (\d+)")
GAVEL_GPUS = re.compile(r"total GPUs=(\d+)")


@dataclass
class TransferCheck:
    """One model measured alone on two GPU types: the target's time per step (or per sample)
    predicted from the source's by each method's speed ratio."""

    dataset: str
    group: tuple[str, ...]
    source_gpu: str
    target_gpu: str
    measured_ratio: float  # target speed / source speed, from the two measured rates
    predicted_ratio: dict[str, float]
    measured_factors: bool = False  # whether srifty's ratio had a measured factor on both GPUs

    def ape(self, method: str) -> float:
        """Absolute percentage error of the target's predicted time."""
        return abs(self.measured_ratio / self.predicted_ratio[method] - 1.0) * 100


def read_gavel(path: str | Path) -> tuple[dict[tuple[str, str, str], float], dict[tuple[str, str, str, int], float]]:
    """Gavel's isolated throughputs (iterations/s): single GPUs keyed (model, batch, GPU), and
    GPUs consolidated on one server keyed (model, batch, GPU, total GPUs)."""
    import csv

    single, multi = {}, {}
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            notes = r["notes"]
            gpus = GAVEL_GPUS.search(notes)
            if r["throughput_unit"] != "iterations/s" or not gpus or "unconsolidated" in notes:
                continue
            batch = GAVEL_BATCH.search(notes)
            key = (r["model"], batch.group(1) if batch else "-", r["gpu_model"])
            if int(gpus.group(1)) == 1:
                single[key] = float(r["throughput_value"])
            else:
                multi[(*key, int(gpus.group(1)))] = float(r["throughput_value"])
    return single, multi


def _gavel_rates(path: Path) -> tuple[list[SingleGpuRate], list[str]]:
    single, multi = read_gavel(path)
    out = [SingleGpuRate("gavel", (model, batch), gpu, "fp32", rate) for (model, batch, gpu), rate in sorted(single.items())]
    out = with_conv_shares(out, read_conv_shares(path.parent / CONV_SHARES_CSV), lambda r: r.group[0])
    # the multi-GPU rows, read as iterations/s summed over the workers: per-GPU speed against alone
    eff = [v / n / single[(m, b, g)] for (m, b, g, n), v in multi.items() if (m, b, g) in single]
    notes = []
    if eff:
        notes.append(f"Gavel's multi-GPU rows (one server) are not used for iteration time: read as iterations/s "
                     f"summed over the workers, {sum(e > 1.05 for e in eff)} of {len(eff)} run each GPU more than 5% "
                     f"faster than it runs alone (up to {max(eff):.2f}x), which a data-parallel step at a fixed "
                     "per-GPU batch should not do, and the rows spread over servers state neither node count nor "
                     "instance type. Gavel states no precision; FP32 figures are compared.")
    return out, notes


# NVIDIA's DeepLearningExamples READMEs name GPUs by board; the DGX-2's V100-SXM3 (350 W) has no spec row
DLE_GPUS = {"V100-SXM2-16GB": "V100", "V100-SXM2-32GB": "V100-32GB", "A100-SXM4-40GB": "A100",
            "A100-SXM4-80GB": "A100-80GB"}


def read_dle_single_gpu(path: str | Path) -> tuple[list[SingleGpuRate], list[str]]:
    """NVIDIA DeepLearningExamples README tables (DGX-1/DGX-2/DGX A100, on-prem): the median of
    each (model, framework, precision, unit, GPU) over the README's rows, which differ in batch
    and configuration. FP32 on V100 and TF32 on A100 are one class, as the READMEs compare them;
    mixed precision is AMP; the few BF16 rows are left out."""
    import csv
    import statistics

    rates: dict[tuple[str, str, str, str, str], list[float]] = {}
    left = 0
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            gpu = DLE_GPUS.get(r["gpu_model"])
            precision = {"mixed": "amp", "fp32": "tf32", "tf32": "tf32"}.get(r["precision"].lower())
            if gpu is None or precision is None or r["gpus_per_node"] != "1":
                left += 1
                continue
            key = (r["model"], r["framework"], precision, r["throughput_unit"], gpu)
            rates.setdefault(key, []).append(float(r["throughput_value"]))
    out = [SingleGpuRate("nvidia-dle", (model, fw, prec, unit), gpu, prec, statistics.median(v))
           for (model, fw, prec, unit, gpu), v in sorted(rates.items())]
    out = with_conv_shares(out, read_conv_shares(Path(path).parent / CONV_SHARES_CSV), lambda r: r.group[0])
    notes = ["NVIDIA DeepLearningExamples: each GPU's rate is the median over a README's rows (their batch sizes "
             "and configurations differ), a cruder pairing than Gavel's or Lambda's."]
    if left:
        notes.append(f"NVIDIA DeepLearningExamples: {left} rows left out (BF16, more than one GPU, or a GPU "
                     "srifty has no spec for).")
    return out, notes


def validate_gpu_transfer(catalog: "Catalog", gavel: str | Path | None = None,
                          lambda_compiled: str | Path | None = None,
                          dle: str | Path | None = None) -> tuple[list[TransferCheck], list[str]]:
    """Single-GPU rates of the same model on several GPU types (Gavel: K80, P100, V100; Lambda's
    compiled tables: V100 … B200; NVIDIA's DeepLearningExamples: V100, A100): how well does a
    speed ratio transfer a measured time to another GPU? ``spec`` = √(FLOPS of the precision ×
    memory bandwidth) from the spec sheets; ``srifty-spec`` = srifty's spec speed, FLOPS weighted
    by the network's convolution share (srifty.features.Hardware.speed_for), what srifty uses
    between GPUs without measured factors; ``srifty`` = that times the measured factors of
    srifty.gpuspeed where both GPUs have them, fitted on Lambda's rates without the network under
    test (Gavel's and NVIDIA's rates are never in the fit); ``fp32-flops`` and
    ``memory-bandwidth`` take one figure."""
    from srifty.features import both_measured, transfer_speeds
    from srifty.gpuspeed import fit_speed_corrections, spec_hardware
    from srifty.model import ROOT

    traces = ROOT / "data" / "traces"
    rates: list[SingleGpuRate] = []
    notes: list[str] = []
    for path, reader in ((Path(gavel) if gavel else traces / "gavel_throughputs.csv", _gavel_rates),
                         (Path(lambda_compiled) if lambda_compiled else traces / "lambda_compiled_single_gpu.csv",
                          read_lambda_single_gpu),
                         (Path(dle) if dle else traces / "nvidia_dle_single_gpu.csv", read_dle_single_gpu)):
        if not path.exists():
            notes.append(f"{path}: not found; no cross-GPU check on it.")
            continue
        got, why = reader(path)
        rates += got
        notes += why
    specs, no_spec = {}, set()
    for g in sorted({r.gpu for r in rates}):
        spec = catalog.gpu_spec(g)
        if spec is None or not spec.fp32_tflops or not spec.memory_bandwidth_gbytes_per_s:
            no_spec.add(g)
            continue
        specs[g] = spec
    if no_spec:
        notes.append(f"{', '.join(sorted(no_spec))}: no FP32 TFLOPS and memory bandwidth in srifty's GPU specs; "
                     "their rows were left out.")
    fitted = {}  # network held out of the factors' fit (None: Gavel, every Lambda rate in)

    def factors(held: str | None) -> Any:
        if held not in fitted:
            fitted[held] = fit_speed_corrections(
                rates, catalog, keep=lambda r: r.dataset == "lambda" and (held is None or r.group[1] != held))
        return fitted[held]

    def predicted(src: SingleGpuRate, dst: SingleGpuRate) -> tuple[dict[str, float], bool]:
        ss, sd = specs[src.gpu], specs[dst.gpu]
        fit = factors(src.group[1] if src.dataset == "lambda" else None)
        hs, hd = spec_hardware(ss, fit), spec_hardware(sd, fit)
        fs, fd = transfer_speeds(hs, hd, src.precision, src.conv_share)
        measured = both_measured(hs, hd, src.precision)
        return {"srifty": fd / fs,
                "spec": spec_hardware(sd).speed_for(dst.precision, 0.0) / spec_hardware(ss).speed_for(src.precision, 0.0),
                "srifty-spec": spec_hardware(sd).speed_for(src.precision, src.conv_share)
                / spec_hardware(ss).speed_for(src.precision, src.conv_share),
                "fp32-flops": sd.fp32_tflops / ss.fp32_tflops,
                "memory-bandwidth": sd.memory_bandwidth_gbytes_per_s / ss.memory_bandwidth_gbytes_per_s}, measured

    groups: dict[tuple[str, tuple[str, ...]], list[SingleGpuRate]] = {}
    for r in rates:
        if r.gpu in specs:
            groups.setdefault((r.dataset, r.group), []).append(r)
    checks = [TransferCheck(ds, group, a.gpu, b.gpu, b.rate / a.rate, *predicted(a, b))
              for (ds, group), members in sorted(groups.items()) for a in members for b in members if a.gpu != b.gpu]
    return checks, notes


def transfer_spread(checks: Sequence[TransferCheck]) -> "TransferError":
    """The spread of srifty's transfers over ``checks``: 5% and 95% quantiles of the log of
    measured over transferred time (a transfer predicts time × measured / predicted speed ratio),
    over the checks whose GPUs both had measured factors (all, where none had), and of srifty's
    ratio without the factors (``srifty-spec``) over every check that has one."""
    import numpy as np

    from srifty.gpuspeed import TransferError

    def spread(pairs: Sequence[tuple[float, float]]) -> tuple[float, float, int]:
        e = np.log([predicted / measured for predicted, measured in pairs])
        return float(np.quantile(e, 0.05)), float(np.quantile(e, 0.95)), len(e)

    with_factors = [c for c in checks if c.measured_factors] or list(checks)
    q05, q95, n = spread([(c.predicted_ratio["srifty"], c.measured_ratio) for c in with_factors])
    by_spec = [(c.predicted_ratio["srifty-spec"], c.measured_ratio) for c in checks if "srifty-spec" in c.predicted_ratio]
    if not by_spec:
        return TransferError(q05, q95, n)
    return TransferError(q05, q95, n, *spread(by_spec))


def by_dataset(checks: Sequence[TransferCheck]) -> dict[str, list[TransferCheck]]:
    out: dict[str, list[TransferCheck]] = {}
    for c in checks:
        out.setdefault(c.dataset, []).append(c)
    return dict(sorted(out.items()))


def transfer_errors(checks: Sequence[TransferCheck]) -> dict[str, "np.ndarray"]:
    """Absolute percentage error of every check, per method."""
    import numpy as np

    return {m: np.array([c.ape(m) for c in checks]) for m in TRANSFER_METHODS}


def render_gpu_transfer(checks: Sequence[TransferCheck], notes: Sequence[str]) -> str:
    import numpy as np

    if not checks:
        return "".join(f"\n- {n}" for n in notes) + ("\n" if notes else "")
    lines = ["", "## Compute transfer across GPUs: single-GPU rates from Gavel, Lambda and NVIDIA", "",
             "Each model that Gavel (K80, V100; data/traces/gavel_throughputs.csv), Lambda's compiled benchmark "
             "tables (V100 to B200, within one benchmark release; data/traces/lambda_compiled_single_gpu.csv) or "
             "NVIDIA's DeepLearningExamples READMEs (V100 and A100 in DGX systems, one framework's scripts; "
             "data/traces/nvidia_dle_single_gpu.csv) measured alone on two GPU types: the second GPU's time per "
             "step (Gavel, same batch) or per sample (Lambda and NVIDIA, each GPU at its own batch) predicted from "
             "the first's by a speed ratio. `spec` = √(FLOPS "
             "of the job's precision × memory bandwidth) from the spec sheets; `srifty-spec` = FLOPS^w × "
             "bandwidth^(1−w), w ½ for a network without convolutions and less for a convolutional one "
             "(data/traces/model_conv_share.csv; srifty.features.CONV_FLOPS_WEIGHT), what srifty uses between "
             "two GPUs of which one has no measured factors (T4, A10G, L4, K80, ...); `srifty` = that times "
             "each GPU's measured factors (srifty/gpuspeed.py, `make gpu-speed`), what srifty uses between two "
             "that have them. The factors are fitted on Lambda's rates: for a Lambda transfer, on the other networks "
             "only (leave one network out); Gavel's and NVIDIA's rates are never in the fit. "
             "`fp32-flops` and `memory-bandwidth` use one figure. Habitat (11.8% across GPUs) does this transfer "
             "kernel by kernel.", "",
             "| data | source → target | transfers | " + " | ".join(f"{m} MAPE % (median)" for m in TRANSFER_METHODS)
             + " | measured speed ratio (min–max) |",
             "|---|---|---:|" + "---:|" * len(TRANSFER_METHODS) + "---|"]

    def row(label: str, pair: str, sub: Sequence[TransferCheck], span: bool = True) -> str:
        cells = [f"{e.mean():.1f} ({np.median(e):.1f})" for e in transfer_errors(sub).values()]
        r = [c.measured_ratio for c in sub]
        return (f"| {label} | {pair} | {len(sub)} | " + " | ".join(cells)
                + (f" | {min(r):.2f}–{max(r):.2f} |" if span else " | |"))

    for ds, mine in by_dataset(checks).items():
        for src, dst in sorted({(c.source_gpu, c.target_gpu) for c in mine}):
            lines.append(row(ds, f"{src} → {dst}", [c for c in mine if (c.source_gpu, c.target_gpu) == (src, dst)]))
        lines.append(row(ds, "all", mine, span=False))
    lines.append(row("all", "all", checks, span=False))
    lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"

"""Measured corrections to the spec-sheet speed ratio that transfers compute across GPUs.

srifty transfers a profiled compute time to a GPU nobody profiled by the ratio of spec speeds,
FLOPS of the job's precision and memory bandwidth weighted by the job's share s of FLOPs in
convolutions (:meth:`srifty.features.Hardware.speed_for`). Measured single-GPU rates show that
ratio drifting by GPU: Lambda's compiled benchmark tables put a B200 at 1.0-1.7x an H200 where
the spec ratio says 1.95x. This module fits factors on such rates:

    log rate = a[benchmark group] + log spec_speed[GPU, s] + b[GPU, FLOPS figure]
               + s[network] x c[chip, FLOPS figure]

where a group is one benchmark release, network, precision and unit (the rates inside it differ
only by the GPU), so only speed *ratios* inform b and c; s comes from data/traces/model_conv_share.csv
(a profile states its own ``conv_flop_share``), since convolutional networks, with their
memory-bound normalisation and activation layers, gain less from a newer GPU's tensor cores than
matmul-bound ones; boards of one chip (V100 16/32 GB) share c. The factors are used only in pairs: a
transfer between two GPUs that both have one takes the ratio of their factors, a transfer that
involves a GPU without one (T4, A10G, L4, K80, ...) keeps the spec ratio
(:func:`srifty.features.transfer_speeds`). A ridge penalty keeps each b near 0, so a GPU with few
rates keeps most of its spec figure.

The shipped factors (``srifty/data/gpu_speed_corrections.csv``) are regenerated from
``data/traces/lambda_compiled_single_gpu.csv`` by ``make gpu-speed``; how well they transfer
(leave one network out on Lambda; Gavel's K80/V100 rates, a dataset the fit never saw) is in
docs/ACCURACY.md, "Compute transfer across GPUs".
"""
from __future__ import annotations

import csv
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from srifty.catalog import Catalog, GpuSpec, SpeedCorrection
from srifty.features import UNKNOWN_CONV_SHARE, Hardware
from srifty.simulate import Link

RIDGE = 1.0  # penalty on each log factor, in units of one squared log error of a rate
CONV_SHARES_CSV = "model_conv_share.csv"  # beside the trace files: each trace model's convolution share
# Lambda's compiled tables name GPUs by board; srifty's GPU specs by what EC2 rents (PCIe boards
# and workstation cards have other figures and no spec row here, so they are left out)
LAMBDA_GPUS = {"V100-16GB": "V100", "V100-32GB": "V100-32GB", "A100-SXM4-40GB": "A100", "A100-SXM4-80GB": "A100-80GB",
               "H100-SXM5-80GB": "H100", "H200-SXM-140GB": "H200", "B200-192GB": "B200"}


@dataclass(frozen=True)
class SingleGpuRate:
    """A model's measured training rate on one GPU. Rates of one ``group`` (same benchmark
    release, model, precision and, where stated, batch) differ only by the GPU."""

    dataset: str
    group: tuple[str, ...]
    gpu: str  # srifty's GPU name (catalog.gpu_spec)
    precision: str  # srifty's precision name (fp32, tf32, amp)
    rate: float  # iterations or samples per second
    conv_share: float = UNKNOWN_CONV_SHARE  # share of the network's forward FLOPs in convolutions


@dataclass(frozen=True)
class TransferError:
    """How far a compute time transferred to another GPU has missed: the 5% and 95% quantiles of
    log(measured time / transferred time) over single-GPU rates measured on two GPUs (Lambda's
    tables with each network's own factors left out of the fit, NVIDIA DeepLearningExamples and
    Gavel, which no fit uses): ``q05``/``q95`` of srifty's ratio where both GPUs have measured
    factors, ``spec_q05``/``spec_q95`` of its spec speed ratio alone, what a transfer to or from
    a GPU without factors (T4, A10G, L4, ...) takes. The latency model widens the interval of a
    transferred prediction by the one its transfer used (srifty.model.LatencyModel.predict_interval)."""

    q05: float
    q95: float
    transfers: int
    spec_q05: float | None = None  # None (an older file): as q05/q95
    spec_q95: float | None = None
    spec_transfers: int = 0

    def bounds(self, by_spec: bool) -> tuple[float, float]:
        """(q05, q95) of a transfer by the spec speed ratio alone (``by_spec``) or with measured factors."""
        if by_spec and self.spec_q05 is not None and self.spec_q95 is not None:
            return self.spec_q05, self.spec_q95
        return self.q05, self.q95

    def to_json(self) -> str:
        return json.dumps({"q05": round(self.q05, 4), "q95": round(self.q95, 4), "transfers": self.transfers,
                           "spec_q05": None if self.spec_q05 is None else round(self.spec_q05, 4),
                           "spec_q95": None if self.spec_q95 is None else round(self.spec_q95, 4),
                           "spec_transfers": self.spec_transfers,
                           "what": "quantiles of log(measured / transferred time) of srifty's GPU speed ratio with "
                                   "measured factors (q05, q95) and of its spec speed ratio alone (spec_q05, "
                                   "spec_q95); "
                                   "written by `make gpu-speed` (scripts/fit_gpu_speed.py)"}, indent=1) + "\n"


def read_transfer_error(path: str | Path) -> TransferError | None:
    """The figures :meth:`TransferError.to_json` wrote; None if the file does not exist."""
    path = Path(path)
    if not path.exists():
        return None
    d = json.loads(path.read_text())
    spec = (d.get("spec_q05"), d.get("spec_q95"))
    return TransferError(float(d["q05"]), float(d["q95"]), int(d["transfers"]),
                         None if spec[0] is None else float(spec[0]), None if spec[1] is None else float(spec[1]),
                         int(d.get("spec_transfers") or 0))


def read_conv_shares(path: str | Path) -> dict[tuple[str, str], float]:
    """(dataset, model) -> share of the forward FLOPs in convolutions, as a trace model's
    architecture states it (data/traces/model_conv_share.csv); models not listed, or a trace with no
    such file beside it, are unknown."""
    if not Path(path).exists():
        return {}
    with open(path, newline="") as fh:
        return {(r["dataset"], r["model"]): float(r["conv_flop_share"]) for r in csv.DictReader(fh)}


def with_conv_shares(rates: Sequence[SingleGpuRate], shares: dict[tuple[str, str], float],
                     model_of: Callable[[SingleGpuRate], str]) -> list[SingleGpuRate]:
    """``rates`` with the convolution share of each one's model (``model_of``) where ``shares`` has it."""
    from dataclasses import replace

    return [replace(r, conv_share=shares.get((r.dataset, model_of(r)), UNKNOWN_CONV_SHARE)) for r in rates]


def read_lambda_single_gpu(path: str | Path) -> tuple[list[SingleGpuRate], list[str]]:
    """Lambda's compiled single-GPU tables: the median over systems of each (release, model,
    precision, GPU). Releases (2022 v0 tables, v1 on NGC 22.09, v2 on NGC 24.10) are kept apart:
    their software differs, so only GPUs of one release are compared."""
    rates: dict[tuple[str, str, str, str, str], list[float]] = {}
    other = set()
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            gpu = LAMBDA_GPUS.get(r["gpu_model"])
            if gpu is None or r["gpus_per_node"] != "1":
                other.add(r["gpu_model"])
                continue
            release = "v2" if r["source"].endswith("v2)") else ("v1" if "v1 results" in r["notes"] else "v0")
            precision = "amp" if r["precision"].startswith("FP16") else "tf32"  # TF32 where the GPU has it
            key = (release, r["model"], precision, r["throughput_unit"], gpu)
            rates.setdefault(key, []).append(float(r["throughput_value"]))
    out = [SingleGpuRate("lambda", (rel, model, prec, unit), gpu, prec, statistics.median(v))
           for (rel, model, prec, unit, gpu), v in sorted(rates.items())]
    out = with_conv_shares(out, read_conv_shares(Path(path).parent / CONV_SHARES_CSV), lambda r: r.group[1])
    notes = [f"Lambda: {', '.join(sorted(other))} left out (not a GPU srifty has spec figures for)."] if other else []
    return out, notes


def spec_hardware(spec: "GpuSpec", factors: Iterable[SpeedCorrection] = ()) -> "Hardware":
    """A one-GPU Hardware with ``spec``'s figures (links irrelevant), for speed ratios alone."""
    return Hardware(spec.gpu_name, 1, Link(1.0, 1.0), Link(1.0, 1.0), spec.fp32_tflops,
                    spec.memory_bandwidth_gbytes_per_s, None, tf32_tflops=spec.tf32_tflops_dense,
                    fp16_tflops=spec.fp16_bf16_tensor_tflops_dense,
                    speed_factors=tuple((c.flops, c.factor) for c in factors if c.gpu_name == spec.gpu_name),
                    conv_speed_factors=tuple((c.flops, c.conv_factor) for c in factors if c.gpu_name == spec.gpu_name))


def chip_of(gpu: str) -> str:
    """The chip of a GPU name (V100-32GB: V100, A100-80GB: A100)."""
    return gpu.split("-")[0]


def same_chip(a: str, b: str) -> bool:
    """GPU names of one chip in other boards (V100 and V100-32GB, A100 and A100-80GB)."""
    return chip_of(a) == chip_of(b)


def fit_speed_corrections(rates: Sequence[SingleGpuRate], catalog: "Catalog",
                          keep: Callable[[SingleGpuRate], bool] = lambda r: True,
                          ridge: float = RIDGE) -> list[SpeedCorrection]:
    """One factor per (GPU, FLOPS figure), and one more for convolutions, over the ``rates`` that
    ``keep`` admits and whose GPU has FLOPS and memory bandwidth in the catalog's specs (see the
    module docstring)."""
    import numpy as np

    hardware: dict[str, "Hardware | None"] = {}
    rows = []  # (group, key, convolution share, log rate - log spec speed)
    for r in rates:
        if not keep(r):
            continue
        if r.gpu not in hardware:
            spec = catalog.gpu_spec(r.gpu)
            ok = spec is not None and spec.fp32_tflops and spec.memory_bandwidth_gbytes_per_s
            hardware[r.gpu] = spec_hardware(spec) if ok else None
        hw = hardware[r.gpu]
        if hw is not None:
            rows.append(((r.dataset, r.group), (r.gpu, hw.flops_kind(r.precision)), r.conv_share,
                         math.log(r.rate) - math.log(hw.speed_for(r.precision, r.conv_share))))
    sizes: dict[tuple, int] = {}
    for g, *_ in rows:
        sizes[g] = sizes.get(g, 0) + 1
    rows = [row for row in rows if sizes[row[0]] >= 2]  # a GPU alone in its group says nothing of ratios
    keys = sorted({k for _, k, _, _ in rows})
    if not keys:
        return []
    # the convolution factor belongs to the chip: boards of one chip (V100 16/32 GB) share it
    chips = sorted({(chip_of(gpu), flops) for gpu, flops in keys})
    groups = sorted({g for g, *_ in rows})
    col = {k: i for i, k in enumerate(keys)}
    chip_col = {k: len(keys) + i for i, k in enumerate(chips)}
    grp = {g: i for i, g in enumerate(groups)}
    # unknowns: one intercept per group (free), a log factor per key and a log convolution factor per chip (ridge)
    n, m = len(rows), len(keys) + len(chips)
    a = np.zeros((n + m, len(groups) + m))
    y = np.zeros(n + m)
    for i, (g, k, share, v) in enumerate(rows):
        a[i, grp[g]], y[i] = 1.0, v
        a[i, len(groups) + col[k]] = 1.0
        a[i, len(groups) + chip_col[(chip_of(k[0]), k[1])]] = share
    a[n:, len(groups):] = math.sqrt(ridge) * np.eye(m)
    solution = np.linalg.lstsq(a, y, rcond=None)[0][len(groups):]
    out = []
    for k in keys:
        mine = [g for g, kk, _, _ in rows if kk == k]
        b, c = solution[col[k]], solution[chip_col[(chip_of(k[0]), k[1])]]
        out.append(SpeedCorrection(k[0], k[1], round(float(math.exp(b)), 4), len(mine), len({g[1][1] for g in mine}),
                                   round(float(math.exp(c)), 4)))
    return out

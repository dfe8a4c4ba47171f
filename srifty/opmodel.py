"""A training step's time on a GPU nobody profiled, from the operators the profiler counted.

On a GPU a small or medium training step is bound by launching kernels and by the host, not by
the arithmetic (docs/gpu-check.md: 16x the batch costs 0.8-2.4x the time on an H200), so a
spec-sheet FLOPS ratio applied to a CPU profile's time misses by 8-245x. This model instead
reads the profile's operator count (``job.operators``, srifty.profiling.opcount) and puts the
step on the target GPU as

    step = host + launch x kernels + device_factor x device + host_factor x host_input

- ``kernels``: the kernels one step launches on a GPU (forward, backward and the loss as counted,
  but for a recurrent layer run step by step, one per layer and direction as cuDNN fuses it; the
  optimizer's per-parameter operators as PyTorch's multi-tensor ``foreach`` kernels, which a CUDA
  optimizer uses by default; loading the batch runs on the host, not the GPU);
- ``device``: a roofline time of the counted operators on the target's spec figures: per phase
  the arithmetic operators at the peak FLOPS of the job's precision or at the memory bandwidth,
  whichever is slower, plus every other operator's bytes at the memory bandwidth;
- ``host_input``: the host's time loading and collating the next batch (after the optimizer
  step, before the next forward), as the profile measured it on its host;
- ``host`` and ``launch`` are fitted on real GPU measurements (scripts/fit_gpu_step.py, ``make
  gpu-step``; shipped in srifty/data/gpu_step_model.json with the bounds of its held-out errors,
  which set the interval). ``device_factor`` and ``host_factor`` stay at 1 (the roofline, the
  host's time as measured): freeing them made the held-out errors worse (docs/latency-model.md,
  "Compute on a GPU nobody profiled").

Counts scale with the batch: arithmetic and activation bytes in proportion, kernels and the bytes
of parameters, gradients and optimizer state not at all; so the same model gives compute at any
batch (flat while launch-bound, then rising with the arithmetic).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

FOREACH_TENSORS = 96  # tensors per multi-tensor-apply launch of a foreach optimizer (order of magnitude)
PARAMETERS = ("host_ms", "launch_us", "device_factor", "host_factor")
FITTED = ("host_ms", "launch_us")  # the others keep FIXED
FIXED = {"device_factor": 1.0, "host_factor": 1.0}
INTERVAL = ("q05", "q95", "other_gpu_q05", "other_gpu_q95")
STEP_MODEL_JSON = "data/gpu_step_model.json"


@dataclass(frozen=True)
class PhaseCount:
    """One phase of the counted iteration (srifty.profiling.opcount.FIELDS)."""

    kernels: float
    flop_kernels: float
    flops: float
    flop_bytes: float
    bytes: float
    param_bytes: float
    # the part of ``kernels`` a recurrent layer run step by step launched, and its layers times
    # directions, which a GPU runs as one fused operator each (srifty.profiling.opcount)
    recurrent_kernels: float = 0.0
    recurrent_units: float = 0.0

    @property
    def gpu_kernels(self) -> float:
        """The phase's kernels as a GPU launches them: a recurrent layer run step by step counts one
        kernel per layer and direction, as an LSTM fused by oneDNN or cuDNN does."""
        return max(self.kernels - self.recurrent_kernels, 0.0) + self.recurrent_units

    def at(self, scale: float) -> "PhaseCount":
        """The phase at ``scale`` x the counted batch: arithmetic and activation bytes in proportion,
        kernels and parameter-sized bytes unchanged."""
        activation = max(self.bytes - self.param_bytes, 0.0)
        moved = self.param_bytes + activation * scale
        flop_share = self.flop_bytes / self.bytes if self.bytes else 0.0
        return PhaseCount(self.kernels, self.flop_kernels, self.flops * scale, moved * flop_share, moved,
                          self.param_bytes, self.recurrent_kernels, self.recurrent_units)

    def device_s(self, peak_flops: float, bytes_per_s: float) -> float:
        """Roofline seconds on a device of ``peak_flops`` FLOP/s and ``bytes_per_s``."""
        arithmetic = max(self.flops / peak_flops, self.flop_bytes / bytes_per_s)
        return arithmetic + max(self.bytes - self.flop_bytes, 0.0) / bytes_per_s


@dataclass(frozen=True)
class OperatorCounts:
    """A profile's ``job.operators``: one iteration's operators at ``batch_size`` per worker."""

    batch_size: int
    param_tensors: int
    phases: dict[str, PhaseCount]

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None, default_batch: int | None = None) -> "OperatorCounts | None":
        if not doc or not doc.get("phases"):
            return None
        batch = doc.get("batch_size") or default_batch
        if not batch:
            return None
        phases = {name: PhaseCount(*(float(p.get(k) or 0) for k in ("kernels", "flop_kernels", "flops", "flop_bytes",
                                                                   "bytes", "param_bytes", "recurrent_kernels",
                                                                   "recurrent_units")))
                  for name, p in doc["phases"].items()}
        for name in ("forward", "backward", "optimizer", "input", "other"):
            phases.setdefault(name, PhaseCount(0, 0, 0, 0, 0, 0))
        return cls(int(batch), int(doc.get("param_tensors") or 0), phases)

    def gpu_kernels(self, phase: str) -> float:
        """Kernels ``phase`` launches on a GPU: as counted, except the optimizer's, whose
        per-parameter operators a CUDA optimizer runs as foreach kernels over many tensors, and a
        recurrent layer run step by step, which a GPU runs fused (:attr:`PhaseCount.gpu_kernels`)."""
        k = self.phases[phase].gpu_kernels
        if phase != "optimizer" or self.param_tensors <= 1:
            return k
        per_tensor = k / self.param_tensors
        return per_tensor * math.ceil(self.param_tensors / FOREACH_TENSORS)

    def at(self, batch: float) -> dict[str, PhaseCount]:
        """Every phase at per-worker ``batch`` (the optimizer's does not depend on it)."""
        scale = batch / self.batch_size
        return {name: (p if name == "optimizer" else p.at(scale)) for name, p in self.phases.items()}


@dataclass(frozen=True)
class StepTerms:
    """The model's terms for one (job, batch, GPU), split into the part before the gradients are
    ready (forward, loss and backward: ``compute``) and the part after (the optimizer, and loading
    the next batch: ``post``)."""

    compute_kernels: float
    compute_device_ms: float
    post_kernels: float
    post_device_ms: float
    host_input_ms: float

    def row(self) -> list[float]:
        """The regression row: the coefficients of ``PARAMETERS``."""
        return [1.0, (self.compute_kernels + self.post_kernels) / 1e3, self.compute_device_ms + self.post_device_ms,
                self.host_input_ms]


def step_terms(counts: OperatorCounts, batch: float, peak_tflops: float, mem_gbytes_per_s: float,
               host_input_ms: float) -> StepTerms:
    """The terms of the step at ``batch`` on a GPU of ``peak_tflops`` (the job's precision) and
    ``mem_gbytes_per_s``; ``host_input_ms`` is the host's time loading the batch (from the profile)."""
    phases = counts.at(batch)
    flops, bw = peak_tflops * 1e12, mem_gbytes_per_s * 1e9

    def ms(names: Sequence[str]) -> float:
        return sum(phases[n].device_s(flops, bw) for n in names) * 1e3

    before = ("forward", "other", "backward")  # "other" is mostly the loss, between forward and backward
    return StepTerms(sum(counts.gpu_kernels(n) for n in before), ms(before),
                     counts.gpu_kernels("optimizer"), ms(("optimizer",)), host_input_ms)


@dataclass(frozen=True)
class GpuStepModel:
    """The fitted parameters and how far the fit's held-out predictions missed: ``q05``/``q95`` are
    log(measured / predicted) bounds from leave-one-model-out predictions (srifty.cpu_to_gpu);
    ``other_gpu_q05``/``q95`` how far a compute time carried between GPUs misses
    (srifty.gpuspeed.TransferError), added in quadrature on a GPU the model was not fitted on."""

    host_ms: float
    launch_us: float
    device_factor: float
    host_factor: float
    q05: float
    q95: float
    other_gpu_q05: float
    other_gpu_q95: float
    fitted_on: tuple[str, ...]  # "model@batch:GPU" of every measurement fitted

    @property
    def gpus(self) -> frozenset[str]:
        return _gpus_of(self.fitted_on)

    def log_bounds(self, gpu_name: str) -> tuple[float, float]:
        """(low, high) log factors of the 5-95% interval of a step on ``gpu_name``."""
        if gpu_name in self.gpus:
            return self.q05, self.q95
        return -math.hypot(self.q05, self.other_gpu_q05), math.hypot(self.q95, self.other_gpu_q95)

    def fixed_ms(self, terms: StepTerms) -> tuple[float, float]:
        """(compute, post) milliseconds that do not depend on the GPU's speed: the host floor and
        the kernel launches before the gradients are ready, then the optimizer's launches and the
        host's loading of the next batch."""
        return (self.host_ms + self.launch_us * terms.compute_kernels / 1e3,
                self.launch_us * terms.post_kernels / 1e3 + self.host_factor * terms.host_input_ms)

    def split_ms(self, terms: StepTerms) -> tuple[float, float]:
        """(compute, post) milliseconds: :meth:`fixed_ms` plus the device time of each part."""
        compute, post = self.fixed_ms(terms)
        return (compute + self.device_factor * terms.compute_device_ms,
                post + self.device_factor * terms.post_device_ms)

    def step_ms(self, terms: StepTerms) -> float:
        return sum(self.split_ms(terms))

    def to_json(self) -> str:
        d = {k: round(getattr(self, k), 6) for k in PARAMETERS + INTERVAL}
        d["fitted_on"] = list(self.fitted_on)
        d["what"] = ("srifty.opmodel: a step on a GPU from a profile's operator count; written by `make gpu-step` "
                     "(scripts/fit_gpu_step.py); q05/q95 bound log(measured / predicted) of "
                     "leave-one-model-out predictions; other_gpu_q05/q95 are added in quadrature on another GPU")
        return json.dumps(d, indent=1) + "\n"

    @classmethod
    def read(cls, path: str | Path) -> "GpuStepModel | None":
        path = Path(path)
        if not path.exists():
            return None
        d = json.loads(path.read_text())
        return cls(*(float(d[k]) for k in PARAMETERS + INTERVAL), tuple(d.get("fitted_on") or ()))


@lru_cache(maxsize=64)
def _gpus_of(fitted_on: tuple[str, ...]) -> frozenset[str]:
    return frozenset(f.rsplit(":", 1)[-1] for f in fitted_on)


@lru_cache(maxsize=1)
def shipped_step_model() -> GpuStepModel | None:
    """The model shipped in srifty/data/gpu_step_model.json (None where it is missing)."""
    with resources.as_file(resources.files("srifty").joinpath(STEP_MODEL_JSON)) as path:
        return GpuStepModel.read(path)


def fit(rows: Sequence[StepTerms], measured_ms: Sequence[float],
        weights: Sequence[float] | None = None) -> tuple[float, float, float, float]:
    """``PARAMETERS``: the ``FITTED`` ones non-negative and minimising the squared *relative* error
    of the step (each row's times ``weights``, default 1), the others at ``FIXED``."""
    import numpy as np
    from scipy.optimize import nnls

    a = np.array([r.row() for r in rows], dtype=float)
    y = np.asarray(measured_ms, dtype=float)
    w = np.sqrt(np.ones_like(y) if weights is None else np.asarray(weights, dtype=float))
    fixed = [PARAMETERS.index(k) for k in FIXED]
    free = [PARAMETERS.index(k) for k in FITTED]
    rest = y - a[:, fixed] @ np.array([FIXED[PARAMETERS[i]] for i in fixed])
    solution, _ = nnls(a[:, free] / y[:, None] * w[:, None], rest / y * w)
    out = dict(FIXED)
    out.update({PARAMETERS[i]: float(v) for i, v in zip(free, solution)})
    return tuple(out[k] for k in PARAMETERS)  # type: ignore[return-value]

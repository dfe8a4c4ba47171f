"""From a CPU profile to a GPU: fitting srifty.opmodel on real GPU measurements, and checking it.

The evidence is pairs of one model's CPU profile (its operator count and host time; profiles/cpu,
``make profiles-cpu``) and a step that model took on one GPU:

- a one-GPU profile of the same script at the same batch (profiles/h200, ``make gpu-check``);
- a one-GPU run of an imported trace (profiles/pollux: the Pollux models on a T4), at any batch,
  paired with the CPU profile of the same architecture at the nearest batch
  (examples/pollux_models.py), whose operator count is carried to the trace's batch.

:func:`leave_one_model_out` predicts each GPU step with the parameters fitted on the *other*
models' pairs only; the quantiles of those held-out errors are the interval the shipped model
(:func:`fit_shipped`) carries. Every model weighs the same in a fit, however many batches it has.
"""
from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from srifty.catalog import Catalog
from srifty.configspec import parse_config
from srifty.errors import SriftyError
from srifty.features import FeatureBuilder, JobProfile, job_from_profiles, transfer_speeds
from srifty.gpuspeed import spec_hardware
from srifty.model import Predictor, gpu_transfer_error, predict_table
from srifty.opmodel import GpuStepModel, StepTerms, fit
from srifty.profile import Profile, load as load_profile
from srifty.oracle import ProfiledHostsCatalog, profiled_hosts

INTERVAL_QUANTILES = (0.05, 0.95)
# a held-out error quantile from a handful of models is itself uncertain: the shipped interval
# is this many times wider (in log terms) than the quantiles measured, and never narrower than
# MIN_LOG_HALF_WIDTH either side
INTERVAL_INFLATION = 1.5
MIN_LOG_HALF_WIDTH = math.log(1.25)


@dataclass(frozen=True)
class StepPair:
    """One example at one batch: the CPU profile's terms on the GPU, and the GPU's measured step."""

    model: str
    batch: int
    gpu: str
    cpu_ms: float
    measured_ms: float
    terms: StepTerms
    cpu_profile: Path
    gpu_instance_type: str
    cpu_batch: int  # the CPU profile's batch (``batch`` where the GPU profile is of the same script)


@dataclass(frozen=True)
class HeldOut:
    pair: StepPair
    predicted_ms: float
    interval_ms: tuple[float, float]
    spec_ratio_ms: float | None  # what the spec-sheet ratio alone gives (the function spec_ratio_ms)

    @property
    def error(self) -> float:
        return self.predicted_ms / self.pair.measured_ms - 1.0

    @property
    def inside(self) -> bool:
        return self.interval_ms[0] <= self.pair.measured_ms <= self.interval_ms[1]


def step_median_ms(p: Profile) -> float:
    return float(p.doc["summary"]["iteration_ms"]["median"])


def gpu_of(p: Profile, catalog: Catalog) -> str:
    itype = p.doc["cluster"]["instance_types"][0]
    return catalog.get(itype).gpu_name


def terms_on(cpu: Profile, batch: float, gpu_name: str, catalog: Catalog) -> StepTerms:
    """The CPU profile ``cpu``'s step terms at ``batch`` on ``gpu_name``: the job's
    (JobProfile.operator_terms) on that GPU's spec figures for the job's precision."""
    job = job_from_profiles([cpu])
    hw = spec_hardware(catalog.gpu_spec(gpu_name))
    return job.operator_terms(batch, hw.peak_tflops(job.precision), hw.mem_gbytes_per_s)


def _profiles(root: Path) -> dict[tuple[str, int], Profile]:
    out = {}
    for path in sorted(root.rglob("*.json")):
        p = load_profile(path)
        if p.kind == "training" and p.doc["cluster"].get("world_size") == 1:
            out[(p.model, int(p.doc["job"]["local_batch_size"]))] = p
    return out


def pairs(cpu_dir: str | Path, gpu_dir: str | Path, catalog: Catalog,
          traces: Sequence[JobProfile] = ()) -> list[StepPair]:
    """Every (model, batch) with a one-worker CPU profile in ``cpu_dir`` and a one-GPU profile in
    ``gpu_dir``; then every one-GPU run of the ``traces`` (imported jobs) on a GPU type whose model
    has a CPU profile in ``cpu_dir`` (the same name, and the same parameter count where both state
    one), with the one at the nearest batch."""
    cpu, gpu = _profiles(Path(cpu_dir)), _profiles(Path(gpu_dir)) if Path(gpu_dir).exists() else {}
    out = []
    for key in sorted(set(cpu) & set(gpu)):
        g = gpu_of(gpu[key], catalog)
        out.append(StepPair(key[0], key[1], g, step_median_ms(cpu[key]), step_median_ms(gpu[key]),
                            terms_on(cpu[key], key[1], g, catalog), Path(cpu[key].path),
                            gpu[key].doc["cluster"]["instance_types"][0], key[1]))
    for job in traces:
        # the CPU profiles of the same model: its name, and its parameter count where both state one
        batches = [b for m, b in cpu if m == job.model
                   and (not job.param_count or cpu[(m, b)].doc["job"].get("param_count") in (None, job.param_count))]
        for r in sorted(job.runs, key=lambda r: (r.instance_type, r.local_batch_size)):
            if r.world_size != 1 or r.mixed or not batches or not catalog.has(r.instance_type):
                continue
            g = catalog.get(r.instance_type).gpu_name
            if g is None:
                continue
            cpu_batch = min(batches, key=lambda b: abs(math.log(b / r.local_batch_size)))
            profile = cpu[(job.model, cpu_batch)]
            out.append(StepPair(job.model, r.local_batch_size, g, step_median_ms(profile), r.step_ms,
                                terms_on(profile, r.local_batch_size, g, catalog), Path(profile.path),
                                r.instance_type, cpu_batch))
    return out


def interval_logs(log_errors: Sequence[float]) -> tuple[float, float]:
    """(low, high) log factors of the interval from held-out log(measured / predicted)."""
    import numpy as np

    lo, hi = (float(np.quantile(log_errors, q)) for q in INTERVAL_QUANTILES)
    return min(lo * INTERVAL_INFLATION, -MIN_LOG_HALF_WIDTH), max(hi * INTERVAL_INFLATION, MIN_LOG_HALF_WIDTH)


def fit_model(train: Sequence[StepPair], q: tuple[float, float] = (0.0, 0.0),
              other_gpu: tuple[float, float] = (0.0, 0.0)) -> GpuStepModel:
    """The parameters fitted on ``train``, each model's pairs weighing 1 in all."""
    per_model = Counter(p.model for p in train)
    params = fit([p.terms for p in train], [p.measured_ms for p in train], [1.0 / per_model[p.model] for p in train])
    return GpuStepModel(*params, q[0], q[1], other_gpu[0], other_gpu[1],
                        tuple(sorted({f"{p.model}@{p.batch}:{p.gpu}" for p in train})))


def held_out_log_errors(all_pairs: Sequence[StepPair]) -> list[float]:
    """log(measured / predicted) of every pair, predicted by the fit on the other models' pairs."""
    out = []
    for model in sorted({p.model for p in all_pairs}):
        m = fit_model([p for p in all_pairs if p.model != model])
        out += [math.log(p.measured_ms / m.step_ms(p.terms)) for p in all_pairs if p.model == model]
    return out


def fit_shipped(all_pairs: Sequence[StepPair], other_gpu: tuple[float, float]) -> GpuStepModel:
    """The model fitted on every pair, with the interval of its leave-one-model-out errors;
    ``other_gpu``: the (q05, q95) log error of carrying compute between GPUs."""
    if len({p.model for p in all_pairs}) < 2:
        raise SriftyError("Fitting the GPU step model needs CPU and GPU profiles of two models or more.",
                          "Record them with `make profiles-cpu` and `make gpu-check`.")
    return fit_model(all_pairs, interval_logs(held_out_log_errors(all_pairs)), other_gpu)


def leave_one_model_out(all_pairs: Sequence[StepPair], catalog: Catalog, predictor: Predictor,
                        other_gpu: tuple[float, float]) -> list[HeldOut]:
    """Each model's GPU steps predicted from its CPU profile through srifty's prediction path
    (srifty.model.predict_table, as `srifty predict` does), the operator model fitted on the other
    models only, its interval calibrated on the other models' own held-out errors (nested: the
    held-out model's errors never set its own interval). ``spec_ratio_ms``: the baseline of
    :func:`spec_ratio_ms`."""
    return _held_out_by(all_pairs, lambda p: p.model, catalog, predictor, other_gpu)


def leave_one_gpu_out(all_pairs: Sequence[StepPair], catalog: Catalog, predictor: Predictor,
                      other_gpu: tuple[float, float]) -> list[HeldOut]:
    """As :func:`leave_one_model_out`, each GPU's steps from the operator model fitted on the other
    GPUs' pairs only: the GPU is one the model never saw, so its interval is the other-GPU one."""
    return _held_out_by(all_pairs, lambda p: p.gpu, catalog, predictor, other_gpu)


def _held_out_by(all_pairs: Sequence[StepPair], group: Callable[[StepPair], str], catalog: Catalog,
                 predictor: Predictor, other_gpu: tuple[float, float]) -> list[HeldOut]:
    out, jobs = [], {}
    for held in sorted({group(p) for p in all_pairs}):
        train = [p for p in all_pairs if group(p) != held]
        inner = held_out_log_errors(train) if len({p.model for p in train}) >= 2 else []
        q = interval_logs(inner) if inner else (-MIN_LOG_HALF_WIDTH, MIN_LOG_HALF_WIDTH)
        step_model = fit_model(train, q, other_gpu)
        for p in all_pairs:
            if group(p) != held:
                continue
            if p.cpu_profile not in jobs:
                cpu = load_profile(p.cpu_profile)
                jobs[p.cpu_profile] = job_from_profiles([cpu]), profiled_hosts([cpu], catalog)
            job, profiled = jobs[p.cpu_profile]
            hosts = ProfiledHostsCatalog(catalog, profiled)
            config = parse_config(f"1x{p.gpu_instance_type}:1")
            builder = FeatureBuilder(job, hosts, predictor.link_scale, step_model)
            got = predict_table(predictor, builder, [(config, float(p.batch))])
            out.append(HeldOut(p, float(got.iteration_ms[0]), (float(got.low_ms[0]), float(got.high_ms[0])),
                               spec_ratio_ms(p, job, builder)))
    return out


def spec_ratio_ms(pair: StepPair, job: JobProfile, builder: FeatureBuilder) -> float | None:
    """The CPU profile's step carried to the pair's GPU by the spec-sheet speed ratio alone, in
    proportion to the batch: the baseline the operator model is held against (srifty carries no CPU
    profile to a GPU that way: one without an operator count is not carried to a GPU at all)."""
    cpu, gpu = builder.hardware(job.instance_types[0]), builder.hardware(pair.gpu_instance_type)
    s_cpu, s_gpu = transfer_speeds(cpu, gpu, job.precision, job.conv_flop_share)
    if not (s_cpu and s_gpu):
        return None
    return pair.cpu_ms * pair.batch / pair.cpu_batch * s_cpu / s_gpu


@dataclass(frozen=True)
class CpuToGpuCheck:
    """The operator model's checks: every pair held out by model, and by GPU where there are two or more."""

    by_model: list[HeldOut]
    by_gpu: list[HeldOut]


def validate_cpu_to_gpu(cpu_dir: str | Path, gpu_dir: str | Path, catalog: Catalog,
                        predictor: Predictor, traces: Sequence[JobProfile] = ()) -> CpuToGpuCheck:
    """:func:`leave_one_model_out` and :func:`leave_one_gpu_out` over the :func:`pairs` of
    ``cpu_dir``, ``gpu_dir`` and ``traces``, a GPU the model never saw widened by the shipped
    GPU-to-GPU transfer error of the spec ratio alone, as the operator model takes another GPU's
    spec figures (srifty.model.gpu_transfer_error)."""
    spread = gpu_transfer_error()
    found = pairs(cpu_dir, gpu_dir, catalog, traces)
    other_gpu = spread.bounds(by_spec=True) if spread else (0.0, 0.0)
    by_gpu = leave_one_gpu_out(found, catalog, predictor, other_gpu) if len({p.gpu for p in found}) >= 2 else []
    return CpuToGpuCheck(leave_one_model_out(found, catalog, predictor, other_gpu), by_gpu)


def _summary_lines(checks: Sequence[HeldOut]) -> list[str]:
    """Per GPU and over all: median and mean absolute error (and the spec ratio's), and how many
    measurements fell inside their interval."""
    lines = []
    for gpu in sorted({c.pair.gpu for c in checks}) + ["all"]:
        some = [c for c in checks if gpu in ("all", c.pair.gpu)]
        errs = [abs(c.error) for c in some]
        spec = [abs(c.spec_ratio_ms / c.pair.measured_ms - 1) for c in some if c.spec_ratio_ms]
        lines.append(f"- {gpu}: median absolute error {100 * statistics.median(errs):.0f}% (spec ratio: "
                     f"{100 * statistics.median(spec):.0f}%), mean {100 * statistics.mean(errs):.0f}%; "
                     f"{sum(c.inside for c in some)} of {len(some)} measurements inside their interval.")
    return lines


def render(check: CpuToGpuCheck, shipped: GpuStepModel | None, command: str) -> str:
    """The docs/ACCURACY.md section."""
    checks = check.by_model
    lines = ["", "## From a CPU profile to a GPU: the operator model", "",
             "A model's step on one GPU predicted from its one-worker CPU profile (profiles/cpu): the examples' "
             "one-GPU profiles (profiles/h200) at the CPU profile's batch, and the one-GPU runs of the Pollux "
             "trace (a T4 in g4dn.12xlarge) at every batch it ran, from a CPU profile of the same architecture "
             "at one batch (examples/pollux_models.py; its counts carried to the trace's batch). The step comes "
             "from the operators the CPU profile counted (srifty/opmodel.py), the fixed costs fitted on the "
             "*other* models only, and the interval calibrated on the other models' own held-out errors. "
             "`spec ratio` is the CPU profile's step carried by the spec-sheet speed ratio (and in proportion "
             "to the batch), the baseline: srifty carries no CPU profile to a GPU that way. The trace's runs are "
             "AdaptDL jobs reading their real datasets; the CPU profiles train on synthetic batches held in memory. "
             f"Regenerated by `{command}`.", "",
             "| model | GPU | batch | CPU profile's batch | CPU step, ms | measured on the GPU, ms | predicted, ms "
             "[5-95%] | error % | inside | spec ratio, ms |",
             "|---|---|---:|---:|---:|---:|---|---:|---|---:|"]
    for c in checks:
        p = c.pair
        spec = f"{c.spec_ratio_ms:.3g}" if c.spec_ratio_ms else "–"
        lines.append(f"| {p.model} | {p.gpu} | {p.batch} | {p.cpu_batch} | {p.cpu_ms:.1f} | {p.measured_ms:.1f} | "
                     f"{c.predicted_ms:.1f} [{c.interval_ms[0]:.1f}-{c.interval_ms[1]:.1f}] | {100 * c.error:+.0f} | "
                     f"{'yes' if c.inside else 'no'} | {spec} |")
    lines += [""] + _summary_lines(checks)
    if check.by_gpu:
        lines += ["", "Each GPU held out instead: its steps predicted by the operator model fitted on the other GPUs' "
                      "pairs only, with the interval of a GPU the fit never saw (the leave-one-model-out errors of "
                      "those pairs, combined with how far the spec ratio carries compute between GPUs):", ""]
        lines += _summary_lines(check.by_gpu)
    if shipped is not None:
        lines += ["", f"The shipped parameters (srifty/data/gpu_step_model.json, `make gpu-step`, fitted on all "
                      f"{len({c.pair.model for c in checks})} models): host floor {shipped.host_ms:.2f} ms and "
                      f"{shipped.launch_us:.1f} µs per kernel; interval ×{math.exp(shipped.q05):.2f} to "
                      f"×{math.exp(shipped.q95):.2f} on the GPU fitted, ×{math.exp(shipped.log_bounds('')[0]):.2f} to "
                      f"×{math.exp(shipped.log_bounds('')[1]):.2f} on another."]
    return "\n".join(lines) + "\n"


def _pooled(checks: Sequence[HeldOut]) -> dict[str, Any]:
    errs = [abs(c.error) for c in checks]
    return {"pairs": len(checks), "median_abs_error": statistics.median(errs) if errs else None,
            "inside": sum(c.inside for c in checks)}


def summary(check: CpuToGpuCheck) -> dict[str, Any]:
    """The pooled figures of each way of holding out (``srifty validate --json``)."""
    return {"leave_one_model_out": _pooled(check.by_model), "leave_one_gpu_out": _pooled(check.by_gpu)}

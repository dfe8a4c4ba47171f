"""What srifty knows about one model from its profile files and corpora (:class:`JobProfile`)."""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from srifty import profile as profile_mod
from srifty.configspec import ClusterConfig, NodeGroup, from_placement, parse_config
from srifty.errors import SriftyError
from srifty.features.curve import ComputeCurve
from srifty.features.memory import MemoryFootprint, MemoryNeed, max_fitting_batch, memory_line, memory_need
from srifty.opmodel import OperatorCounts, StepTerms, step_terms

if TYPE_CHECKING:
    from srifty.features.hardware import Hardware
    from srifty.features.overlap import OverlapFit

LOOSE_PROFILE_CI = 0.05  # a profile whose median step time is known to worse than ±5% (95% CI) is flagged
BYTES_PER_PARAM = {"fp32": 4, "float32": 4, "tf32": 4, "fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2, "amp": 4}


@dataclass(frozen=True)
class Run:
    """One measured run: placement, per-worker batch, step time and (when known) sync time."""

    instance_type: str
    workers_per_node: tuple[int, ...]
    local_batch_size: int
    step_ms: float
    sync_ms: float | None = None
    post_ms: float | None = None  # optimizer + other (after the allreduces), when the profile splits it
    config: str | None = None  # the full configuration when it mixes instance types (e.g. 1xemu.medium+1xemu.small)
    rel_ci: float | None = None  # half-width of the step time's 95% confidence interval / median, when measured

    @property
    def mixed(self) -> bool:
        return self.config is not None and "+" in self.config and len(
            {g.split("x", 1)[-1].split(":")[0] for g in self.config.split("+")}) > 1

    @property
    def world_size(self) -> int:
        return sum(self.workers_per_node)

    @property
    def nodes(self) -> int:
        return len(self.workers_per_node)


@dataclass(frozen=True)
class ReadyTimes:
    """When each gradient bucket became ready, as shares of backward, and backward's share of the
    compute, as one worker's profile at ``batch`` recorded them."""

    batch: float
    backward_fraction: float
    fractions: tuple[float, ...]


@dataclass(frozen=True)
class PowerSgd:
    """The PowerSGD communication hook a script registers (the profile's ``job.powersgd``): its
    factors' rank, and the steps it runs DDP's plain allreduce before compressing."""

    rank: int
    start_iter: int
    profiled: bool = False  # the profile's measured steps ran the compression (its compute is in them)


@dataclass
class JobProfile:
    """Everything srifty knows about one model (job), from one or more profiles."""

    model: str
    runs: list[Run]
    param_count: int | None = None
    grad_bytes: int | None = None
    # grad_bytes was read off single-node sync times (srifty.features.overlap.estimate_gradient_size), not stated
    grad_bytes_estimated: bool = False
    precision: str | None = None
    backward_fraction: float | None = None
    bucket_bytes: list[float] | None = None
    ready_fractions: list[float] | None = None
    # the device the ready times were recorded on (the profile's cluster.device: "cpu" or "cuda"; None:
    # not said). A CPU's do not carry to a GPU (FeatureBuilder.recorded_ready)
    ready_device: str | None = None
    # every one-worker profile's ready times on that device with the same buckets, by batch (ready_times_at)
    ready_by_batch: tuple[ReadyTimes, ...] = ()
    sources: list[str] = field(default_factory=list)
    cpu_factors: dict[str, float] = field(default_factory=dict)  # emulated types: measured slowdown
    machine_cores: float | None = None  # emulated hosts: cores of the machine they share
    forward_flops_per_sample: float | None = None  # counted by the profiler (torch.utils.flop_counter)
    conv_flop_share: float | None = None  # the share of those FLOPs in convolutions (profiler or trace)
    operators: OperatorCounts | None = None  # one iteration's operators (srifty.profiling.opcount)
    memory: tuple[MemoryFootprint, ...] = ()  # one worker's tensor memory, per profiled batch (srifty.features.memory)
    ddp_models: int = 1  # DDP models the profiled script trains (job.ddp_models); the gradients are all of theirs
    accumulation: int = 1  # forward-backward passes per optimizer step (job.accumulation): a batch is their sum
    synced_passes: int = 1  # the backwards a step allreduces in (job.synced_passes; a GAN's: two)
    comm_hook: str | None = None  # the script's DDP communication hook (job.comm_hook; simulate.hook_wire_share)
    powersgd: PowerSgd | None = None  # where that hook is PowerSGD's
    # per recorded bucket (bucket_bytes), the bytes of each allreduce a compressing hook runs for it in turn
    bucket_messages: list[tuple[float, ...]] | None = None
    allreduced_bytes: int | None = None  # what a step handed DDP's communication hooks (job.allreduced_bytes)
    sharded_optimizer: str | None = None  # an optimizer that shards its state and gathers the parameters (ZeRO)
    # the optimizer's share of the time after the allreduces (optimizer + other) in the profile with the
    # fewest workers that splits it, and those workers: where the optimizer is sharded each of W workers
    # steps 1/W of the parameters (FeatureBuilder.simulated)
    optimizer_share: float | None = None
    optimizer_world: int = 1
    sync_batchnorm: tuple[int, ...] = ()  # the features of each SyncBatchNorm layer (job.sync_batchnorm)
    script: str | None = None  # the training script the profiles ran (as recorded)
    script_args: tuple[str, ...] = ()  # its arguments (as recorded)
    module: str | None = None  # where it ran as `python -m MODULE` (script: the module's file)
    batch_arg: str | None = None  # the script's option for its batch, given the batch after the arguments
    host_input_ms_per_sample: float = 0.0  # the host's input window per sample, where operators were counted
    # the window's part that does not grow with the batch, where profiles at two or more batches on
    # the operator count's host measured it (then ``host_input_ms_per_sample`` is the line's slope);
    # None: one batch measured, and the window is taken as growing with the batch (per sample)
    host_input_fixed_ms: float | None = None
    # backward_fraction read off the runs' sync times (srifty.features.overlap), when it was
    overlap_fit: "OverlapFit | None" = field(default=None, compare=False)
    # the read that kept the default instead (its sync or step times did not overturn it)
    overlap_check: "OverlapFit | None" = field(default=None, compare=False)

    def ready_times_at(self, batch: float) -> ReadyTimes | None:
        """The ready times recorded at the batch nearest ``batch`` (by ratio; the smaller on a tie),
        a GPU's backward hiding a bucket at a share that moves with its load; None where only one
        profile, or none, recorded them (``ready_fractions`` holds it)."""
        if len(self.ready_by_batch) < 2:
            return None
        return min(self.ready_by_batch, key=lambda r: (abs(math.log(max(batch, 1e-9) / r.batch)), r.batch))

    def operator_terms(self, batch: float, peak_tflops: float, mem_gbytes_per_s: float) -> StepTerms:
        """The operator model's terms of this job's step at ``batch`` on a GPU of ``peak_tflops`` (for
        the job's precision) and ``mem_gbytes_per_s``, from its counted operators and its host's
        loading time, scaled to ``batch`` (srifty.opmodel); the job must have an operator count."""
        if self.operators is None:
            raise SriftyError(f"The profiles of {self.model} have no operator count (job.operators).",
                              "Re-record them with this srifty (`srifty profile` counts one iteration's operators).")
        return step_terms(self.operators, batch, peak_tflops, mem_gbytes_per_s,
                          (self.host_input_fixed_ms or 0.0) + self.host_input_ms_per_sample * batch)

    def memory_need(self, hw: "Hardware", batch: float) -> MemoryNeed | None:
        """One worker's tensor memory at ``batch`` against a GPU of ``hw`` (None where either is unknown)."""
        return memory_need(self.memory, self._stated_grad_bytes(), hw.gpu_memory_gib, hw.gpu_name, hw.name, batch)

    def memory_line(self, batch: float) -> tuple[float, float] | None:
        """One worker's tensor memory near ``batch``: (GiB held whatever the batch, GiB per sample)."""
        return memory_line(self.memory, self._stated_grad_bytes(), batch)

    def max_fitting_batch(self, hw: "Hardware") -> float:
        """The largest per-worker batch one worker can hold on a GPU of ``hw`` (inf: not bounded)."""
        return max_fitting_batch(self.memory, self._stated_grad_bytes(), hw.gpu_memory_gib)

    def _stated_grad_bytes(self) -> float | None:
        """The gradient bytes the profiles state (or their parameter count does); None where estimated."""
        if self.grad_bytes and not self.grad_bytes_estimated:
            return float(self.grad_bytes)
        return float(self.param_count * _bytes_per_param(self.precision)) if self.param_count else None

    @property
    def instance_types(self) -> list[str]:
        """Types with runs of their own (a mixed run does not profile any one type)."""
        return sorted(self._runs_by_type())

    def _index(self, name: str, build: Callable[[list[Run]], Any]) -> Any:
        """``build(runs)``, built once for this list of runs (again if the list is replaced or
        grows): validation and prediction look runs up per row, over thousands of runs."""
        cached = self.__dict__.get(name)
        if cached is None or cached[0] is not self.runs or cached[1] != len(self.runs):
            cached = (self.runs, len(self.runs), build(self.runs))
            self.__dict__[name] = cached
        return cached[2]

    def _runs_by_type(self) -> dict[str, list[Run]]:
        """The runs of each type alone (mixed runs left out)."""
        def build(runs: list[Run]) -> dict[str, list[Run]]:
            table: dict[str, list[Run]] = {}
            for r in (r for r in runs if not r.mixed):
                table.setdefault(r.instance_type, []).append(r)
            return table

        return self._index("_by_type", build)

    def restricted(self, keep: Callable[[Run], bool], forget_size: bool = False) -> "JobProfile":
        """The same job seeing only the runs ``keep`` accepts (for held-out validation)."""
        out = replace(self, runs=[r for r in self.runs if keep(r)])
        if forget_size:
            out = replace(out, param_count=None, grad_bytes=None, grad_bytes_estimated=False, bucket_bytes=None,
                          bucket_messages=None, ready_fractions=None)
        return out

    def compute_curve(self, instance_type: str) -> ComputeCurve | None:
        runs = self._runs_by_type().get(instance_type, [])
        if not runs:
            return None
        smallest = min(r.world_size for r in runs)
        pts = [(r.local_batch_size, r.step_ms - (r.sync_ms or 0.0) - (r.post_ms or 0.0)) for r in runs
               if r.world_size == smallest and (smallest == 1 or r.sync_ms is not None)]
        if not pts:  # multi-worker runs without sync times: their step time bounds compute from above
            pts = [(r.local_batch_size, r.step_ms) for r in runs if r.world_size == smallest]
        return ComputeCurve.from_points(pts)

    def compute_rel_ci(self, instance_type: str) -> float | None:
        """The loosest relative 95% CI half-width of the single-worker runs ``instance_type``'s
        compute is read from (None when no profile states one)."""
        cis = [r.rel_ci for r in self._runs_by_type().get(instance_type, [])
               if r.world_size == 1 and r.rel_ci is not None]
        return max(cis) if cis else None

    def post_curve(self, instance_type: str) -> ComputeCurve | None:
        """Optimizer + other time per step on ``instance_type``, from the runs that split it with the
        fewest workers (those :meth:`compute_curve` reads)."""
        runs = [r for r in self._runs_by_type().get(instance_type, []) if r.post_ms is not None]
        smallest = min((r.world_size for r in runs), default=1)
        pts = [(r.local_batch_size, r.post_ms) for r in runs if r.world_size == smallest]
        return ComputeCurve.from_points(pts) if pts else None

    def measured_run(self, config: "ClusterConfig", local_batch_size: int) -> Run | None:
        """The measured run (the median one) of exactly this configuration and per-worker batch:
        the same hosts with the same workers each, in any order; None when never run."""
        def hosts(c: "ClusterConfig") -> tuple[tuple[str, int], ...]:
            return tuple(sorted((g.instance_type, int(g.workers_per_node or 0))
                                for g in c.groups for _ in range(g.count)))

        def build(all_runs: list[Run]) -> dict[tuple[Any, int], list[Run]]:
            table: dict[tuple[Any, int], list[Run]] = {}
            for r in all_runs:
                table.setdefault((hosts(run_config(r)), r.local_batch_size), []).append(r)
            return {k: sorted(v, key=lambda r: r.step_ms) for k, v in table.items()}

        runs = self._index("_measured_index", build).get((hosts(config), local_batch_size))
        return runs[len(runs) // 2] if runs else None

    def measured(self, instance_type: str, workers_per_node: Sequence[int], local_batch_size: int) -> float | None:
        """Median measured step time of exactly this placement and batch (placement order ignored)."""
        run = self.measured_run(from_placement(instance_type, list(workers_per_node)), local_batch_size)
        return run.step_ms if run else None

    def measured_rel_ci(self, run: Run) -> float:
        """A measured run's relative 95% CI half-width (0 where its profile states none): the
        interval of a configuration that was measured as it is."""
        return run.rel_ci if run.rel_ci is not None else 0.0


def pass_batch(local_batch_size: int, passes: int) -> int:
    """What a script reads as ``SRIFTY_BATCH_SIZE`` to train at ``local_batch_size`` per worker: that
    batch, or one pass's share of it where it accumulates gradients over ``passes`` passes a step."""
    return max(1, round(local_batch_size / passes))


def profile_command(job: JobProfile, options: str, *local_batches: float) -> str:
    """``srifty profile`` with ``options`` of the job as it was profiled (its script or module, its
    own arguments, its option for the batch) at each of ``local_batches`` per worker: one pass's
    batch where the script accumulates gradients, as the script reads it."""
    batches = sorted({pass_batch(round(b), job.accumulation) for b in local_batches if b >= 1})
    target = f"-m {shlex.quote(job.module)}" if job.module else shlex.quote(job.script or "SCRIPT")
    batch = f" --batch-size {','.join(map(str, batches))}" if batches else ""
    if batch and job.batch_arg:
        batch += f" --batch-arg={shlex.quote(job.batch_arg)}"
    args = " -- " + " ".join(map(shlex.quote, job.script_args)) if job.script_args else ""
    return f"srifty profile {target} {options}{batch}{args}"


def _bytes_per_param(precision: str | None) -> int:
    return BYTES_PER_PARAM.get((precision or "fp32").lower(), 4)


def job_from_profiles(profiles: Sequence[Any]) -> JobProfile:
    """Merge profiles (srifty.profile.Profile) of one model into a :class:`JobProfile`."""
    training = [p for p in profiles if p.kind == "training"]
    if not training:
        raise SriftyError("No training profile given (only collectives).", "Give a profile of the model's training job.")
    models = sorted({p.model for p in training})
    if len(models) > 1:
        raise SriftyError(f"The profiles given describe several models ({', '.join(models)}).",
                          "Give the profiles of one model (one file, or a directory holding one model's profiles).")
    job = JobProfile(model=models[0], runs=[])
    # single-worker profiles first: their split of forward/backward and bucket ready times are
    # compute alone, not compute slowed by overlapping communication
    training = sorted(training, key=lambda p: int((p.doc.get("cluster") or {}).get("world_size") or 1))
    counted_on = ""  # the type of the profile whose operator count the job keeps
    timelines: list[tuple[str | None, list[float], ReadyTimes]] = []  # one worker's: (device, buckets, times)
    for p in training:
        doc = p.doc
        j = doc.get("job") or {}
        job.param_count = job.param_count or j.get("param_count")
        job.grad_bytes = job.grad_bytes or j.get("grad_bytes")
        job.precision = job.precision or j.get("precision")
        job.ddp_models = max(job.ddp_models, int(j.get("ddp_models") or 1))
        job.accumulation = max(job.accumulation, int(j.get("accumulation") or 1))
        job.synced_passes = max(job.synced_passes, int(j.get("synced_passes") or 1))
        job.comm_hook = job.comm_hook or j.get("comm_hook")
        if job.powersgd is None and j.get("powersgd"):
            job.powersgd = PowerSgd(int(j["powersgd"]["rank"]), int(j["powersgd"]["start_iter"]),
                                    bool(j["powersgd"].get("profiled")))
        job.allreduced_bytes = job.allreduced_bytes or j.get("allreduced_bytes")
        job.sharded_optimizer = job.sharded_optimizer or j.get("sharded_optimizer")
        job.sync_batchnorm = job.sync_batchnorm or tuple(int(c) for c in j.get("sync_batchnorm") or ())
        if job.conv_flop_share is None and j.get("conv_flop_share") is not None:
            job.conv_flop_share = float(j["conv_flop_share"])
        if j.get("forward_flops") and j.get("local_batch_size") and not job.forward_flops_per_sample:
            job.forward_flops_per_sample = float(j["forward_flops"]) / float(j["local_batch_size"])
        if job.operators is None and j.get("operators"):
            job.operators = OperatorCounts.from_json(j["operators"], j.get("local_batch_size"))
            if job.operators is not None:
                job.host_input_ms_per_sample = (input_window_ms(doc) or 0.0) / job.operators.batch_size
                counted_on = first_instance_type(doc)
        footprint = MemoryFootprint.from_json(j.get("memory"), j.get("local_batch_size"))
        if footprint is not None and all(f.batch_size != footprint.batch_size for f in job.memory):
            job.memory += (footprint,)
        if not job.script and j.get("script"):
            job.script, job.script_args, job.module = j["script"], tuple(j.get("args") or ()), j.get("module")
            job.batch_arg = j.get("batch_arg")
        job.sources.append(p.path or "(profile)")
        cl = doc["cluster"]
        itype = cl["instance_types"][0]
        config = cl.get("config") if len(set(cl["instance_types"])) > 1 else None
        if config is None and len(set(cl["instance_types"])) > 1:  # older profiles: rebuild it from the hosts
            config = "+".join(f"1x{h['instance_type']}" for h in cl.get("hosts") or [])
        for h in cl.get("hosts") or []:
            f = (h.get("spec") or {}).get("cpu_factor")
            if f and h.get("instance_type"):
                job.cpu_factors.setdefault(h["instance_type"], float(f))
            spec = h.get("spec") or {}
            if spec.get("emulated") and (spec.get("usable_cpus") or spec.get("logical_cpus")):
                job.machine_cores = job.machine_cores or float(spec.get("usable_cpus") or spec["logical_cpus"])
        if doc.get("runs"):
            for r in doc["runs"]:
                job.runs.append(Run(itype, tuple(r["workers_per_node"]), int(r["local_batch_size"]),
                                    float(r["step_time_ms"]), r.get("sync_time_ms")))
            continue
        s = doc.get("summary") or {}
        if not s or not s.get("iteration_ms") or not j.get("local_batch_size"):
            continue
        it_ms = float(s["iteration_ms"]["median"])
        exposed = float((s.get("exposed_comm_ms") or {}).get("median") or 0.0)
        fwd = float((s.get("forward_ms") or {}).get("median") or 0.0)
        bwd = float((s.get("backward_compute_ms") or {}).get("median") or 0.0)
        post = None
        if fwd + bwd > 0 and s.get("optimizer_ms"):
            optimizer = float(s["optimizer_ms"]["median"])
            post = optimizer + float((s.get("other_ms") or {}).get("median") or 0.0)
            if post > 0 and job.optimizer_share is None:  # the profiles come fewest workers first
                job.optimizer_share, job.optimizer_world = optimizer / post, sum(cl["workers_per_node"])
            post = min(post, max(it_ms - exposed - fwd - bwd, 0.0)) if it_ms > fwd + bwd else None
        lo, hi = s["iteration_ms"].get("ci_low"), s["iteration_ms"].get("ci_high")
        rel_ci = (float(hi) - float(lo)) / 2.0 / it_ms if lo is not None and hi is not None and it_ms > 0 else None
        # where the measured steps ran PowerSGD's compression, the time backward waited is mostly the hook's
        # own compute (at one worker, all of it): kept in the step's compute, not read as communication
        hook_compute = bool((j.get("powersgd") or {}).get("profiled"))
        job.runs.append(Run(itype, tuple(cl["workers_per_node"]), int(j["local_batch_size"]), it_ms,
                            0.0 if hook_compute else exposed, post, config, rel_ci))
        buckets = [b for b in (s.get("buckets") or []) if b.get("bytes")]
        timed = bool(buckets) and fwd + bwd > 0 and all(b.get("ready_ms") is not None for b in buckets)
        # ready times recorded on a GPU over a CPU's, which do not carry to GPUs (FeatureBuilder.recorded_ready),
        # with that GPU's split of forward and backward, which places them
        on_gpu_over_cpu = timed and job.ready_device == "cpu" and cl.get("device") not in (None, "cpu")
        if fwd + bwd > 0 and (job.backward_fraction is None or on_gpu_over_cpu):
            job.backward_fraction = bwd / (fwd + bwd)
        buckets.sort(key=lambda b: (b.get("ready_ms") is None, b.get("ready_ms") or 0.0, -b["index"]))
        # ready_ms counts from the start of the step's last backward (docs/profile-format.md), one pass's
        pass_bwd = bwd / int(j.get("accumulation") or 1)
        ready = ReadyTimes(float(j["local_batch_size"]), bwd / (fwd + bwd), tuple(
            min(max(float(b["ready_ms"]) / max(pass_bwd, 1e-9), 0.0), 1.0) for b in buckets)) if timed else None
        if ready is not None and sum(cl["workers_per_node"]) == 1:
            timelines.append((cl.get("device"), [float(b["bytes"]) for b in buckets], ready))
        if buckets and (job.bucket_bytes is None or on_gpu_over_cpu):
            job.bucket_bytes = [float(b["bytes"]) for b in buckets]
            sent = {int(b["index"]): b["sent"] for b in j.get("buckets") or [] if b.get("sent")}
            job.bucket_messages = ([tuple(float(m) for m in sent[int(b["index"])]) for b in buckets]
                                   if buckets and all(int(b["index"]) in sent for b in buckets) else None)
            job.ready_fractions, job.ready_device = None, None
            if ready is not None:
                job.ready_fractions, job.ready_device = list(ready.fractions), cl.get("device")
            if not job.grad_bytes:
                job.grad_bytes = int(sum(job.bucket_bytes))
    if job.ready_fractions is not None:
        job.ready_by_batch = tuple(sorted((t for device, sizes, t in timelines
                                           if device == job.ready_device and sizes == job.bucket_bytes),
                                          key=lambda t: t.batch))
    if not job.runs:
        raise SriftyError(f"The profiles of {job.model} hold no measured iteration time.",
                          "Re-record them with `srifty profile` (a complete run).")
    if job.operators is not None:
        windows = input_windows([p.doc for p in training if first_instance_type(p.doc) == counted_on])
        if len({b for b, _ in windows}) >= 2:
            job.host_input_fixed_ms, job.host_input_ms_per_sample = input_window_line(windows)
    return job


def first_instance_type(doc: dict[str, Any]) -> str:
    """The (first) instance type a profile document ran on."""
    return str(((doc.get("cluster") or {}).get("instance_types") or [""])[0])


def input_window_ms(doc: dict[str, Any]) -> float | None:
    """A training profile's median input window (``summary.input_ms``), None where it has none."""
    window = (((doc.get("summary") or {}).get("input_ms")) or {}).get("median")
    return None if window is None else float(window)


def input_windows(docs: Sequence[dict[str, Any]]) -> list[tuple[float, float]]:
    """(per-worker batch, median input window ms) of the training profiles that measured one."""
    pairs = ((input_window_ms(doc), (doc.get("job") or {}).get("local_batch_size")) for doc in docs)
    return [(float(batch), window) for window, batch in pairs if window is not None and batch]


def input_window_line(windows: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(fixed ms, ms per sample) of the host's input window over the batch, non-negative, least
    squares on the windows measured at two or more batches."""
    import numpy as np
    from scipy.optimize import nnls

    batches = np.array([b for b, _ in windows])
    (fixed, per_sample), _ = nnls(np.c_[np.ones_like(batches), batches], np.array([w for _, w in windows]))
    return float(fixed), float(per_sample)


def load_job(path: str | Path) -> JobProfile:
    """One profile file, or a directory with one model's profiles (several instance types)."""
    return job_from_profiles(profile_mod.load_many([str(path)]))


def load_corpus(paths: Sequence[str | Path]) -> list[JobProfile]:
    """Training profiles under ``paths`` grouped by model (collectives profiles are skipped)."""
    by_model: dict[str, list[Any]] = {}
    for p in profile_mod.load_many(list(paths)):
        if p.kind == "training":
            by_model.setdefault(p.model, []).append(p)
    jobs = [job_from_profiles(ps) for _, ps in sorted(by_model.items())]
    # A CPU factor is a property of the host type (measured by calibration), not of a job: every
    # job may use the factors any profile in the corpus recorded, e.g. for a type it never ran on.
    shared: dict[str, float] = {}
    for j in jobs:
        for t, f in j.cpu_factors.items():
            shared.setdefault(t, f)
    for j in jobs:
        j.cpu_factors = {**shared, **j.cpu_factors}
    return jobs


def run_config(run: Run) -> ClusterConfig:
    """The run's configuration with its workers per node (mixed runs keep every host's type)."""
    if not run.mixed:
        return from_placement(run.instance_type, run.workers_per_node)
    types = [g.instance_type for g in parse_config(run.config or "").groups for _ in range(g.count)]
    if len(types) != len(run.workers_per_node):
        raise SriftyError(f"Run configuration {run.config} does not match its {len(run.workers_per_node)} node(s).")
    groups: list[NodeGroup] = []
    for t, w in zip(types, run.workers_per_node):
        if groups and groups[-1].instance_type == t and groups[-1].workers_per_node == w:
            groups[-1] = NodeGroup(groups[-1].count + 1, t, w)
        else:
            groups.append(NodeGroup(1, t, int(w)))
    return ClusterConfig(tuple(groups))

"""Profiling backends: run a DDP script under torchrun, supervise it, build the profile.

One small interface, several backends (``local`` here; the emulated cluster and EC2
plug in the same way): a backend turns a :class:`ProfileRequest` into a
:class:`LaunchPlan` (the dry run: exact commands and environment) and runs it. The
supervision loop is shared: it watches the workers' record files for progress, enforces
the time caps and the hang timeout, and on every exit path (success, failure, hang,
Ctrl-C) terminates every process the run started and writes what was measured.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil

from srifty import hostinfo, profile
from srifty.errors import ProfilingFailed, SriftyError
from srifty.profiling.parentwatch import RUN_ID_ENV, Watchdog, child_dies_with_us, kill_run_processes


def _matmul_tf32(model: dict[str, Any]) -> bool:
    """Whether float32 matmuls may use TF32 ("highest", PyTorch's default, keeps them IEEE)."""
    return model.get("float32_matmul_precision") in ("high", "medium")


def tf32_flop_share(model: dict[str, Any]) -> float | None:
    """The share of a float32 model's FLOPs that PyTorch lets run on TF32 tensor cores where the
    GPU has them: convolutions when cuDNN may use TF32 (PyTorch's default), matmuls and attention
    when the float32 matmul precision is "high" or "medium" (the default "highest" keeps them
    IEEE float32). None when the forward's FLOPs were not counted."""
    conv = model.get("conv_flop_share")
    if conv is None:
        return None
    return conv * bool(model.get("cudnn_allow_tf32")) + (1.0 - conv) * _matmul_tf32(model)


def job_precision(model: dict[str, Any]) -> str | None:
    """The profile's ``precision``, which picks the FLOPS figure that transfers compute across GPUs
    (srifty.features.Hardware.flops_kind): "amp" under autocast to float16/bfloat16 (the
    parameters and gradients stay float32); "tf32" for float32 parameters when most of the
    forward's FLOPs may run in TF32 (:func:`tf32_flop_share`: a CNN under PyTorch's defaults, a
    transformer with ``torch.set_float32_matmul_precision("high")``); else the parameters' dtype."""
    if model.get("autocast_dtype") in ("float16", "bfloat16"):
        return "amp"
    if model.get("grad_dtype") == "float32":
        share = tf32_flop_share(model)
        if share is None:  # FLOPs not counted: the matmul switch alone decides
            share = float(_matmul_tf32(model))
        if share >= 0.5:
            return "tf32"
    return model.get("grad_dtype")


@dataclass
class ProfileRequest:
    """Everything ``srifty profile`` was asked to do."""

    script: str | None
    script_args: list[str] = field(default_factory=list)
    nproc: int = 1
    batch_size: int | None = None
    max_seconds: float = 30.0
    max_iterations: int = 2000
    min_iterations: int = 20
    target_rel_ci: float = 0.02
    hang_timeout: float = 120.0
    startup_timeout: float = 180.0
    model_name: str | None = None
    instance_type: str = "local"
    device: str = "auto"
    collectives: bool = False
    world_sizes: list[int] = field(default_factory=list)
    min_bytes: int = 4 * 1024
    max_bytes: int = 64 * 1024 * 1024
    repeats: int = 10
    hosts: str | None = None
    spec: str = "configs/emulated.yaml"
    calibrate: bool = False
    # --backend ec2
    instance_types: list[str] = field(default_factory=list)
    spot: bool = False
    nodes: int = 1
    placement_group: bool = False  # EC2: the nodes in a cluster placement group of the run
    # per host type, the per-worker batch its workers get (SRIFTY_BATCH_SIZE; a mix of types on the
    # emulated backend); types not named get batch_size
    batch_by_type: dict[str, int] = field(default_factory=dict)
    region: str | None = None
    max_cost: float | None = None
    s3_uri: str | None = None
    ami: str | None = None
    instance_profile: str | None = None
    time_cap: float | None = None
    requirements: str | None = None
    run_id: str | None = None
    yes: bool = False  # --yes: consent to the estimated cost without being asked
    # asks the user to consent to a launch's cost (the CLI's prompt, set only when stdin is a terminal)
    confirm: Callable[[str], bool] | None = field(default=None, repr=False, compare=False)

    def validate(self) -> None:
        if self.nproc < 1:
            raise SriftyError(f"--nproc must be at least 1 (got {self.nproc}).")
        if self.batch_size is not None and self.batch_size < 1:
            raise SriftyError(f"--batch-size must be a positive number of samples per worker (got {self.batch_size}).")
        if self.max_seconds <= 0:
            raise SriftyError(f"--max-seconds must be positive (got {self.max_seconds}).")
        if not 0 < self.target_rel_ci < 1:
            raise SriftyError(f"--target-ci is a relative half-width such as 0.02 for 2% (got {self.target_rel_ci}).")
        if self.collectives:
            if any(w < 2 for w in self.world_sizes):
                raise SriftyError("--world-sizes: an allreduce needs at least 2 workers; give sizes like 2,4.")
            if not (0 < self.min_bytes <= self.max_bytes):
                raise SriftyError("--min-bytes must be positive and not above --max-bytes.")
            return
        if not self.script:
            raise SriftyError("No training script given.", "Usage: srifty profile SCRIPT [-- SCRIPT_ARGS]; or --collectives.")
        path = Path(self.script)
        if not path.is_file():
            raise SriftyError(
                f"Training script {self.script!r} does not exist.",
                "Give the path of a DDP training script, e.g. `srifty profile examples/cnn_resnet.py --nproc 2`.",
            )

    @property
    def model(self) -> str:
        if self.model_name:
            return self.model_name
        return Path(self.script).stem if self.script else "collectives"


@dataclass
class WorkerCommand:
    """One process to start: argv, environment additions, and where it runs."""

    argv: list[str]
    env: dict[str, str]
    host: str = "localhost"
    wrapper: list[str] = field(default_factory=list)

    def shell(self) -> str:
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return " ".join(x for x in (" ".join(map(shlex.quote, self.wrapper)), envs, shlex.join(self.argv)) if x)


@dataclass
class LaunchPlan:
    """What a backend will run: the dry-run view of a profiling job."""

    backend: str
    commands: list[WorkerCommand]
    run_dir: str
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        lines = [f"# srifty profile: backend {self.backend}, records in {self.run_dir}"]
        lines += [f"# {n}" for n in self.notes]
        lines += [c.shell() for c in self.commands]
        return "\n".join(lines)


@dataclass
class RunOutcome:
    """How the supervised processes ended."""

    returncodes: list[int | None]
    reason: str | None  # None: ended by themselves
    wall_seconds: float
    log_tail: str
    signum: int = int(signal.SIGINT)  # reason "interrupted": the signal that did it (SIGTERM/SIGHUP: Terminated)


ProgressFn = Callable[[dict[str, Any]], None]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_record(path: Path) -> dict[str, Any] | None:
    """One worker's flushed records, or None while it does not exist (or is being replaced)."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def read_rank_records(run_dir: str, prefix: str = "rank") -> list[dict[str, Any]]:
    paths = sorted(Path(run_dir).glob(f"{prefix}[0-9]*.json"), key=lambda q: int(q.stem[len(prefix):]))
    return [r for r in map(read_record, paths) if r is not None]


class Supervisor:
    """Runs a plan's processes and watches them until they end, hang or run out of time."""

    def __init__(self, plan: LaunchPlan, run_id: str, log_path: str) -> None:
        self.plan = plan
        self.run_id = run_id
        self.log_path = log_path
        self.procs: list[subprocess.Popen[bytes]] = []
        self.seen_pids: set[int] = set()

    def _spawn(self) -> None:
        """Start the plan's commands, each in a session of its own (a Ctrl-C reaches srifty only,
        which stops them in order), armed to get SIGTERM should srifty die first (torchrun then
        stops its workers; see srifty.profiling.parentwatch)."""
        log = open(self.log_path, "ab")
        arm = child_dies_with_us(signal.SIGTERM)
        try:
            for cmd in self.plan.commands:
                env = dict(os.environ)
                env.update(cmd.env)
                env[RUN_ID_ENV] = self.run_id
                self.procs.append(
                    subprocess.Popen(
                        [*cmd.wrapper, *cmd.argv],
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                        preexec_fn=arm,
                    )
                )
        finally:
            log.close()

    def _track_children(self) -> None:
        for p in self.procs:
            try:
                parent = psutil.Process(p.pid)
                self.seen_pids.add(p.pid)
                self.seen_pids.update(c.pid for c in parent.children(recursive=True))
            except psutil.Error:
                pass

    def run(
        self,
        poll: Callable[[], dict[str, Any]],
        startup_timeout: float,
        hang_timeout: float,
        hard_limit: float,
        progress: ProgressFn | None = None,
    ) -> RunOutcome:
        """Run until all processes exit. ``poll`` returns {'iterations': n, 'done': bool}.

        Call it in the thread that should own the processes: they are armed to stop when that
        thread ends, and a watchdog stops them if srifty is killed before its clean-up runs."""
        t0 = time.monotonic()
        reason: str | None = None
        signum = int(signal.SIGINT)
        last_count, last_change = -1, t0
        watchdog = Watchdog(self.run_id)
        try:
            self._spawn()
            while True:
                self._track_children()
                codes = [p.poll() for p in self.procs]
                if all(c is not None for c in codes):
                    break
                if any(c not in (None, 0) for c in codes):
                    # one process failed: give the others a moment to notice, then stop them
                    deadline = time.monotonic() + 10
                    while time.monotonic() < deadline and any(p.poll() is None for p in self.procs):
                        time.sleep(0.2)
                    break
                state = poll()
                now = time.monotonic()
                count = int(state.get("iterations", 0))
                if count != last_count:
                    last_count, last_change = count, now
                if progress is not None:
                    progress(state)
                if now - t0 > hard_limit:
                    reason = "time_cap"
                    break
                if count <= 0 and now - t0 > startup_timeout:
                    reason = "hung"
                    break
                if count > 0 and now - last_change > hang_timeout:
                    reason = "hung"
                    break
                time.sleep(0.25)
        except KeyboardInterrupt as exc:
            reason, signum = "interrupted", int(getattr(exc, "signum", signal.SIGINT))
        finally:
            self._track_children()
            # ask torchrun to stop its workers first, so they flush their records
            for p in self.procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, signal.SIGTERM)
                    except OSError:
                        pass
            end = time.monotonic() + 8
            while time.monotonic() < end and any(p.poll() is None for p in self.procs):
                time.sleep(0.1)
            kill_run_processes(self.run_id, self.seen_pids)
            for p in self.procs:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:  # pragma: no cover - killed above
                    pass
            # not reached if the clean-up is cut short (a second Ctrl-C): srifty then exits
            # unreleased, and the watchdog stops what is left
            watchdog.release()
        tail = ""
        try:
            tail = Path(self.log_path).read_text(errors="replace")[-6000:]
        except OSError:
            pass
        return RunOutcome([p.returncode for p in self.procs], reason, time.monotonic() - t0, tail, signum)


class ProfilingBackend(ABC):
    """A way to run profiling jobs. Subclasses plan; the base class owns the flow."""

    name = "base"

    @abstractmethod
    def plan(self, request: ProfileRequest, run_dir: str) -> LaunchPlan:
        """The exact commands this backend would run (no side effects)."""

    def cluster_block(self, request: ProfileRequest, world_size: int, device: str) -> dict[str, Any]:
        spec = hostinfo.host_spec()
        return {
            "launcher": self.name,
            "backend": "nccl" if device == "cuda" else "gloo",
            "device": device,
            "world_size": world_size,
            "nodes": 1,
            "workers_per_node": [world_size],
            "instance_types": [request.instance_type],
            "hosts": [{"name": spec["hostname"], "instance_type": request.instance_type, "workers": world_size, "spec": spec}],
        }

    def dry_run(self, request: ProfileRequest) -> str:
        request.validate()
        return self.plan(request, "<run-dir>").describe()

    def preflight(self, request: ProfileRequest) -> None:
        """Refuse, before anything starts, a run this backend's machines cannot hold (none here)."""

    def profile(self, request: ProfileRequest, out: str | None, progress: ProgressFn | None = None) -> dict[str, Any]:
        """Run the job and write its profile to ``out``; raise ProfilingFailed on failure.

        On failure the partial profile (status 'partial') is still written to ``out``.
        """
        request.validate()
        self.preflight(request)
        run_dir = tempfile.mkdtemp(prefix="srifty-run-")
        run_id = uuid.uuid4().hex[:12]
        try:
            if request.collectives:
                doc = self._profile_collectives(request, run_dir, run_id, out, progress)
            else:
                doc = self._profile_training(request, run_dir, run_id, out, progress)
        except ProfilingFailed as failure:
            # keep the workers' output for the user to read; everything else is in the profile
            failure.hint = (failure.hint or "") + f" The workers' output is in {run_dir}/."
            raise
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        shutil.rmtree(run_dir, ignore_errors=True)
        return doc

    # ----- training jobs --------------------------------------------------------
    def _profile_training(
        self, request: ProfileRequest, run_dir: str, run_id: str, out: str | None, progress: ProgressFn | None
    ) -> dict[str, Any]:
        supervisor = Supervisor(self.plan(request, run_dir), run_id, os.path.join(run_dir, "workers.log"))

        def poll() -> dict[str, Any]:  # progress is rank 0's: read only its file
            r0 = read_record(Path(run_dir) / "rank0.json")
            return {
                "iterations": len(r0["iterations"]) if r0 else 0,
                "rel_ci": r0.get("current_rel_ci") if r0 else None,
                "target": request.target_rel_ci,
                "max_seconds": request.max_seconds,
            }

        hard_limit = request.startup_timeout + request.max_seconds + request.hang_timeout
        outcome = supervisor.run(poll, request.startup_timeout, request.hang_timeout, hard_limit, progress)
        ranks = read_rank_records(run_dir)
        doc = self._training_doc(request, ranks, outcome)
        failure = self._failure(request, ranks, outcome, doc)
        if failure is not None:
            doc["status"] = "partial"
            doc["partial_reason"] = failure.message
            if out and doc["ranks"] and any(r["iterations"] for r in doc["ranks"]):
                failure.partial_path = profile.save_partial(doc, out)
                failure.hint = (failure.hint or "") + (f" The {sum(len(r['iterations']) for r in doc['ranks'])} "
                                                       f"iteration records measured are kept in "
                                                       f"{failure.partial_path} (marked partial).")
            raise failure
        if out:
            profile.save(doc, out)
        return doc

    def _training_doc(self, request: ProfileRequest, ranks: list[dict[str, Any]], outcome: RunOutcome) -> dict[str, Any]:
        import torch

        world = max((r.get("world_size", 1) for r in ranks), default=request.nproc) or request.nproc
        device = "cuda" if any((r.get("device") or {}).get("type") == "cuda" for r in ranks) else "cpu"
        model = next((r["model"] for r in ranks if r.get("model")), {})
        layout = next((r["bucket_layout"] for r in ranks if r.get("bucket_layout")), [])
        batch_sizes = [it.get("batch_size") for r in ranks for it in r.get("iterations", []) if it.get("batch_size")]
        detected = max(set(batch_sizes), key=batch_sizes.count) if batch_sizes else None
        local_bs = detected or request.batch_size
        summary, warmup, achieved = profile.summarise_training(ranks, world, local_bs)
        warnings = []
        if request.batch_size and detected and detected != request.batch_size:
            warnings.append(
                f"--batch-size {request.batch_size} was requested but the model saw batches of {detected}: "
                "the script does not read SRIFTY_BATCH_SIZE (or --batch-size); the profile records the batch it saw."
            )
        if summary and achieved is not None and achieved > request.target_rel_ci:
            warnings.append(
                f"the median iteration time is known to +/-{achieved:.1%} (95% CI), looser than the "
                f"{request.target_rel_ci:.0%} target: raise --max-seconds for a tighter figure."
            )
        rank0 = next((r for r in ranks if r.get("rank") == 0), ranks[0] if ranks else {})
        stop_reason = outcome.reason or rank0.get("stop_reason") or "worker_failed"
        if stop_reason not in ("converged", "time_cap", "iteration_cap", "script_finished", "interrupted", "worker_failed", "hung", "terminated"):
            stop_reason = "terminated"
        cluster = self.cluster_block(request, world, device)
        for h in cluster["hosts"]:
            devs = [r.get("device") for r in ranks if r.get("device")]
            if devs:
                h["spec"]["device"] = devs[0]
        return {
            "schema_version": profile.SCHEMA_VERSION,
            "kind": "training",
            "status": "complete",
            "partial_reason": None,
            "stop_reason": stop_reason,
            "created_at": profile.utc_now(),
            "srifty_version": profile.__version__,
            "job": {
                "model": request.model,
                "script": os.path.relpath(request.script) if request.script else None,
                "script_sha256": _sha256(request.script) if request.script else None,
                "args": list(request.script_args),
                "local_batch_size": local_bs,
                "requested_batch_size": request.batch_size,
                "param_count": model.get("param_count"),
                "grad_bytes": model.get("grad_bytes"),
                "grad_dtype": model.get("grad_dtype"),
                "precision": job_precision(model),
                "autocast_dtype": model.get("autocast_dtype"),
                "forward_flops": model.get("forward_flops"),
                "tf32_flop_share": tf32_flop_share(model),
                "operators": model.get("operators"),
                "bucket_cap_mb": model.get("bucket_cap_mb"),
                "buckets": layout,
            },
            "cluster": cluster,
            "environment": profile.environment_info(
                torch.__version__, ".".join(map(str, torch.cuda.nccl.version())) if device == "cuda" else None
            ),
            "measurement": {
                "target_rel_ci": request.target_rel_ci,
                "achieved_rel_ci": achieved,
                "decision_rel_ci": rank0.get("current_rel_ci"),
                "min_iterations": request.min_iterations,
                "max_iterations": request.max_iterations,
                "max_seconds": request.max_seconds,
                "warmup_iterations": warmup,
                "iterations_recorded": len(profile.merge_iterations(ranks)),
                "iterations_used": summary["iteration_ms"]["n"] if summary else 0,
                "wall_seconds": round(outcome.wall_seconds, 3),
            },
            "summary": summary,
            "ranks": [
                {"rank": r.get("rank", i), "host": r.get("host_label") or r.get("hostname", ""), "iterations": r.get("iterations", []), "error": r.get("error")}
                for i, r in enumerate(ranks)
            ],
            "warnings": warnings,
        }

    def _failure(
        self, request: ProfileRequest, ranks: list[dict[str, Any]], outcome: RunOutcome, doc: dict[str, Any]
    ) -> ProfilingFailed | None:
        script = request.script or "the job"
        measured = doc["measurement"]["iterations_recorded"]
        if outcome.reason == "interrupted":
            failure = ProfilingFailed(f"Profiling of {script} was interrupted (Ctrl-C or SIGTERM) after {measured} iterations; all workers were stopped.")
            failure.exit_code = 128 + outcome.signum
            return failure
        if outcome.reason == "hung":
            if measured == 0:
                return ProfilingFailed(
                    f"{script} made no training iteration within {request.startup_timeout:.0f} s of starting; "
                    "the workers were stopped.",
                    "A worker may be stuck (waiting for a peer, a dead data loader, a deadlock) or start-up is slow: "
                    "check the script with `torchrun` directly, or raise --startup-timeout.",
                )
            return ProfilingFailed(
                f"{script} stopped making progress after {measured} iterations: no iteration finished for "
                f"{request.hang_timeout:.0f} s, so srifty took the workers to be hung and stopped them.",
                "A worker may be stuck in a collective that another rank never joined; raise --hang-timeout if "
                "iterations are really that slow.",
            )
        if outcome.reason == "time_cap":
            return ProfilingFailed(
                f"{script} ran past the hard time limit of {request.startup_timeout + request.max_seconds + request.hang_timeout:.0f} s and was stopped.",
                "Raise --max-seconds, or check why iterations are so slow.",
            )
        errors = [(r.get("rank", i), r["error"]) for i, r in enumerate(ranks) if r.get("error")]
        bad_codes = [c for c in outcome.returncodes if c not in (0, None)]
        if errors or bad_codes:
            return self._worker_error(request, errors, outcome)
        if not measured:
            reason = "the script finished without completing a training iteration"
            r0 = next((r for r in ranks if r.get("rank") == 0), None)
            if r0:
                if r0.get("forward_calls") and not r0.get("backward_calls"):
                    reason = f"the script ran {r0['forward_calls']} forward passes but never called backward()"
                elif not r0.get("forward_calls") and not r0.get("explicit_api"):
                    reason = "the script never ran a forward pass through a DistributedDataParallel model"
                elif r0.get("forward_calls") and r0.get("backward_calls") and not r0.get("step_calls"):
                    reason = "the script ran forward and backward but never an optimizer step()"
            return ProfilingFailed(
                f"Nothing to measure in {script}: {reason}.",
                "srifty measures training iterations (DDP forward, loss.backward(), optimizer.step()); make sure the "
                "script trains for more than a few steps, or mark iterations with srifty.step().",
            )
        return None

    @staticmethod
    def _worker_error(request: ProfileRequest, errors: list[tuple[int, dict[str, Any]]], outcome: RunOutcome) -> ProfilingFailed:
        script = request.script or "the job"
        peer_words = ("connection closed", "connection reset", "broken pipe", "peer", "timed out", "gloo", "nccl", "socket")
        primary = next((e for e in errors if not any(w in e[1]["message"].lower() for w in peer_words)), errors[0] if errors else None)
        oom_words = ("out of memory", "can't allocate memory", "cannot allocate memory", "outofmemoryerror", "defaultcpuallocator")
        killed = [c for c in outcome.returncodes if c is not None and c in (-9, 137)]
        if primary is not None:
            rank, err = primary
            text = f"{err['type']}: {err['message']}".strip()
            first_line = text.splitlines()[0][:400] if text else err["type"]
            if any(w in text.lower() for w in oom_words):
                bs = request.batch_size
                return ProfilingFailed(
                    f"Rank {rank} of {script} ran out of memory{f' at --batch-size {bs}' if bs else ''}: {first_line}",
                    "The per-worker batch does not fit: try a smaller --batch-size (srifty passes it as SRIFTY_BATCH_SIZE), "
                    "or fewer workers per machine with --nproc.",
                )
            return ProfilingFailed(
                f"Rank {rank} of {script} failed with {first_line}",
                "Fix the script (its full traceback is in the workers' output, or run it under `torchrun`), "
                "then profile again.",
            )
        if killed:
            return ProfilingFailed(
                f"A worker of {script} was killed (SIGKILL), most likely by the kernel's out-of-memory killer.",
                "Try a smaller --batch-size or fewer workers with --nproc.",
            )
        tail = "\n".join(outcome.log_tail.strip().splitlines()[-5:])
        return ProfilingFailed(
            f"The workers of {script} exited with status {', '.join(map(str, outcome.returncodes))} before srifty got "
            f"their records. Last lines of their output: {tail}",
            "Run the script under `torchrun` directly to see what fails.",
        )

    # ----- collectives microbenchmark --------------------------------------------
    def _profile_collectives(
        self, request: ProfileRequest, run_dir: str, run_id: str, out: str | None, progress: ProgressFn | None
    ) -> dict[str, Any]:
        import torch

        results: list[dict[str, Any]] = []
        total_wall = 0.0
        world_sizes = request.world_sizes or [request.nproc]
        reason = "sweep_complete"
        failure: ProfilingFailed | None = None
        for w in world_sizes:
            sub = ProfileRequest(**{**request.__dict__, "nproc": w, "world_sizes": [w]})
            sub_dir = os.path.join(run_dir, f"w{w}")
            os.makedirs(sub_dir, exist_ok=True)
            sub_plan = self.plan(sub, sub_dir)
            sup = Supervisor(sub_plan, run_id, os.path.join(sub_dir, "workers.log"))

            def poll(d: str = sub_dir) -> dict[str, Any]:
                recs = read_rank_records(d, "collectives_rank")
                r0 = recs[0] if recs else {}
                return {"iterations": len(r0.get("results", [])), "world_size": w}

            outcome = sup.run(poll, request.startup_timeout, request.hang_timeout, request.startup_timeout + request.max_seconds * 4 + request.hang_timeout, progress)
            total_wall += outcome.wall_seconds
            recs = read_rank_records(sub_dir, "collectives_rank")
            r0 = next((r for r in recs if r.get("rank") == 0), None)
            if r0:
                results.extend(r0.get("results", []))
            if outcome.reason or any(c != 0 for c in outcome.returncodes):
                reason = outcome.reason or "worker_failed"
                err = next((r["error"] for r in recs if r.get("error")), None)
                failure = ProfilingFailed(
                    f"The allreduce microbenchmark at world size {w} did not finish ({reason}"
                    f"{': ' + err['type'] + ': ' + err['message'].splitlines()[0] if err else ''}).",
                    "Check that the machine can run that many workers; the sizes measured so far are kept.",
                )
                break
        cluster = self.cluster_block(request, max(world_sizes), "cuda" if (torch.cuda.is_available() and request.device != "cpu") else "cpu")
        doc = {
            "schema_version": profile.SCHEMA_VERSION,
            "kind": "collectives",
            "status": "partial" if failure else "complete",
            "partial_reason": failure.message if failure else None,
            "stop_reason": reason,
            "created_at": profile.utc_now(),
            "srifty_version": profile.__version__,
            "cluster": cluster,
            "environment": profile.environment_info(torch.__version__),
            "measurement": {
                "target_rel_ci": request.target_rel_ci,
                "max_seconds": request.max_seconds,
                "wall_seconds": round(total_wall, 3),
            },
            "collectives": results,
            "warnings": [],
        }
        if failure is not None:
            if out and results:
                failure.partial_path = profile.save_partial(doc, out)
            raise failure
        if out:
            profile.save(doc, out)
        return doc


def check_gpu_count(request: ProfileRequest, gpus: int) -> None:
    """Refuse a local run that would put two workers on one GPU (NCCL stops on a duplicate
    GPU); ``gpus`` is the number of CUDA GPUs the workers would use (0: CPU workers)."""
    if gpus <= 0:
        return
    workers = max(request.world_sizes) if request.collectives and request.world_sizes else request.nproc
    if workers <= gpus:
        return
    flag = "--world-sizes" if request.collectives and request.world_sizes else "--nproc"
    if request.collectives and gpus < 2:
        fix = "The allreduce sweep needs two GPUs or more: run it where there are (--backend ec2)"
    else:
        fix = f"Use {flag} {gpus} or fewer here (more GPUs: --backend ec2)"
    raise SriftyError(
        f"{flag} asks for {workers} workers on this machine, but it has {gpus} CUDA GPU"
        f"{'s' if gpus > 1 else ''}; NCCL runs one worker per GPU.",
        f"{fix}, or add --device cpu to run CPU workers with gloo.",
    )


def local_gpu_count(device: str) -> int:
    """CUDA GPUs the local workers will use: none with ``--device cpu`` or without CUDA."""
    if device == "cpu":
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


class LocalBackend(ProfilingBackend):
    """All workers on this machine, started by torchrun (``--standalone``)."""

    name = "local"

    def preflight(self, request: ProfileRequest) -> None:
        check_gpu_count(request, local_gpu_count(request.device))

    def plan(self, request: ProfileRequest, run_dir: str) -> LaunchPlan:
        port = _free_port() if run_dir != "<run-dir>" else 29500
        torchrun = [
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes", "1", "--nproc-per-node", str(request.nproc),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
            "--max-restarts", "0",
        ]
        env = worker_env(request, run_dir)
        if request.collectives:
            argv = [*torchrun, "-m", "srifty.profiling.collectives"]
        else:
            argv = [*torchrun, "-m", "srifty.profiling.worker", os.path.abspath(str(request.script)), *request.script_args]
        return LaunchPlan(self.name, [WorkerCommand(argv, env)], run_dir)


def worker_env(request: ProfileRequest, run_dir: str) -> dict[str, str]:
    """Environment variables that carry the request to the workers."""
    env = {
        "SRIFTY_PROFILE_DIR": run_dir,
        "SRIFTY_MAX_SECONDS": str(request.max_seconds),
        "SRIFTY_MAX_ITERATIONS": str(request.max_iterations),
        "SRIFTY_MIN_ITERATIONS": str(request.min_iterations),
        "SRIFTY_TARGET_REL_CI": str(request.target_rel_ci),
        "SRIFTY_DEVICE": request.device,
        "PYTHONUNBUFFERED": "1",
    }
    if request.device == "cpu":  # the script's own device choice too (scripts pick cuda when they see a GPU)
        env["CUDA_VISIBLE_DEVICES"] = ""
    if request.batch_size:
        env["SRIFTY_BATCH_SIZE"] = str(request.batch_size)
    if request.collectives:
        env["SRIFTY_COLL_MIN_BYTES"] = str(request.min_bytes)
        env["SRIFTY_COLL_MAX_BYTES"] = str(request.max_bytes)
        env["SRIFTY_COLL_REPEATS"] = str(request.repeats)
    return env


# Backends by name, imported when chosen ("module:class").
BACKENDS: dict[str, str] = {
    "local": "srifty.profiling.launcher:LocalBackend",
    "emulated": "srifty.profiling.emulated:EmulatedBackend",
    "ec2": "srifty.profiling.ec2:Ec2Backend",
}


def get_backend(name: str) -> ProfilingBackend:
    try:
        module, cls = BACKENDS[name].split(":")
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, list(BACKENDS), n=1)
        raise SriftyError(
            f"Unknown profiling backend {name!r}.",
            (f"Did you mean {close[0]!r}? " if close else "") + f"Available: {', '.join(sorted(BACKENDS))}.",
        ) from None
    import importlib

    return getattr(importlib.import_module(module), cls)()

"""What a profiling job is asked to do and how it will be started: :class:`ProfileRequest`
(everything ``srifty profile`` was given, and its checks), :class:`WorkerCommand` and
:class:`LaunchPlan` (the dry-run view every backend produces), and :func:`worker_env` (the
environment that carries the request to the workers). Shared by every backend.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any, Callable

from srifty.errors import SriftyError


# When a worker stops measuring (the defaults of `srifty profile`, the request and the worker's settings)
MAX_SECONDS = 30.0
MAX_ITERATIONS = 2000
MIN_ITERATIONS = 20
TARGET_REL_CI = 0.02


# The script's option for its batch (ProfileRequest.batch_arg), as the workers find it
BATCH_ARG_ENV = "SRIFTY_BATCH_ARG"


def check_batch_arg(name: str, batch_size: int | None) -> None:
    """A one-paragraph error unless ``name`` is an option a script can take its batch from and
    there is a batch to give it."""
    if not name.startswith("-") or name.strip("-") == "" or any(c.isspace() or c == "=" for c in name):
        raise SriftyError(f"--batch-arg takes the script's option for its per-worker batch, such as "
                          f"--per_device_train_batch_size, not {name!r}.",
                          "Write it with its dashes and without a value: `--batch-arg=--per_device_train_batch_size`.")
    if not batch_size:
        raise SriftyError(f"--batch-arg {name} appends the batch from --batch-size to the script's arguments, "
                          "and no --batch-size was given.", "Add --batch-size N (the batch per worker).")


@dataclass
class ProfileRequest:
    """Everything ``srifty profile`` was asked to do."""

    script: str | None
    script_args: list[str] = field(default_factory=list)
    # run as ``python -m MODULE`` (``script``: its file, module_file), from the current directory
    module: str | None = None
    nproc: int = 1
    batch_size: int | None = None
    # the script's own option for its per-worker batch (``--per_device_train_batch_size``): each
    # worker appends it and its SRIFTY_BATCH_SIZE to the script's arguments (worker.main)
    batch_arg: str | None = None
    max_seconds: float = MAX_SECONDS
    max_iterations: int = MAX_ITERATIONS
    min_iterations: int = MIN_ITERATIONS
    target_rel_ci: float = TARGET_REL_CI
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
    subnet_ids: list[str] = field(default_factory=list)  # EC2: subnets to launch into (default: ec2 config)
    security_group_ids: list[str] = field(default_factory=list)  # EC2: the instances' groups (default: ec2 config)
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
        if self.batch_arg is not None:
            check_batch_arg(self.batch_arg, self.batch_size)
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
        if self.module:
            return self.module.rsplit(".", 1)[-1]
        return Path(self.script).stem if self.script else "collectives"

    def worker_argv(self) -> list[str]:
        """What each worker (``python -m srifty.profiling.worker``) runs: the script's path, or
        ``-m`` and the module, then the script's arguments."""
        target = ["-m", self.module] if self.module else [os.path.abspath(str(self.script))]
        return [*target, *self.script_args]

    def type_out(self, out: str, instance_type: str) -> str:
        """Where one EC2 type's profile goes: ``out`` itself for one type, else
        ``<stem>.<type>.profile.json`` beside it, one file per type."""
        if len(self.instance_types) <= 1:
            return out
        p = Path(out)
        stem = p.name[:-len(".profile.json")] if p.name.endswith(".profile.json") else p.stem
        return str(p.with_name(f"{stem}.{instance_type}.profile.json"))

    def outs(self, out: str) -> list[str]:
        """Every profile a run with ``out`` writes: one per EC2 type, or ``out``."""
        return [self.type_out(out, t) for t in self.instance_types] if len(self.instance_types) > 1 else [out]


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


ProgressFn = Callable[[dict[str, Any]], None]


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
        if request.batch_arg:
            env[BATCH_ARG_ENV] = request.batch_arg
    if request.collectives:
        env["SRIFTY_COLL_MIN_BYTES"] = str(request.min_bytes)
        env["SRIFTY_COLL_MAX_BYTES"] = str(request.max_bytes)
        env["SRIFTY_COLL_REPEATS"] = str(request.repeats)
    return env


def module_file(name: str, directory: str | None = None) -> str:
    """The file ``python -m name`` runs from ``directory`` (default: the current one), found as
    the import system finds it, without running the packages' code; a one-paragraph error where
    there is none."""
    where = [os.path.abspath(directory or os.getcwd()), *sys.path[1:]]
    spec = None
    for i, part in enumerate(name.split(".")):
        if not part.isidentifier() or (i and (spec is None or not spec.submodule_search_locations)):
            spec = None
            break
        spec = PathFinder.find_spec(part, where if i == 0 else list(spec.submodule_search_locations))
        if spec is None:
            break
    if spec is not None and spec.submodule_search_locations:  # a package: its __main__
        spec = PathFinder.find_spec("__main__", list(spec.submodule_search_locations))
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        raise SriftyError(f"No module {name!r} to run from {directory or os.getcwd()}.",
                          "Run srifty from the directory where `python -m MODULE` runs your training, or give the "
                          "script's path instead of --module.")
    return spec.origin

"""Profiling backends: run a DDP script under torchrun, supervise it, build the profile.

One small interface, several backends (``local``; the emulated cluster and EC2 plug in the
same way): a backend turns a :class:`ProfileRequest` into a :class:`LaunchPlan` (the dry run:
exact commands and environment) and runs it. The supervision loop is shared: it watches the
workers' record files for progress, enforces the time caps and the hang timeout, and on every
exit path (success, failure, hang, Ctrl-C) terminates every process the run started and
writes what was measured.

This module picks a backend by name (:func:`get_backend`) and is the import path the rest of
srifty uses; the pieces live in their own modules: ``request`` (the request, the plan, the
workers' environment), ``supervisor`` (running and stopping the processes, reading the workers'
records), ``backend`` (the backend protocol and the shared flow), ``document`` (assembling the
training profile, the job's precision), ``diagnosis`` (why a run failed) and ``local`` (the
local torchrun backend and its GPU check).
"""

from __future__ import annotations

from srifty.errors import SriftyError
from srifty.profiling.backend import ProfilingBackend
from srifty.profiling.document import job_precision, tf32_flop_share
from srifty.profiling.local import LocalBackend, check_gpu_count, local_gpu_count
from srifty.profiling.request import LaunchPlan, ProfileRequest, ProgressFn, WorkerCommand, worker_env
from srifty.profiling.supervisor import RunOutcome, Supervisor, read_rank_records, read_record

__all__ = [
    "ProfilingBackend", "job_precision", "tf32_flop_share", "LocalBackend", "check_gpu_count", "local_gpu_count",
    "LaunchPlan", "ProfileRequest", "ProgressFn", "WorkerCommand", "worker_env", "RunOutcome", "Supervisor",
    "read_rank_records", "read_record", "BACKENDS", "get_backend",
]

# Backends by name, imported when chosen ("module:class").
BACKENDS: dict[str, str] = {
    "local": "srifty.profiling.local:LocalBackend",
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

"""Instrumentation installed into every profiled worker, from outside the user's script.

``srifty profile`` starts each torchrun worker as ``python -m srifty.profiling.worker
SCRIPT ARGS``; the worker calls :func:`install` and then runs SCRIPT unchanged. The
recorder hooks into:

- ``DistributedDataParallel.__init__``: forward pre/post hooks on every DDP module
  (iteration boundaries, forward time, per-worker batch size) and a communication hook
  that wraps DDP's own allreduce (or the user's hook) to time each gradient bucket;
- ``torch.autograd.backward`` (which ``Tensor.backward`` calls): backward wall time;
- the global optimizer step pre/post hooks: optimizer time;
- what a script does to launch itself, which torchrun has done (``selflaunch``: spawning its
  own workers, a rendezvous or a world of its own), which raises at once;
- ``argparse.ArgumentParser.error``: what the script's arguments lacked, for the error;
- FSDP, FSDP2's ``fully_shard``, DeepSpeed and ``nn.DataParallel`` (``otherparallel``): training
  that is not DDP, for the error where no DDP forward runs.

An iteration runs from one DDP forward call to the next forward call that follows an
optimizer step, so gradient accumulation (several forwards per step) is one iteration.
Scripts can mark iterations themselves with ``srifty.step()``.

Rank 0 decides when the median iteration time is known well enough (or a cap is hit)
and posts the iteration at which all ranks stop to the job's c10d store; every rank
then leaves the script at that same iteration by raising :class:`ProfilingComplete`.
Records are flushed to ``$SRIFTY_PROFILE_DIR/rank<R>.json`` by a background thread,
so a crash or a kill still leaves the iterations measured so far.

This module installs the recorder in the process and keeps it (:func:`active_recorder`);
the parts live in:

- ``recorder``: :class:`Recorder` (iterations, operator count, stop rule, the explicit
  ``srifty.step()`` API, the progress file), :class:`WorkerSettings`, :class:`ProfilingComplete`;
- ``ddp_hooks``: :class:`DdpHooks`, the hooks on DDP, backward, gradient buckets and the
  optimizer step;
- ``timing``: the clocks, the open iteration and its buckets, an iteration's record;
- ``modelmath``: the model's math precision and one forward's FLOPs.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Callable

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.parallel import DistributedDataParallel

from srifty.profiling import otherparallel, powersgd, selflaunch
from srifty.profiling.ddp_hooks import (
    _ORIGINAL_DDP_INIT,
    _ORIGINAL_REGISTER_BUILTIN_COMM_HOOK,
    _ORIGINAL_REGISTER_COMM_HOOK,
    DdpHooks,
    comm_hook_name,
    wrapped_hooks,
)
from srifty.profiling.modelmath import forward_flops, math_precision
from srifty.profiling.recorder import STOP_KEY, STOP_MARGIN, ProfilingComplete, Recorder, WorkerSettings
from srifty.profiling.timing import Clock, CudaClock

_ACTIVE: "Recorder | None" = None


def active_recorder() -> "Recorder | None":
    """The recorder of this process, when it runs under ``srifty profile``."""
    return _ACTIVE


_ORIGINAL_SYNC_BATCHNORM_FORWARD = nn.SyncBatchNorm.forward
# DDP refuses a CPU module with SyncBatchNorm layers at construction (a private check of torch's)
_ORIGINAL_SYNC_BATCHNORM_CHECK = getattr(DistributedDataParallel, "_passing_sync_batchnorm_handle", None)


def sync_batchnorm_forward(self: nn.SyncBatchNorm, input: torch.Tensor) -> torch.Tensor:
    """SyncBatchNorm on a CPU, where PyTorch runs it on GPUs only (it raises), as plain batch norm:
    its statistics stay on each worker, and srifty simulates their synchronisation across workers
    (job.sync_batchnorm); on a GPU, as it is."""
    if input.device.type == "cpu":
        return _BatchNorm.forward(self, input)
    return _ORIGINAL_SYNC_BATCHNORM_FORWARD(self, input)


def sync_batchnorm_check(self: DistributedDataParallel, module: nn.Module) -> None:
    """DDP's check of SyncBatchNorm layers, but for a CPU module, whose layers run as plain batch
    norm under srifty (:func:`sync_batchnorm_forward`)."""
    if self.device_type != "cpu" and _ORIGINAL_SYNC_BATCHNORM_CHECK is not None:
        _ORIGINAL_SYNC_BATCHNORM_CHECK(self, module)


def watch_usage_errors(recorder: Recorder) -> None:
    """Keep what the script's argparse refuses (``recorder.usage_error``) with the very exit it
    raises, which the error then quotes: a script may catch that exit and go on to another."""
    original = argparse.ArgumentParser.error

    def usage_error(parser: argparse.ArgumentParser, message: str) -> Any:
        try:
            return original(parser, message)
        except SystemExit as exc:
            recorder.usage_error = (exc, f"{parser.prog}: error: {message}")
            raise

    argparse.ArgumentParser.error = usage_error  # type: ignore[method-assign]


def install(settings: WorkerSettings) -> Recorder:
    """Patch DDP, autograd and the optimizer so that ``settings``' recorder sees them."""
    global _ACTIVE
    use_cuda = torch.cuda.is_available() and os.environ.get("SRIFTY_DEVICE", "auto") != "cpu"
    if use_cuda:
        torch.cuda.set_device(settings.local_rank % max(1, torch.cuda.device_count()))
    recorder = Recorder(settings, CudaClock() if use_cuda else Clock())
    _ACTIVE = recorder

    def ddp_init(self: DistributedDataParallel, *args: Any, **kwargs: Any) -> None:
        _ORIGINAL_DDP_INIT(self, *args, **kwargs)
        recorder.attach_ddp(self)

    def script_hook(ddp: DistributedDataParallel, name: str) -> None:
        """The script registers its own communication hook: srifty places none, and says which."""
        ddp._srifty_user_hook = True  # type: ignore[attr-defined]
        ddp._srifty_hook_registered = True  # type: ignore[attr-defined]
        recorder.model.setdefault("comm_hook", name)

    def register_comm_hook(self: DistributedDataParallel, state: Any, hook: Callable[..., Any]) -> Any:
        name = comm_hook_name(hook)
        script_hook(self, name)
        compression = powersgd.settings(state, [comm_hook_name(h) for h in wrapped_hooks(hook)])
        if compression:
            recorder.model.setdefault("powersgd", compression)
        return _ORIGINAL_REGISTER_COMM_HOOK(self, state, recorder.timed_comm_hook(hook, compression))

    def register_builtin_comm_hook(self: DistributedDataParallel, comm_hook_type: Any) -> Any:
        script_hook(self, f"builtin:{getattr(comm_hook_type, 'name', comm_hook_type)}")
        return _ORIGINAL_REGISTER_BUILTIN_COMM_HOOK(self, comm_hook_type)

    selflaunch.guard(settings)
    watch_usage_errors(recorder)
    otherparallel.watch(recorder.model)

    nn.SyncBatchNorm.forward = sync_batchnorm_forward  # type: ignore[method-assign]
    if _ORIGINAL_SYNC_BATCHNORM_CHECK is not None:
        DistributedDataParallel._passing_sync_batchnorm_handle = sync_batchnorm_check  # type: ignore[method-assign]
    DistributedDataParallel.__init__ = ddp_init  # type: ignore[method-assign]
    DistributedDataParallel.register_comm_hook = register_comm_hook  # type: ignore[method-assign]
    DistributedDataParallel._register_builtin_comm_hook = register_builtin_comm_hook  # type: ignore[method-assign]
    if not getattr(torch.autograd.backward, "_srifty_wrapped", False):
        torch.autograd.backward = recorder.wrap_backward(torch.autograd.backward)
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    register_optimizer_step_pre_hook(recorder.hooks.on_step_pre)
    register_optimizer_step_post_hook(recorder.hooks.on_step_post)
    recorder.start_flusher()
    return recorder


__all__ = [
    "Recorder",
    "WorkerSettings",
    "ProfilingComplete",
    "install",
    "active_recorder",
    "DdpHooks",
    "Clock",
    "CudaClock",
    "STOP_KEY",
    "STOP_MARGIN",
    "forward_flops",
    "math_precision",
]

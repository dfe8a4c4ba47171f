"""How a worker's time is measured and what an iteration closes into.

The clocks (host ``perf_counter``, or CUDA events so asynchronous GPU work is timed where it
runs), the iteration the recorder has open with its gradient buckets, the record a closed
iteration becomes in ``rank<R>.json``, the batch read off a forward's inputs, and the device a
worker runs on. The recorder
(:mod:`srifty.profiling.recorder`) and the DDP hooks (:mod:`srifty.profiling.ddp_hooks`) fill
these; nothing here decides anything.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from srifty.profile import step_passes


class Clock:
    """Host clock; marks are seconds from ``time.perf_counter``."""

    def mark(self) -> Any:
        return time.perf_counter()

    def seconds(self, mark: Any) -> float:
        return float(mark)


class CudaClock(Clock):
    """CUDA events on the current stream, so asynchronous GPU work is timed where it runs.

    Marks are resolved (relative to the first mark) only when an iteration is closed,
    which waits for that iteration's last event.
    """

    def __init__(self) -> None:
        self._origin = torch.cuda.Event(enable_timing=True)
        self._origin.record()
        self._origin_host = time.perf_counter()

    def mark(self) -> Any:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def seconds(self, mark: Any) -> float:
        if isinstance(mark, float):
            return mark
        mark.synchronize()
        return self._origin_host + self._origin.elapsed_time(mark) / 1000.0


@dataclass
class _Bucket:
    index: int
    nbytes: int
    num_params: int
    ready: Any
    sent: tuple[int, ...] | None = None  # the allreduces' bytes where a hook compresses (profiling.powersgd)
    end_host: float | None = None


@dataclass
class _OpenIteration:
    start: Any
    forward_s: float = 0.0
    backward_s: float = 0.0
    backward_compute_s: float = 0.0
    optimizer_s: float = 0.0
    input_s: float = 0.0  # after the optimizer step, until the next forward: loading the next batch
    step_end: Any = None
    forwards: int = 0
    backwards: int = 0
    steps: int = 0
    stepped: set[int] = field(default_factory=set)  # the optimizers (ids) that stepped
    batch_size: int | None = None  # the first forward's
    samples: int = 0  # every forward's batch, summed
    synced_backwards: int = 0  # backwards whose gradient buckets were allreduced (not under no_sync)
    allreduced_bytes: int = 0  # the bytes of every bucket handed to a communication hook, all backwards
    compressed: bool = False  # PowerSGD compressed a bucket (past its start_powerSGD_iter plain steps)
    buckets: list[_Bucket] = field(default_factory=list)
    bwd_start: Any = None
    last_bwd_start: Any = None


def _first_tensor(obj: Any) -> Any:
    """The first tensor with a dimension in a forward's (args, kwargs), depth first."""
    if isinstance(obj, torch.Tensor):
        return obj if obj.dim() > 0 else None
    items = obj if isinstance(obj, (list, tuple)) else obj.values() if isinstance(obj, dict) else ()
    for item in items:
        found = _first_tensor(item)
        if found is not None:
            return found
    return None


def _listed_samples(args: Any) -> int | None:
    """The length of a forward's first positional argument where it is a list of samples of three
    or more dimensions each (images, as torchvision's detection models take their batch), else
    None."""
    first = args[0] if isinstance(args, (list, tuple)) and args else None
    if isinstance(first, list) and first and all(isinstance(t, torch.Tensor) and t.dim() >= 3 for t in first):
        return len(first)
    return None


def _first_batch_dim(args: Any, kwargs: Any, dim: int = 0) -> int | None:
    """The batch of a forward's inputs: the number of samples where they come as a list
    (:func:`_listed_samples`), else dimension ``dim`` of their first tensor (its first where it has
    no such dimension)."""
    listed = _listed_samples(args)
    if listed is not None:
        return listed
    found = _first_tensor((args, kwargs))
    if found is None:
        return None
    return int(found.shape[dim] if found.dim() > dim else found.shape[0])


def accumulates(it: _OpenIteration) -> bool:
    """Whether the iteration accumulates gradients: several forward-backward passes, then one
    optimizer step (:func:`srifty.profile.step_passes`)."""
    return (step_passes(it.forwards, it.backwards, it.steps) or 0) > 1


def step_batch(it: _OpenIteration) -> int | None:
    """The per-worker samples of the iteration's optimizer step: its first forward's batch, or,
    where it accumulates gradients (:func:`accumulates`), every pass's batch summed."""
    return it.samples if accumulates(it) and it.samples else it.batch_size


def iteration_record(it: _OpenIteration, end_mark: Any, clock: Clock, index: int) -> dict[str, Any]:
    """The record of iteration ``index``, closed at ``end_mark``: its phases in milliseconds and its
    gradient buckets' ready (and, on the host clock, end) times from the start of the last backward."""
    start = clock.seconds(it.start)
    end = clock.seconds(end_mark)
    wall = end - start
    bwd_ref = clock.seconds(it.last_bwd_start) if it.last_bwd_start is not None else None
    buckets = []
    for b in it.buckets:
        ready = clock.seconds(b.ready)
        entry = {
            "index": b.index,
            "bytes": b.nbytes,
            "ready_ms": (ready - bwd_ref) * 1e3 if bwd_ref is not None else None,
            "end_ms": (b.end_host - bwd_ref) * 1e3
            if (b.end_host is not None and bwd_ref is not None and not isinstance(clock, CudaClock))
            else None,
        }
        buckets.append(entry)
    exposed = max(0.0, it.backward_s - it.backward_compute_s)
    record = {
        "index": index,
        "wall_ms": wall * 1e3,
        "forward_ms": it.forward_s * 1e3,
        "backward_ms": it.backward_s * 1e3,
        "backward_compute_ms": it.backward_compute_s * 1e3,
        "exposed_comm_ms": exposed * 1e3,
        "optimizer_ms": it.optimizer_s * 1e3,
        "other_ms": max(0.0, wall - it.forward_s - it.backward_s - it.optimizer_s) * 1e3,
        "input_ms": it.input_s * 1e3,  # the part of other_ms after the optimizer step
        "forwards": it.forwards,
        "backwards": it.backwards,
        "steps": it.steps,
        "batch_size": step_batch(it),
        "synced_backwards": it.synced_backwards,
        "allreduced_bytes": it.allreduced_bytes,
        "buckets": buckets,
    }
    if it.compressed:
        record["compressed"] = True
    return record


def describe_device(clock: Clock) -> dict[str, Any]:
    """The device a worker runs on: the CPU (with torch's thread count) or its CUDA GPU."""
    if not isinstance(clock, CudaClock):
        return {"type": "cpu", "torch_threads": torch.get_num_threads()}
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "type": "cuda",
        "gpu_name": props.name,
        "gpu_memory_gib": round(props.total_memory / 2**30, 2),
        "sm_count": props.multi_processor_count,
    }

"""Instrumentation installed into every profiled worker, from outside the user's script.

``srifty profile`` starts each torchrun worker as ``python -m srifty.profiling.worker
SCRIPT ARGS``; the worker calls :func:`install` and then runs SCRIPT unchanged. The
recorder hooks into:

- ``DistributedDataParallel.__init__``: forward pre/post hooks on every DDP module
  (iteration boundaries, forward time, per-worker batch size) and a communication hook
  that wraps DDP's own allreduce (or the user's hook) to time each gradient bucket;
- ``torch.autograd.backward`` (which ``Tensor.backward`` calls): backward wall time;
- the global optimizer step pre/post hooks: optimizer time.

An iteration runs from one DDP forward call to the next forward call that follows an
optimizer step, so gradient accumulation (several forwards per step) is one iteration.
Scripts can mark iterations themselves with ``srifty.step()``.

Rank 0 decides when the median iteration time is known well enough (or a cap is hit)
and posts the iteration at which all ranks stop to the job's c10d store; every rank
then leaves the script at that same iteration by raising :class:`ProfilingComplete`.
Records are flushed to ``$SRIFTY_PROFILE_DIR/rank<R>.json`` by a background thread,
so a crash or a kill still leaves the iterations measured so far.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from srifty import stats
from srifty.profile import COUNTED_ITERATION, FIRST_TIMED_ITERATION
from srifty.profiling.opcount import OperatorCounter

_ACTIVE: "Recorder | None" = None
STOP_KEY = "srifty/stop_at_iteration"
STOP_MARGIN = 3


def active_recorder() -> "Recorder | None":
    """The recorder of this process, when it runs under ``srifty profile``."""
    return _ACTIVE


class ProfilingComplete(SystemExit):
    """Raised inside the user's script when srifty has measured enough."""

    def __init__(self, reason: str) -> None:
        super().__init__(0)
        self.reason = reason


@dataclass
class WorkerSettings:
    """What the launcher tells each worker, through environment variables."""

    out_dir: str
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    target_rel_ci: float = 0.02
    min_iterations: int = 20
    max_iterations: int = 2000
    max_seconds: float = 30.0
    requested_batch_size: int | None = None
    host_label: str = ""

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "WorkerSettings":
        e = dict(os.environ if env is None else env)
        bs = e.get("SRIFTY_BATCH_SIZE")
        return cls(
            out_dir=e["SRIFTY_PROFILE_DIR"],
            rank=int(e.get("RANK", "0")),
            local_rank=int(e.get("LOCAL_RANK", "0")),
            world_size=int(e.get("WORLD_SIZE", "1")),
            target_rel_ci=float(e.get("SRIFTY_TARGET_REL_CI", "0.02")),
            min_iterations=int(e.get("SRIFTY_MIN_ITERATIONS", "20")),
            max_iterations=int(e.get("SRIFTY_MAX_ITERATIONS", "2000")),
            max_seconds=float(e.get("SRIFTY_MAX_SECONDS", "30")),
            requested_batch_size=int(bs) if bs else None,
            host_label=e.get("SRIFTY_HOST_LABEL", ""),
        )


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
    batch_size: int | None = None
    buckets: list[_Bucket] = field(default_factory=list)
    bwd_start: Any = None
    last_bwd_start: Any = None


def math_precision() -> dict[str, Any]:
    """What the model's math runs in, read inside its forward (so inside the script's autocast
    context): the autocast dtype of the first device type with autocast on (None when off),
    PyTorch's float32 matmul precision ("high"/"medium" let matmuls use TF32 tensor cores) and
    whether cuDNN may run float32 convolutions in TF32 (PyTorch's default: it may)."""
    try:
        cudnn_tf32: bool | None = bool(torch.backends.cudnn.allow_tf32)
    except (AttributeError, RuntimeError):  # pragma: no cover - a build without the flag
        cudnn_tf32 = None
    autocast = None
    for device in ("cuda", "cpu", "xpu"):
        try:
            if torch.is_autocast_enabled(device):
                autocast = str(torch.get_autocast_dtype(device)).replace("torch.", "")
                break
        except (RuntimeError, TypeError, AttributeError):  # a device type this build does not know
            continue
    return {"autocast_dtype": autocast, "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cudnn_allow_tf32": cudnn_tf32}


def forward_flops(counts: dict[Any, int]) -> dict[str, Any]:
    """Summarise one forward's FLOPs as torch.utils.flop_counter counts them (convolutions,
    matmuls and attention, per aten op): the total and the convolutions' share, which decides
    whether TF32 settings matter to a float32 model (cuDNN convolutions and cuBLAS matmuls
    follow different switches)."""
    total = sum(int(v) for v in counts.values())
    conv = sum(int(v) for op, v in counts.items() if "conv" in str(op))
    return {"forward_flops": total, "conv_flop_share": conv / total if total else None}


class _FlopCount:
    """Counts the FLOPs of one forward pass: entered by the DDP forward pre-hook, left by the
    post-hook (torch.utils.flop_counter.FlopCounterMode). Best effort: a model the counter cannot
    trace leaves the figures unknown rather than failing the profile."""

    def __init__(self) -> None:
        self.mode: Any = None

    def start(self) -> None:
        try:
            from torch.utils.flop_counter import FlopCounterMode

            self.mode = FlopCounterMode(display=False)
            self.mode.__enter__()
        except Exception:  # noqa: BLE001 - never let the counter break the user's job
            self.mode = None

    def stop(self) -> dict[str, Any] | None:
        mode, self.mode = self.mode, None
        if mode is None:
            return None
        try:
            mode.__exit__(None, None, None)
            return forward_flops(mode.get_flop_counts().get("Global", {}))
        except Exception:  # noqa: BLE001
            return None


def _first_batch_dim(obj: Any) -> int | None:
    if isinstance(obj, torch.Tensor):
        return int(obj.shape[0]) if obj.dim() > 0 else None
    if isinstance(obj, (list, tuple)):
        for item in obj:
            found = _first_batch_dim(item)
            if found is not None:
                return found
    if isinstance(obj, dict):
        for item in obj.values():
            found = _first_batch_dim(item)
            if found is not None:
                return found
    return None


class Recorder:
    """Collects per-iteration timings in one worker and decides when to stop."""

    def __init__(self, settings: WorkerSettings, clock: Clock | None = None) -> None:
        self.settings = settings
        self.clock = clock or Clock()
        self.iterations: list[dict[str, Any]] = []
        self.model: dict[str, Any] = {}
        self.bucket_layout: list[dict[str, Any]] = []
        self.forward_calls = 0
        self._flops = _FlopCount()
        self._counter: OperatorCounter | None = None
        self._param_numels: list[int] = []
        self._in_backward = False
        self.backward_calls = 0
        self.step_calls = 0
        self.explicit = False
        self.stop_reason: str | None = None
        self.error: dict[str, Any] | None = None
        self.stop_at: int | None = None
        self.measure_started_host: float | None = None
        self.current_rel_ci: float | None = None
        self.current_warmup: int | None = None
        self._open: _OpenIteration | None = None
        self._step_started: Any = None
        self._fwd_started: Any = None
        self._lock = threading.RLock()  # re-entrant: the SIGTERM handler (srifty.profiling.worker) flushes
        self._dirty = True
        self._flusher: threading.Thread | None = None
        self._stop_flusher = threading.Event()
        self._flush_lock = threading.RLock()  # the flusher thread and the main thread both write the file

    # ----- iteration boundaries -------------------------------------------------
    def _boundary(self, mark: Any) -> None:
        """Close the open iteration (if it did any work) and open a new one at ``mark``."""
        prev = self._open
        if prev is not None and (self.explicit or prev.steps > 0):
            if prev.step_end is not None:
                prev.input_s = max(0.0, self.clock.seconds(mark) - self.clock.seconds(prev.step_end))
            self._stop_counting(prev)
            self._close(prev, mark)
        self._open = _OpenIteration(start=mark)
        if len(self.iterations) == COUNTED_ITERATION and "operators" not in self.model and self._counter is None:
            self._start_counting()
        self._check_stop()

    # ----- operator count (one iteration) ---------------------------------------
    def phase(self) -> str:
        """The phase of the iteration the worker is in (srifty.profiling.opcount.PHASES)."""
        if self._in_backward:
            return "backward"
        if self._step_started is not None:
            return "optimizer"
        if self._fwd_started is not None:
            return "forward"
        if self._open is not None and self._open.step_end is not None:
            return "input"
        return "other"

    def _start_counting(self) -> None:
        try:
            counter = OperatorCounter(self.phase, self._param_numels)
            counter.__enter__()
            self._counter = counter
        except Exception:  # noqa: BLE001 - never let the counter break the user's job
            self._counter = None

    def _stop_counting(self, it: _OpenIteration) -> None:
        counter, self._counter = self._counter, None
        if counter is None:
            return
        try:
            counter.__exit__(None, None, None)
            self.model["operators"] = counter.result(it.batch_size, len(self._param_numels))
        except Exception:  # noqa: BLE001
            pass

    def _close(self, it: _OpenIteration, end_mark: Any) -> None:
        start = self.clock.seconds(it.start)
        end = self.clock.seconds(end_mark)
        wall = end - start
        bwd_ref = self.clock.seconds(it.last_bwd_start) if it.last_bwd_start is not None else None
        buckets = []
        for b in it.buckets:
            ready = self.clock.seconds(b.ready)
            entry = {
                "index": b.index,
                "bytes": b.nbytes,
                "ready_ms": (ready - bwd_ref) * 1e3 if bwd_ref is not None else None,
                "end_ms": (b.end_host - bwd_ref) * 1e3
                if (b.end_host is not None and bwd_ref is not None and not isinstance(self.clock, CudaClock))
                else None,
            }
            buckets.append(entry)
        exposed = max(0.0, it.backward_s - it.backward_compute_s)
        record = {
            "index": len(self.iterations),
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
            "batch_size": it.batch_size,
            "buckets": buckets,
        }
        with self._lock:
            self.iterations.append(record)
            if not self.bucket_layout and buckets and len(self.iterations) >= 2:
                # DDP rebuilds its buckets after the first iteration: take the layout later
                self.bucket_layout = [
                    {"index": b.index, "bytes": b.nbytes, "num_params": b.num_params} for b in it.buckets
                ]
            self._dirty = True
        if self.measure_started_host is None:
            self.measure_started_host = time.perf_counter()

    def _evaluate_stop_rule(self) -> str | None:
        s = self.settings
        walls = [r["wall_ms"] for r in self.iterations]
        n = len(walls)
        if n >= s.min_iterations + 1:
            d = stats.mser_truncation(walls)
            if "operators" in self.model:
                d = max(d, FIRST_TIMED_ITERATION)
            self.current_warmup = d
            steady = walls[d:]
            if len(steady) >= s.min_iterations:
                self.current_rel_ci = stats.relative_ci_halfwidth(steady)
                if self.current_rel_ci <= s.target_rel_ci:
                    return "converged"
        if n >= s.max_iterations:
            return "iteration_cap"
        if self.measure_started_host is not None and time.perf_counter() - self.measure_started_host >= s.max_seconds:
            return "time_cap"
        return None

    def _store(self) -> Any:
        if self.settings.world_size <= 1 or not dist.is_available() or not dist.is_initialized():
            return None
        try:
            return dist.distributed_c10d._get_default_store()
        except Exception:  # pragma: no cover - depends on torch internals
            return None

    def _check_stop(self) -> None:
        clock_index = len(self.iterations)
        store = self._store()
        if self.stop_at is None:
            if self.settings.rank == 0:
                reason = self._evaluate_stop_rule()
                if reason is not None:
                    self.stop_reason = reason
                    self.stop_at = clock_index + (STOP_MARGIN if store is not None else 0)
                    if store is not None:
                        store.set(STOP_KEY, json.dumps({"at": self.stop_at, "reason": reason}))
            elif store is not None and store.check([STOP_KEY]):
                posted = json.loads(store.get(STOP_KEY).decode())
                self.stop_at, self.stop_reason = int(posted["at"]), posted["reason"]
        if self.stop_at is not None and clock_index >= self.stop_at:
            self.flush()
            raise ProfilingComplete(self.stop_reason or "converged")

    # ----- hooks ----------------------------------------------------------------
    def attach_ddp(self, ddp: DistributedDataParallel) -> None:
        params = [p for p in ddp.module.parameters() if p.requires_grad]
        if not self._param_numels:
            self._param_numels = [int(p.numel()) for p in params]
        if not self.model:
            dtypes = sorted({str(p.dtype).replace("torch.", "") for p in params})
            self.model = {
                "param_count": int(sum(p.numel() for p in params)),
                "grad_bytes": int(sum(p.numel() * p.element_size() for p in params)),
                "grad_dtype": dtypes[0] if len(dtypes) == 1 else "mixed",
                "module_class": type(ddp.module).__name__,
                "bucket_cap_mb": getattr(ddp, "bucket_bytes_cap", 25 * 1024 * 1024) / (1024 * 1024),
            }
        ddp._srifty_user_hook = False  # type: ignore[attr-defined]
        ddp.register_forward_pre_hook(self._on_forward_pre, with_kwargs=True)
        ddp.register_forward_hook(self._on_forward_post)

    def _on_forward_pre(self, module: DistributedDataParallel, args: Any, kwargs: Any) -> None:
        if not getattr(module, "_srifty_hook_registered", False):
            module._srifty_hook_registered = True  # type: ignore[attr-defined]
            if not getattr(module, "_srifty_user_hook", False):
                from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

                _ORIGINAL_REGISTER_COMM_HOOK(
                    module, module.process_group, self.timed_comm_hook(default_hooks.allreduce_hook)
                )
        if self.forward_calls == 0 and self.model:
            self.model.update(math_precision())
            self._flops.start()
        self.forward_calls += 1
        mark = self.clock.mark()
        if not self.explicit and (self._open is None or self._open.steps > 0):
            self._boundary(mark)
        it = self._open
        if it is None:
            it = self._open = _OpenIteration(start=mark)
        it.forwards += 1
        bs = _first_batch_dim((args, kwargs))
        if bs is not None and it.batch_size is None:
            it.batch_size = bs  # the per-worker (micro-)batch of this iteration's first forward
        self._fwd_started = mark

    def _on_forward_post(self, module: Any, args: Any, output: Any) -> None:
        counted = self._flops.stop()
        if counted is not None:
            self.model.update(counted)
        if self._fwd_started is None or self._open is None:
            return
        end = self.clock.mark()
        self._open.forward_s += self.clock.seconds(end) - self.clock.seconds(self._fwd_started)
        self._fwd_started = None

    def timed_comm_hook(self, hook: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        recorder = self

        def srifty_timed_hook(state: Any, bucket: Any) -> Any:
            ready = recorder.clock.mark()
            buf = bucket.buffer()
            entry = _Bucket(
                index=int(bucket.index()),
                nbytes=int(buf.numel() * buf.element_size()),
                num_params=len(bucket.parameters()),
                ready=ready,
            )
            if recorder._open is not None:
                recorder._open.buckets.append(entry)
            fut = hook(state, bucket)

            def done(f: Any) -> Any:
                entry.end_host = time.perf_counter()
                return f.value()

            return fut.then(done)

        # DDP checks a hook's annotations against the real classes; ours are strings
        # (postponed evaluation), so present the hook unannotated, as DDP allows.
        srifty_timed_hook.__annotations__ = {}
        return srifty_timed_hook

    def wrap_backward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder = self

        def backward(*args: Any, **kwargs: Any) -> Any:
            it = recorder._open
            if it is None:
                return original(*args, **kwargs)
            recorder.backward_calls += 1
            start = recorder.clock.mark()
            it.buckets = []
            it.last_bwd_start = start
            recorder._in_backward = True
            try:
                result = original(*args, **kwargs)
            finally:
                recorder._in_backward = False
            end = recorder.clock.mark()
            t0, t1 = recorder.clock.seconds(start), recorder.clock.seconds(end)
            it.backward_s += t1 - t0
            if it.buckets:
                last_ready = max(recorder.clock.seconds(b.ready) for b in it.buckets)
                it.backward_compute_s += max(0.0, last_ready - t0)
            else:
                it.backward_compute_s += t1 - t0
            it.backwards += 1
            return result

        backward._srifty_wrapped = True  # type: ignore[attr-defined]
        return backward

    def _on_step_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._step_started = self.clock.mark()

    def _on_step_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.step_calls += 1
        if self._step_started is None or self._open is None:
            return
        end = self.clock.mark()
        self._open.optimizer_s += self.clock.seconds(end) - self.clock.seconds(self._step_started)
        self._open.steps += 1
        self._open.step_end = end
        self._step_started = None

    # ----- explicit API ---------------------------------------------------------
    def explicit_begin(self) -> None:
        mark = self.clock.mark()
        if not self.explicit:
            self.explicit = True
            self._open = _OpenIteration(start=mark)
        elif self._open is None or not (self._open.forwards or self._open.backwards or self._open.steps):
            self._open = _OpenIteration(start=mark)

    def explicit_step(self) -> None:
        mark = self.clock.mark()
        if not self.explicit:
            # everything before the first explicit mark is warm-up of unknown shape
            self.explicit = True
            self._open = _OpenIteration(start=mark)
            self._check_stop()
            return
        self._boundary(mark)

    # ----- output ---------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            iterations = list(self.iterations)
            self._dirty = False
        return {
            "rank": self.settings.rank,
            "local_rank": self.settings.local_rank,
            "world_size": self.settings.world_size,
            "hostname": socket.gethostname(),
            "host_label": self.settings.host_label,
            "pid": os.getpid(),
            "iterations": iterations,
            "model": self.model,
            "bucket_layout": self.bucket_layout,
            "forward_calls": self.forward_calls,
            "backward_calls": self.backward_calls,
            "step_calls": self.step_calls,
            "explicit_api": self.explicit,
            "stop_reason": self.stop_reason,
            "current_rel_ci": self.current_rel_ci,
            "current_warmup": self.current_warmup,
            "error": self.error,
            "updated_at": time.time(),
            "device": self.device_info(),
        }

    def device_info(self) -> dict[str, Any]:
        if not isinstance(self.clock, CudaClock):
            return {"type": "cpu", "torch_threads": torch.get_num_threads()}
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return {
            "type": "cuda",
            "gpu_name": props.name,
            "gpu_memory_gib": round(props.total_memory / 2**30, 2),
            "sm_count": props.multi_processor_count,
        }

    def flush(self) -> None:
        path = os.path.join(self.settings.out_dir, f"rank{self.settings.rank}.json")
        tmp = f"{path}.tmp{os.getpid()}-{threading.get_ident()}"
        with self._flush_lock:  # one writer at a time: a final flush never races the flusher's rename
            snap = self.snapshot()
            with open(tmp, "w") as fh:
                json.dump(snap, fh)
            os.replace(tmp, path)

    def start_flusher(self, interval_s: float = 0.5) -> None:
        def loop() -> None:
            while not self._stop_flusher.wait(interval_s):
                if self._dirty:
                    try:
                        self.flush()
                    except OSError:
                        pass

        self._flusher = threading.Thread(target=loop, name="srifty-flush", daemon=True)
        self._flusher.start()

    def stop_flusher(self) -> None:
        self._stop_flusher.set()
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join(timeout=5.0)

    def record_error(self, exc: BaseException) -> None:
        self.error = {
            "type": type(exc).__name__,
            "message": str(exc)[:4000],
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:],
        }
        self._dirty = True


_ORIGINAL_DDP_INIT = DistributedDataParallel.__init__
_ORIGINAL_REGISTER_COMM_HOOK = DistributedDataParallel.register_comm_hook


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

    def register_comm_hook(self: DistributedDataParallel, state: Any, hook: Callable[..., Any]) -> Any:
        self._srifty_user_hook = True  # type: ignore[attr-defined]
        self._srifty_hook_registered = True  # type: ignore[attr-defined]
        return _ORIGINAL_REGISTER_COMM_HOOK(self, state, recorder.timed_comm_hook(hook))

    DistributedDataParallel.__init__ = ddp_init  # type: ignore[method-assign]
    DistributedDataParallel.register_comm_hook = register_comm_hook  # type: ignore[method-assign]
    if not getattr(torch.autograd.backward, "_srifty_wrapped", False):
        torch.autograd.backward = recorder.wrap_backward(torch.autograd.backward)
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    register_optimizer_step_pre_hook(recorder._on_step_pre)
    register_optimizer_step_post_hook(recorder._on_step_post)
    recorder.start_flusher()
    return recorder


__all__ = [
    "Recorder",
    "WorkerSettings",
    "ProfilingComplete",
    "install",
    "active_recorder",
]

"""The recorder in one profiled worker: its iterations, when to stop, and its progress file.

A :class:`Recorder` holds the iteration open now and the records of those closed
(:mod:`srifty.profiling.timing`), counts one iteration's operators (:mod:`srifty.profiling.opcount`),
and applies the stop rule: rank 0 decides when the median iteration time is known well enough
(or a cap is hit) and posts the iteration at which all ranks stop to the job's c10d store; every
rank then leaves the script at that same iteration by raising :class:`ProfilingComplete`. Its
hooks on DDP, backward and the optimizer step are :class:`~srifty.profiling.ddp_hooks.DdpHooks`;
a script marks iterations itself through :meth:`Recorder.explicit_step` (``srifty.step()``).
Records are flushed to ``$SRIFTY_PROFILE_DIR/rank<R>.json`` by a background thread, so a crash
or a kill still leaves the iterations measured so far.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import traceback
import weakref
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from srifty import stats
from srifty.profile import COUNTED_ITERATION, FIRST_TIMED_ITERATION
from srifty.profiling import stacks
from srifty.profiling.ddp_hooks import DdpHooks
from srifty.profiling.request import MAX_ITERATIONS, MAX_SECONDS, MIN_ITERATIONS, TARGET_REL_CI
from srifty.profiling.modelmath import _FlopCount
from srifty.profiling.opcount import NOT_COUNTED_COMPILED, OperatorCounter, compiled_frames
from srifty.profiling.timing import Clock, _OpenIteration, describe_device, iteration_record, step_batch

STOP_KEY = "srifty/stop_at_iteration"
RECENT_STEPS = 16  # the optimizer steps over which srifty counts how often each optimizer steps
STOP_MARGIN = 3


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
    target_rel_ci: float = TARGET_REL_CI
    min_iterations: int = MIN_ITERATIONS
    max_iterations: int = MAX_ITERATIONS
    max_seconds: float = MAX_SECONDS
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
            target_rel_ci=float(e.get("SRIFTY_TARGET_REL_CI", TARGET_REL_CI)),
            min_iterations=int(e.get("SRIFTY_MIN_ITERATIONS", MIN_ITERATIONS)),
            max_iterations=int(e.get("SRIFTY_MAX_ITERATIONS", MAX_ITERATIONS)),
            max_seconds=float(e.get("SRIFTY_MAX_SECONDS", MAX_SECONDS)),
            requested_batch_size=int(bs) if bs else None,
            host_label=e.get("SRIFTY_HOST_LABEL", ""),
        )


class Recorder:
    """Collects per-iteration timings in one worker and decides when to stop."""

    def __init__(self, settings: WorkerSettings, clock: Clock | None = None) -> None:
        self.settings = settings
        self.clock = clock or Clock()
        self.iterations: list[dict[str, Any]] = []
        self.model: dict[str, Any] = {}
        self.bucket_layout: list[dict[str, Any]] = []
        self.forward_calls = 0
        self.ddp_models = 0  # DistributedDataParallel modules built (the model's figures are all of theirs)
        # the dimension of a forward's first input that holds the batch, once the first forward's
        # layers were watched for it (DdpHooks); None before: the first dimension is taken
        self.batch_dim: int | None = None
        self._flops = _FlopCount()
        self._counter: OperatorCounter | None = None
        self._param_numels: list[int] = []
        self._ddps: list[Any] = []  # weakrefs to the DDP modules, in the order built (DdpHooks.attach_ddp)
        self._optimizers: Any = weakref.WeakSet()  # the optimizers that stepped (DdpHooks.on_step_pre)
        # the optimizers of the last RECENT_STEPS steps (ids): a training step is one step of the most frequent
        self._recent_steps: deque[int] = deque(maxlen=RECENT_STEPS)
        self._bucket_storages: dict[int, Any] = {}  # index -> weakref to DDP's bucket storage (saw_bucket)
        self._in_backward = False
        self.backward_calls = 0
        self.step_calls = 0
        self.explicit = False
        self.stop_reason: str | None = None
        self.error: dict[str, Any] | None = None
        # the exit the script's argparse raised where it refused the command line, and what it refused
        self.usage_error: tuple[BaseException, str] | None = None
        self.stop_at: int | None = None
        self.measure_started_host: float | None = None
        self.current_rel_ci: float | None = None
        self.current_warmup: int | None = None
        self._open: _OpenIteration | None = None
        self._step_started: Any = None
        self._fwd_started: Any = None
        # a closure the optimizer step calls (``optimizer.step(closure)``, as PyTorch Lightning
        # steps): whether it runs, and the seconds it ran within the open step (DdpHooks.on_step_pre)
        self._in_closure = False
        self._closure_s = 0.0
        self._lock = threading.RLock()  # re-entrant: the SIGTERM handler (srifty.profiling.worker) flushes
        self._dirty = True
        self._flusher: threading.Thread | None = None
        self._stop_flusher = threading.Event()
        self._flush_lock = threading.RLock()  # the flusher thread and the main thread both write the file
        self.hooks = DdpHooks(self)

    # ----- iteration boundaries -------------------------------------------------
    def step_complete(self) -> bool:
        """Whether the open iteration has stepped every optimizer that steps as often as the most
        frequent one (to within one step over the last RECENT_STEPS steps): a GAN's two networks
        each step once a training step, and the next forward then starts another iteration. An
        optimizer that steps less often (a warm-up's, one stepped every tenth step) joins whichever
        iteration it steps in, and never holds one open."""
        it = self._open
        if it is None or it.steps == 0:
            return False
        counts = Counter(self._recent_steps)
        most = max(counts.values(), default=0)
        return it.stepped.issuperset(o for o, n in counts.items() if n >= most - 1)

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
        if self._fwd_started is not None:
            return "forward"
        if self._in_closure:  # the loss, zero_grad: what runs between forward and backward
            return "other"
        if self._step_started is not None:
            return "optimizer"
        if self._open is not None and self._open.step_end is not None:
            return "input"
        return "other"

    def _start_counting(self) -> None:
        if compiled_frames():
            self.model["operators_not_counted"] = NOT_COUNTED_COMPILED
            return
        try:
            counter = OperatorCounter(self.phase, self._param_numels)
            for ddp in self.ddp_modules():
                counter.watch_recurrent(ddp.module.modules())
            counter.track_start(self._state_tensors(),
                                [b for ref in self._bucket_storages.values() if (b := ref()) is not None])
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
            self.model["operators"] = counter.result(step_batch(it), len(self._param_numels))
            self.model["memory"] = self._memory(counter, it)
        except Exception:  # noqa: BLE001
            pass

    def ddp_modules(self) -> list[DistributedDataParallel]:
        """The DDP modules the script built that are still alive, in the order built."""
        return [ddp for ref in self._ddps if (ddp := ref()) is not None]

    def _state_tensors(self) -> list[Any]:
        """What a worker holds between iterations: the DDP modules' parameters, buffers and
        gradients, and the state of the optimizers that have stepped."""
        ddps = self.ddp_modules()
        if not ddps:
            return []
        out = [t for ddp in ddps for t in (*ddp.module.parameters(), *ddp.module.buffers())]
        out += [p.grad for ddp in ddps for p in ddp.module.parameters() if p.grad is not None]
        for opt in list(self._optimizers):
            out += [v for state in opt.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
        return out

    def saw_bucket(self, index: int, buffer: Any) -> None:
        """DDP's comm hook got bucket ``index``'s flat gradient buffer: remember its storage (the
        next counted iteration starts with it live) and, while counting, count it."""
        try:
            storage = buffer.untyped_storage()
            self._bucket_storages[index] = weakref.ref(storage)
            if self._counter is not None:
                self._counter.track_storage(storage)
        except Exception:  # noqa: BLE001 - the count is best effort, the user's step is not
            pass

    def _memory(self, counter: OperatorCounter, it: _OpenIteration) -> dict[str, Any]:
        """The profile's ``job.memory``: the counted iteration's tensor storage on this worker and,
        on CUDA, what the caching allocator gave out at most since the run started."""
        out = counter.memory(step_batch(it))
        if counter.device_type == "cuda":
            out["cuda_max_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
            out["cuda_max_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
        return out

    def _close(self, it: _OpenIteration, end_mark: Any) -> None:
        record = iteration_record(it, end_mark, self.clock, len(self.iterations))
        with self._lock:
            self.iterations.append(record)
            if not self.bucket_layout and it.buckets and len(self.iterations) >= 2:
                # DDP rebuilds its buckets after the first iteration: take the layout later
                self.bucket_layout = [
                    {"index": b.index, "bytes": b.nbytes, "num_params": b.num_params}
                    | ({"sent": list(b.sent)} if b.sent is not None else {}) for b in it.buckets
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

    # ----- hooks (srifty.profiling.ddp_hooks) -----------------------------------
    def attach_ddp(self, ddp: DistributedDataParallel) -> None:
        self.hooks.attach_ddp(ddp)

    def timed_comm_hook(self, hook: Callable[[Any, Any], Any],
                        powersgd: dict[str, Any] | None = None) -> Callable[[Any, Any], Any]:
        return self.hooks.timed_comm_hook(hook, powersgd)

    def wrap_backward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        return self.hooks.wrap_backward(original)

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
            "stack_signal": stacks.armed(),  # whether asking for this worker's stacks is safe
            "iterations": iterations,
            "model": self.model,
            "bucket_layout": self.bucket_layout,
            "forward_calls": self.forward_calls,
            "ddp_models": self.ddp_models,
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
        return describe_device(self.clock)

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

    def record_error(self, exc: BaseException, printed: str = "") -> None:
        """Keep ``exc`` as this rank's error; ``printed``: the end of what the script wrote to stderr,
        which says why where a ``SystemExit``'s status alone says nothing."""
        message = str(exc)
        if isinstance(exc, SystemExit) and isinstance(exc.code, int):
            # what argparse refused, else the last lines the script printed
            last = [line for line in printed.strip().splitlines() if line.strip()][-3:]
            refused = self.usage_error[1] if self.usage_error and self.usage_error[0] is exc else None
            message = refused or (f"exit status {exc.code} after printing: " + " / ".join(last) if last
                                  else f"exit status {exc.code}")
        self.error = {
            "type": type(exc).__name__,
            "message": message[:4000],
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:],
        }
        self._dirty = True

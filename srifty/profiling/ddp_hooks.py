"""The hooks a recorder places on DDP, autograd's backward and the optimizer step.

:func:`srifty.profiling.instrument.install` patches ``DistributedDataParallel.__init__`` to call
:meth:`DdpHooks.attach_ddp` on every DDP module (forward pre/post hooks: iteration boundaries,
forward time, per-worker batch size), wraps ``torch.autograd.backward`` (backward wall time) and
registers the global optimizer step hooks (optimizer time). Gradient buckets are timed by a
communication hook wrapping DDP's own allreduce, or the user's hook. The hooks write into the
recorder's open iteration (:mod:`srifty.profiling.recorder` holds that state and closes it).
"""

from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING, Any, Callable

from torch.nn.parallel import DistributedDataParallel

from srifty.profiling.modelmath import math_precision
from srifty.profiling.timing import _Bucket, _first_batch_dim, _OpenIteration

if TYPE_CHECKING:
    from srifty.profiling.recorder import Recorder

_ORIGINAL_DDP_INIT = DistributedDataParallel.__init__
_ORIGINAL_REGISTER_COMM_HOOK = DistributedDataParallel.register_comm_hook


class DdpHooks:
    """One recorder's hooks; they time its open iteration and move its boundaries."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def attach_ddp(self, ddp: DistributedDataParallel) -> None:
        recorder = self.recorder
        params = [p for p in ddp.module.parameters() if p.requires_grad]
        recorder._ddp = weakref.ref(ddp)
        if not recorder._param_numels:
            recorder._param_numels = [int(p.numel()) for p in params]
        if not recorder.model:
            dtypes = sorted({str(p.dtype).replace("torch.", "") for p in params})
            recorder.model = {
                "param_count": int(sum(p.numel() for p in params)),
                "grad_bytes": int(sum(p.numel() * p.element_size() for p in params)),
                "grad_dtype": dtypes[0] if len(dtypes) == 1 else "mixed",
                "module_class": type(ddp.module).__name__,
                "bucket_cap_mb": getattr(ddp, "bucket_bytes_cap", 25 * 1024 * 1024) / (1024 * 1024),
            }
        ddp._srifty_user_hook = False  # type: ignore[attr-defined]
        ddp.register_forward_pre_hook(self.on_forward_pre, with_kwargs=True)
        ddp.register_forward_hook(self.on_forward_post)

    def on_forward_pre(self, module: DistributedDataParallel, args: Any, kwargs: Any) -> None:
        recorder = self.recorder
        if not getattr(module, "_srifty_hook_registered", False):
            module._srifty_hook_registered = True  # type: ignore[attr-defined]
            if not getattr(module, "_srifty_user_hook", False):
                from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

                _ORIGINAL_REGISTER_COMM_HOOK(
                    module, module.process_group, self.timed_comm_hook(default_hooks.allreduce_hook)
                )
        if recorder.forward_calls == 0 and recorder.model:
            recorder.model.update(math_precision())
            recorder._flops.start()
        recorder.forward_calls += 1
        mark = recorder.clock.mark()
        if not recorder.explicit and (recorder._open is None or recorder._open.steps > 0):
            recorder._boundary(mark)
        it = recorder._open
        if it is None:
            it = recorder._open = _OpenIteration(start=mark)
        it.forwards += 1
        bs = _first_batch_dim((args, kwargs))
        if bs is not None and it.batch_size is None:
            it.batch_size = bs  # the per-worker (micro-)batch of this iteration's first forward
        recorder._fwd_started = mark

    def on_forward_post(self, module: Any, args: Any, output: Any) -> None:
        recorder = self.recorder
        counted = recorder._flops.stop()
        if counted is not None:
            recorder.model.update(counted)
        if recorder._fwd_started is None or recorder._open is None:
            return
        end = recorder.clock.mark()
        recorder._open.forward_s += recorder.clock.seconds(end) - recorder.clock.seconds(recorder._fwd_started)
        recorder._fwd_started = None

    def timed_comm_hook(self, hook: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        recorder = self.recorder

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
            recorder.saw_bucket(entry.index, buf)
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
        recorder = self.recorder

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

    def on_step_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        recorder = self.recorder
        recorder._optimizers.add(optimizer)
        recorder._step_started = recorder.clock.mark()

    def on_step_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        recorder = self.recorder
        recorder.step_calls += 1
        if recorder._step_started is None or recorder._open is None:
            return
        end = recorder.clock.mark()
        recorder._open.optimizer_s += recorder.clock.seconds(end) - recorder.clock.seconds(recorder._step_started)
        recorder._open.steps += 1
        recorder._open.step_end = end
        if recorder._counter is not None:
            recorder._counter.mark_held()
        recorder._step_started = None

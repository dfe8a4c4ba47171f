"""The hooks a recorder places on DDP, autograd's backward and the optimizer step.

:func:`srifty.profiling.instrument.install` patches ``DistributedDataParallel.__init__`` to call
:meth:`DdpHooks.attach_ddp` on every DDP module (forward pre/post hooks: iteration boundaries,
forward time, per-worker batch size: the first dimension of the forward's first input, its second
where a sequence-first recurrent or attention layer inside takes that as its batch, or the length
of a list of images), wraps ``torch.autograd.backward`` (backward wall time) and registers the
global optimizer step hooks (optimizer time). Gradient buckets are timed by a communication hook
wrapping DDP's own allreduce, or the user's hook (a builtin C++ hook cannot be wrapped: its buckets
go untimed). The hooks write into the recorder's open
iteration (:mod:`srifty.profiling.recorder` holds that state and closes it).
"""

from __future__ import annotations

import functools
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.nn.parallel import DistributedDataParallel
from torch.nn.utils.rnn import PackedSequence

from srifty.profiling.modelmath import math_precision
from srifty.profiling.powersgd import bucket_messages
from srifty.profiling.timing import _Bucket, _first_batch_dim, _first_tensor, _listed_samples, _OpenIteration

if TYPE_CHECKING:
    from srifty.profiling.recorder import Recorder

_ORIGINAL_DDP_INIT = DistributedDataParallel.__init__
_ORIGINAL_REGISTER_COMM_HOOK = DistributedDataParallel.register_comm_hook
_ORIGINAL_REGISTER_BUILTIN_COMM_HOOK = DistributedDataParallel._register_builtin_comm_hook
# optimizers that keep a shard of the state on each worker and send the updated parameters to the
# others after each step (torch.distributed.optim's ZeRO stage 1); their own step runs the inner
# optimizer's, whose hooks time it, and the parameters' broadcast falls after it
SHARDED_OPTIMIZERS = ("ZeroRedundancyOptimizer",)
# layers whose ``batch_first`` says where their input's batch is: sequence first (dimension 1)
# unless it is set, as in PyTorch's default for recurrent and attention layers
LAYOUT_LAYERS = (nn.RNNBase, nn.MultiheadAttention)


# DDP's wrappers that cast a bucket to 16 bits around another hook (default_hooks.fp16_compress_wrapper,
# bf16_compress_wrapper): the wrapped hook is the one function their closure holds
COMPRESS_WRAPPERS = ("torch.distributed.algorithms.ddp_comm_hooks.default_hooks",
                     ("fp16_compress_wrapper_hook", "bf16_compress_wrapper_hook"))


def wrapped_hooks(hook: Any) -> list[Any]:
    """``hook`` and the hooks it wraps, outermost first: the one ``register_ddp_comm_hook``'s
    partial holds, and the one inside DDP's fp16/bf16 compress wrappers."""
    chain = []
    while hook is not None and len(chain) < 8:
        chain.append(hook)
        if isinstance(hook, functools.partial):
            hook = hook.keywords.get("comm_hook") or hook.func
        elif getattr(hook, "__module__", None) == COMPRESS_WRAPPERS[0] \
                and getattr(hook, "__name__", None) in COMPRESS_WRAPPERS[1] and hook.__closure__:
            inner = [c.cell_contents for c in hook.__closure__ if callable(c.cell_contents)]
            hook = inner[0] if len(inner) == 1 else None
        else:
            hook = None
    return chain


def comm_hook_name(hook: Any) -> str:
    """A DDP communication hook as the profile names it (``job.comm_hook``): its module and
    qualified name, the hook inside where ``register_ddp_comm_hook`` wraps it in a partial."""
    named = next((h for h in wrapped_hooks(hook) if not isinstance(h, functools.partial)), hook)
    return f"{getattr(named, '__module__', None) or '?'}.{getattr(named, '__qualname__', type(named).__name__)}"


def sequence_first_batch(module: Any, args: Any) -> int | None:
    """The batch a sequence-first recurrent or attention layer is called with, None for any other
    call (another module, ``batch_first=True``, an unbatched input)."""
    if not isinstance(module, LAYOUT_LAYERS) or getattr(module, "batch_first", True) or not args:
        return None
    x = args[0]
    if isinstance(x, PackedSequence):
        return int(x.batch_sizes[0])
    return int(x.shape[1]) if isinstance(x, torch.Tensor) and x.dim() == 3 else None


class DdpHooks:
    """One recorder's hooks; they time its open iteration and move its boundaries."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        # while the first forward runs: the global hook that watches its layers, the shape of the
        # forward's first input, and the batch a sequence-first layer inside saw
        self._layout: tuple[Any, tuple[int, ...], list[int]] | None = None

    def attach_ddp(self, ddp: DistributedDataParallel) -> None:
        recorder = self.recorder
        recorder.ddp_models += 1
        recorder._ddps.append(weakref.ref(ddp))
        # every DDP model's gradients are allreduced (a GAN's two networks): the job's figures are theirs summed
        params = [p for d in recorder.ddp_modules() for p in d.module.parameters() if p.requires_grad]
        recorder._param_numels = [int(p.numel()) for p in params]
        dtypes = sorted({str(p.dtype).replace("torch.", "") for p in params})
        recorder.model.update({
            "param_count": int(sum(p.numel() for p in params)),
            "grad_bytes": int(sum(p.numel() * p.element_size() for p in params)),
            "grad_dtype": dtypes[0] if len(dtypes) == 1 else "mixed",
        })
        # the features of every SyncBatchNorm layer, whose statistics are synchronised across workers
        recorder.model["sync_batchnorm"] = [int(m.num_features) for d in recorder.ddp_modules()
                                            for m in d.module.modules() if isinstance(m, nn.SyncBatchNorm)]
        recorder.model.setdefault("module_class", type(ddp.module).__name__)
        recorder.model.setdefault("bucket_cap_mb", getattr(ddp, "bucket_bytes_cap", 25 * 1024 * 1024) / (1024 * 1024))
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
        if not recorder.explicit and (recorder._open is None or recorder.step_complete()):
            recorder._boundary(mark)
        it = recorder._open
        if it is None:
            it = recorder._open = _OpenIteration(start=mark)
        it.forwards += 1
        bs = _first_batch_dim(args, kwargs, recorder.batch_dim or 0)
        if bs is not None and it.batch_size is None:
            it.batch_size = bs  # the per-worker (micro-)batch of this iteration's first forward
        it.samples += bs or 0
        if recorder.batch_dim is None and self._layout is None and _listed_samples(args) is None:
            self._watch_layout(_first_tensor((args, kwargs)))
        recorder._fwd_started = mark

    def _watch_layout(self, first_input: Any) -> None:
        """Watch the first forward's layers for one that takes its batch second (sequence first)."""
        seen: list[int] = []

        def on_layer(module: Any, args: Any) -> None:
            batch = None if seen else sequence_first_batch(module, args)
            if batch is not None:
                seen.append(batch)

        shape = tuple(first_input.shape) if first_input is not None else ()
        self._layout = (register_module_forward_pre_hook(on_layer), shape, seen)

    def _read_layout(self) -> None:
        """After the first forward: where a sequence-first layer saw a batch that is not the first
        dimension of the forward's input but its second, the input is sequence first too (an RNN
        language model's (sequence, batch) tokens) and its second dimension is the batch."""
        if self._layout is None:
            return
        handle, shape, seen = self._layout
        self._layout = None
        handle.remove()
        recorder = self.recorder
        sequence_first = bool(seen) and len(shape) >= 2 and shape[0] != seen[0] == shape[1]
        recorder.batch_dim = 1 if sequence_first else 0
        if sequence_first and recorder._open is not None:
            recorder._open.samples += seen[0] - (recorder._open.batch_size or 0)
            recorder._open.batch_size = seen[0]

    def on_forward_post(self, module: Any, args: Any, output: Any) -> None:
        recorder = self.recorder
        self._read_layout()
        counted = recorder._flops.stop()
        if counted is not None:
            recorder.model.update(counted)
        if recorder._fwd_started is None or recorder._open is None:
            return
        end = recorder.clock.mark()
        recorder._open.forward_s += recorder.clock.seconds(end) - recorder.clock.seconds(recorder._fwd_started)
        recorder._fwd_started = None

    def timed_comm_hook(self, hook: Callable[[Any, Any], Any],
                        powersgd: dict[str, Any] | None = None) -> Callable[[Any, Any], Any]:
        """``hook`` (DDP's allreduce, or the script's) with each bucket timed; ``powersgd``: the
        PowerSGD settings the script's hook runs with, whose messages each bucket records."""
        recorder = self.recorder

        def srifty_timed_hook(state: Any, bucket: Any) -> Any:
            ready = recorder.clock.mark()
            buf, params = bucket.buffer(), bucket.parameters()
            entry = _Bucket(
                index=int(bucket.index()),
                nbytes=int(buf.numel() * buf.element_size()),
                num_params=len(params),
                ready=ready,
                # only the buckets the recorder keeps as the layout need their messages (Recorder._close)
                sent=bucket_messages(powersgd, [tuple(p.shape) for p in params], buf.element_size())
                if powersgd and not recorder.bucket_layout else None,
            )
            if recorder._open is not None:
                recorder._open.buckets.append(entry)
                recorder._open.allreduced_bytes += entry.nbytes
                if powersgd and state.iter >= state.start_powerSGD_iter:  # this step's buckets are compressed
                    recorder._open.compressed = True
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
                it.synced_backwards += 1
            else:
                it.backward_compute_s += t1 - t0
            it.backwards += 1
            return result

        backward._srifty_wrapped = True  # type: ignore[attr-defined]
        return backward

    def on_step_pre(self, optimizer: Any, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        recorder = self.recorder
        recorder._optimizers.add(optimizer)
        if any(c.__name__ in SHARDED_OPTIMIZERS for c in type(optimizer).__mro__):
            recorder.model["sharded_optimizer"] = type(optimizer).__name__
        recorder._step_started = recorder.clock.mark()
        recorder._closure_s = 0.0
        # a closure the step calls (forward, loss and backward, as PyTorch Lightning steps) is
        # timed apart: its forward and backward are theirs, not the optimizer's
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
        if not callable(closure):
            return None
        timed = self._timed_closure(closure)
        if "closure" in kwargs:
            return args, {**kwargs, "closure": timed}
        return (args[0], timed, *args[2:]), kwargs

    def _timed_closure(self, closure: Callable[[], Any]) -> Callable[[], Any]:
        recorder = self.recorder

        def srifty_timed_closure() -> Any:
            outer = recorder._in_closure
            start = recorder.clock.mark()
            recorder._in_closure = True
            try:
                return closure()
            finally:
                recorder._in_closure = outer
                end = recorder.clock.mark()
                recorder._closure_s += recorder.clock.seconds(end) - recorder.clock.seconds(start)

        return srifty_timed_closure

    def on_step_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        recorder = self.recorder
        recorder.step_calls += 1
        if recorder._step_started is None or recorder._open is None:
            return
        end = recorder.clock.mark()
        step_s = recorder.clock.seconds(end) - recorder.clock.seconds(recorder._step_started)
        recorder._open.optimizer_s += max(0.0, step_s - recorder._closure_s)
        recorder._closure_s = 0.0
        recorder._open.steps += 1
        recorder._open.stepped.add(id(optimizer))
        recorder._recent_steps.append(id(optimizer))
        recorder._open.step_end = end
        if recorder._counter is not None:
            recorder._counter.mark_held()
        recorder._step_started = None

"""Counts the operators of one training iteration: the profile's device-independent view of it.

A GPU spends a small training step launching kernels and running Python, not on arithmetic
(docs/gpu-check.md), so the time a step would take on a GPU nobody profiled depends on how many
operators it runs, and how much arithmetic and memory traffic each has. :class:`OperatorCounter`
is a ``TorchDispatchMode`` that the recorder (srifty.profiling.instrument) holds over one whole
iteration -- never the whole run -- and that tallies, per phase of the iteration (forward,
backward, optimizer, other):

- ``kernels``: operators that run a kernel on the device (views, allocations and the
  collectives DDP issues are not counted; the collectives are the network's, not compute's);
- ``flops`` and ``flop_kernels``: the arithmetic of the operators ``torch.utils.flop_counter``
  knows (matmuls, convolutions, a GPU's attention), and of those it does not (``UNPRICED_FLOPS``:
  fused recurrent layers, a CPU's attention, grouped matmuls), and how many they are;
- ``flop_bytes`` / ``bytes``: the bytes those operators / all counted operators read and write
  (inputs and outputs, each tensor's own elements: an upper bound on memory traffic);
- ``param_bytes``: the part of ``bytes`` that is parameters, their gradients and optimizer state
  (tensors of a parameter's size), which does not grow with the batch;
- ``syncs``: operators that make the host wait for the device (``.item()`` and the like);
- ``recurrent_kernels`` and ``recurrent_units``: the part of ``kernels`` that ran inside a
  recurrent layer run step by step (a CPU runs a GRU or an RNN so, an LSTM so where oneDNN is off;
  the backward's, by the autograd nodes the layer's forward created), and that layer's layers times
  directions per call, forward and backward: a GPU runs each such layer as one cuDNN operator
  (srifty.opmodel counts it as a fused LSTM's, one kernel per layer and direction).

The figures go into the profile's ``job.operators`` (docs/profile-format.md); srifty.opmodel turns
them into a step time on any GPU.

It also follows the memory the iteration holds (``memory()``, the profile's ``job.memory``): the
tensor storages live when it starts (what :meth:`OperatorCounter.track_start` is given:
parameters, buffers, gradients, optimizer state, DDP's gradient buckets) and every storage an
operator creates, each until it is freed, and what is live right after the optimizer step
(``mark_held``). The most live at once is what a worker's device must hold at that batch, on
any device.
"""
from __future__ import annotations

import sys
import weakref
from typing import Any, Callable, Iterable

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

PHASES = ("forward", "backward", "optimizer", "input", "other")
FIELDS = ("kernels", "flop_kernels", "flops", "flop_bytes", "bytes", "param_bytes", "syncs", "recurrent_kernels",
          "recurrent_units")
# the operators of a recurrent layer run fused (a CPU's LSTM in oneDNN, every RNN on a GPU)
FUSED_RECURRENT = {"mkldnn_rnn_layer", "_cudnn_rnn", "miopen_rnn"}
# an autograd node created inside a recurrent layer run step by step (OperatorCounter._leave_recurrent)
RECURRENT_NODE = "srifty_recurrent"
# operators that allocate, alias or only change metadata: no kernel runs
_NO_KERNEL = {"empty", "empty_strided", "empty_like", "detach", "alias", "lift_fresh", "resize_", "set_",
              "_reshape_alias", "_unsafe_view", "unsqueeze_", "squeeze_", "as_strided_", "t_", "transpose_",
              "_has_compatible_shallow_copy_type", "is_same_size", "sym_size", "sym_stride", "sym_numel",
              "sym_storage_offset", "result_type", "_to_copy_meta"}
_SYNCS = {"_local_scalar_dense", "item", "nonzero", "equal", "is_nonzero"}
# collectives (the network's time, not compute's) and the profiler's record_function markers
_NOT_KERNEL_NAMESPACES = {"c10d", "_c10d_functional", "c10d_functional", "_dtensor", "profiler"}
# operators torch.utils.flop_counter does not price, with their arithmetic from their inputs and
# output: fused recurrent layers (a CPU runs an LSTM as one oneDNN operator per layer and direction;
# a GPU runs every RNN, LSTM and GRU as one cuDNN or MIOpen operator), from the weights they
# multiply (recurrent_flops), a backward computing the gradient through the inputs and hidden
# states (as much arithmetic as the forward) and that of the weights (as much again); a CPU's fused
# attention (F.scaled_dot_product_attention, nn.MultiheadAttention), priced as torch prices a GPU's;
# and the grouped matmul of mixture-of-experts layers (torch._grouped_mm: each row of the input by
# its group's matrix, or with both operands 2-D, each group's slice of the inner dimension)
UNPRICED_FLOPS: dict[str, Callable[[Any, Any], int]] = {
    "mkldnn_rnn_layer": lambda a, out: recurrent_flops(a[0], a[1:3]),
    "mkldnn_rnn_layer_backward": lambda a, out: 2 * recurrent_flops(a[0], a[1:3]),
    "_cudnn_rnn": lambda a, out: recurrent_flops(a[0], a[1]),
    "_cudnn_rnn_backward": lambda a, out: (1 + bool(a[21][3])) * recurrent_flops(a[0], a[1]),
    "miopen_rnn": lambda a, out: recurrent_flops(a[0], a[1]),
    "miopen_rnn_backward": lambda a, out: (1 + bool(a[20][3])) * recurrent_flops(a[0], a[1]),
    "_scaled_dot_product_flash_attention_for_cpu": lambda a, out: sdpa_flop_count(a[0].shape, a[1].shape, a[2].shape),
    "_scaled_dot_product_flash_attention_for_cpu_backward":
        lambda a, out: sdpa_backward_flop_count(a[0].shape, a[1].shape, a[2].shape, a[3].shape),
    "_grouped_mm": lambda a, out: 2 * (a[0].numel() * a[1].shape[-1] if a[0].dim() == a[1].dim() == 2
                                       else out.numel() * a[0].shape[-1]),
}


# why an iteration's operators are not counted where torch.compile has run in the worker
NOT_COUNTED_COMPILED = (
    "the script runs code built by torch.compile, whose operators srifty does not count (counting them "
    "breaks a compiled backward), so a CPU profile cannot be carried to a GPU: profile again under "
    "TORCHDYNAMO_DISABLE=1 (the script then runs eagerly and its operators are counted), or on the GPU."
)


def compiled_frames() -> int:
    """How many Python frames torch.compile has evaluated in this process (0 where it never ran);
    counted from its first call, before any graph is built."""
    counters = getattr(sys.modules.get("torch._dynamo.utils"), "counters", None)
    return int(counters["frames"]["total"]) if counters is not None else 0


def recurrent_flops(inputs: torch.Tensor, weights: Iterable[torch.Tensor]) -> int:
    """The arithmetic of a fused recurrent layer's forward (or of a stack of them): every row of
    ``inputs`` (a time step of one sequence) is multiplied, in each layer and direction, by that
    layer's input and hidden weight matrices (the 2-D ``weights``; biases are not matrices), 2
    flops a multiply-add. A packed or batch-first input has as many rows."""
    rows = inputs.numel() // max(int(inputs.shape[-1]), 1)
    return 2 * rows * sum(int(w.numel()) for w in weights if isinstance(w, torch.Tensor) and w.dim() == 2)


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _nbytes(t: torch.Tensor) -> int:
    try:
        return int(t.numel()) * int(t.element_size())
    except (RuntimeError, NotImplementedError):  # a tensor subclass without storage
        return 0


class OperatorCounter(TorchDispatchMode):
    """Tallies the operators dispatched while it is active, per phase (``phase_of()`` names the
    phase the recorder is in). ``param_numels`` are the element counts of the model's parameters:
    a tensor of one of those sizes is counted as parameter, gradient or optimizer-state traffic."""

    def __init__(self, phase_of: Callable[[], str], param_numels: Iterable[int] = ()) -> None:
        super().__init__()
        self.phase_of = phase_of
        self.param_numels = {int(n) for n in param_numels if int(n) > 1}
        self.counts = {p: dict.fromkeys(FIELDS, 0) for p in PHASES}
        self._storages: dict[int, weakref.ref[Any]] = {}  # id of each live storage followed
        self.live_bytes = 0
        self.peak_bytes = 0
        self.start_bytes = 0
        self.held_bytes = 0  # the most live right after an optimizer step (mark_held)
        self.device_type: str | None = None  # the worker's device (its parameters'): only its storages count
        self._recurrent: list[dict[str, Any]] = []  # the recurrent layers' forwards under way (watch_recurrent)
        self._hooks: list[Any] = []
        self._tagged = False  # whether any autograd node was tagged RECURRENT_NODE (its backward to look for)

    def watch_recurrent(self, modules: Iterable[Any]) -> None:
        """Follow the forwards of the recurrent layers among ``modules`` (the model's), to count the
        kernels of those that run step by step apart; the hooks go when the count ends."""
        for m in modules:
            if isinstance(m, nn.RNNBase):
                self._hooks += [m.register_forward_pre_hook(self._enter_recurrent),
                                m.register_forward_hook(self._leave_recurrent)]

    def __exit__(self, *exc: Any) -> Any:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        return super().__exit__(*exc)

    def _enter_recurrent(self, module: Any, args: Any) -> None:
        # the autograd nodes the layer's inputs come from: where its own nodes end
        self._recurrent.append({"kernels": 0, "fused": False,
                                "before": [t.grad_fn for t in _tensors(args) if t.grad_fn is not None]})

    def _leave_recurrent(self, module: Any, args: Any, output: Any) -> None:
        region = self._recurrent.pop() if self._recurrent else None
        if region is None or region["fused"] or not region["kernels"]:
            return
        units = int(module.num_layers) * (2 if module.bidirectional else 1)
        c = self.counts[self.phase_of()]
        c["recurrent_kernels"] += region["kernels"]
        c["recurrent_units"] += units
        todo = [t.grad_fn for t in _tensors(output) if t.grad_fn is not None]
        if todo:
            self.counts["backward"]["recurrent_units"] += units
        seen = {id(node) for node in region["before"]}  # held alive by the region while it is read
        while todo:  # the nodes the layer's forward created: their backward kernels are the layer's
            node = todo.pop()
            if id(node) in seen or type(node).__name__ == "AccumulateGrad":
                continue
            seen.add(id(node))
            node.metadata[RECURRENT_NODE] = self._tagged = True
            todo += [nxt for nxt, _ in node.next_functions if nxt is not None]

    def track(self, tensors: Iterable[torch.Tensor]) -> None:
        """Count the storages of ``tensors`` as live until they are freed (each storage once,
        however many views share it)."""
        for t in tensors:
            try:
                self.track_storage(t.untyped_storage())
            except (RuntimeError, NotImplementedError, TypeError):  # sparse or a subclass without storage
                continue

    def track_storage(self, storage: Any) -> None:
        """Count one storage as live until it is freed (only those on the worker's device)."""
        if self.device_type is not None and storage.device.type != self.device_type:
            return
        key = id(storage)
        if key in self._storages:
            return
        nbytes = int(storage.nbytes())
        self._storages[key] = weakref.ref(storage, lambda _ref, key=key, nbytes=nbytes: self._freed(key, nbytes))
        self.live_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)

    def _freed(self, key: int, nbytes: int) -> None:
        if self._storages.pop(key, None) is not None:
            self.live_bytes -= nbytes

    def track_start(self, tensors: Iterable[torch.Tensor], storages: Iterable[Any] = ()) -> None:
        """What is live as the iteration starts: the storages of ``tensors`` (parameters, buffers,
        gradients, optimizer state; the first one's device is the worker's) and ``storages`` (DDP's
        gradient buckets)."""
        tensors = list(tensors)
        if tensors:
            self.device_type = tensors[0].device.type
        self.track(tensors)
        for storage in storages:
            self.track_storage(storage)
        self.start_bytes = self.live_bytes

    def mark_held(self) -> None:
        """An optimizer step just ended: what is live now (parameters, gradients, optimizer state,
        DDP's buckets) is held from one iteration to the next, whatever the batch."""
        self.held_bytes = max(self.held_bytes, self.live_bytes)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        try:
            self._tally(func, args, kwargs, out)
        except Exception:  # noqa: BLE001 - the count is best effort, the user's step is not
            pass
        try:
            self.track(_tensors(out))
        except Exception:  # noqa: BLE001
            pass
        return out

    def _tally(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        namespace = getattr(func, "namespace", "aten")
        name = func._schema.name.split("::")[-1] if hasattr(func, "_schema") else str(func)
        if namespace in _NOT_KERNEL_NAMESPACES or name in _NO_KERNEL or getattr(func, "is_view", False):
            return
        c = self.counts[self.phase_of()]
        if name in _SYNCS:
            c["syncs"] += 1
            if name in ("_local_scalar_dense", "item"):
                return
        tensors = _tensors((args, kwargs)) + _tensors(out)
        moved = sum(_nbytes(t) for t in tensors)
        c["kernels"] += 1
        for region in self._recurrent:
            region["kernels"] += 1
            region["fused"] = region["fused"] or name in FUSED_RECURRENT
        node = torch._C._current_autograd_node() if self._tagged and not self._recurrent else None
        if node is not None and node.metadata.get(RECURRENT_NODE):
            c["recurrent_kernels"] += 1
        c["bytes"] += moved
        c["param_bytes"] += sum(_nbytes(t) for t in tensors if t.numel() in self.param_numels)
        packet = getattr(func, "overloadpacket", None)
        if packet in flop_registry or name in UNPRICED_FLOPS:
            flops = (int(flop_registry[packet](*args, **kwargs, out_val=out)) if packet in flop_registry
                     else UNPRICED_FLOPS[name](args, out))
            if flops > 0:
                c["flops"] += flops
                c["flop_kernels"] += 1
                c["flop_bytes"] += moved

    def result(self, batch_size: int | None, param_tensors: int) -> dict[str, Any]:
        """The ``job.operators`` block of the profile."""
        return {"batch_size": batch_size, "param_tensors": param_tensors,
                "phases": {p: dict(v) for p, v in self.counts.items()}}

    def memory(self, batch_size: int | None) -> dict[str, Any]:
        """The ``job.memory`` block of the profile (bytes of tensor storage on one worker)."""
        return {"batch_size": batch_size, "start_bytes": self.start_bytes, "peak_bytes": self.peak_bytes,
                "end_bytes": self.live_bytes, "held_bytes": max(self.held_bytes, self.start_bytes, self.live_bytes)}

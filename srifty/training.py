"""Training with a different per-worker batch on each node: the batch to use, and correct gradients.

``srifty recommend`` can propose a *mix* of instance types in which each type gets its own
per-worker batch (the global batch split in proportion to each type's speed). Two calls make a
DDP script train correctly on such a mix::

    import srifty
    batch = srifty.local_batch_size(64)            # SRIFTY_BATCH_SIZE when set, else 64
    model = DistributedDataParallel(net)
    srifty.weight_gradients_by_batch(model, batch)  # every rank, before the first forward

Why the second call: DDP averages the gradients of the ranks with equal weights,
``(1/W) * sum_r g_r``. When each rank's loss is the **mean over its own b_r samples**, the gradient
of the global batch (the mean over all ``B = sum_r b_r`` samples) is ``sum_r (b_r/B) * g_r``; with
unequal batches the two differ, and a worker with 4 samples counts as much as one with 12. The
communication hook registered here scales each rank's gradient bucket by ``b_r/B`` and
allreduces with a sum, which gives exactly the global-batch gradient. It replaces the division
by the world size that DDP's own allreduce does, so it costs no extra communication; when all
ranks hold the same batch it registers nothing at all.

Importing this module does not import torch (``import srifty`` stays cheap).
"""

from __future__ import annotations

import operator
import os
from dataclasses import dataclass
from typing import Any

from srifty.errors import SriftyError

BATCH_ENV = "SRIFTY_BATCH_SIZE"


def _positive_int(value: Any, what: str) -> int:
    """``value`` as a positive int: ints, numpy and torch integers; not bools, floats or strings."""
    problem = SriftyError(f"{what} must be a positive whole number of samples (got {value!r}).")
    if isinstance(value, bool):
        raise problem
    try:
        number = operator.index(value)
    except TypeError:
        raise problem from None
    if number < 1:
        raise problem
    return int(number)


def local_batch_size(default: int, env: dict[str, str] | None = None) -> int:
    """The per-worker batch this worker should use: ``$SRIFTY_BATCH_SIZE`` when set, else ``default``.

    srifty sets ``SRIFTY_BATCH_SIZE`` for every worker it starts (``srifty profile --batch-size``,
    and on a mix of instance types, each node's own share of the global batch). An unset or empty
    variable means "not given". A value that is not a positive whole number (``"12.5"``, ``"0"``,
    ``"abc"``) raises :class:`~srifty.errors.SriftyError` rather than being ignored: a worker
    that silently trained at ``default`` would break the batch split the job was planned with.
    ``env`` replaces ``os.environ`` (for tests).
    """
    default = _positive_int(default, "local_batch_size(default)")
    raw = (os.environ if env is None else env).get(BATCH_ENV)
    if raw is None or not raw.strip():
        return default
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or int(text) < 1:  # no sign, decimal point or exponent
        raise SriftyError(
            f"{BATCH_ENV}={raw!r} is not a per-worker batch size: it must be a positive whole number "
            "of samples, such as 32.",
            f"Unset it to use the script's default ({default}), or set it to the batch this worker should train with.",
        )
    return int(text)


@dataclass(frozen=True)
class BatchWeighting:
    """What :func:`weight_gradients_by_batch` found and did, on this rank.

    ``batches`` holds every rank's local batch in rank order (of the DDP model's process group),
    ``global_batch`` their sum, ``share`` this rank's weight ``local_batch / global_batch`` and
    ``hooked`` whether a communication hook was registered (False when all batches are equal:
    DDP's own averaging is then already the global-batch gradient).
    """

    local_batch: int
    batches: tuple[int, ...]
    global_batch: int
    share: float
    hooked: bool

    @property
    def world_size(self) -> int:
        return len(self.batches)


@dataclass
class _HookState:
    process_group: Any
    share: float


# Unannotated on purpose: DDP compares a hook's annotations with the real torch classes, and
# this module's annotations are strings (postponed evaluation, so that torch is not imported).
def batch_weighted_allreduce_hook(state, bucket):  # type: ignore[no-untyped-def]
    """DDP communication hook: ``sum_r (b_r/B) * g_r`` over the ranks, instead of DDP's ``mean_r g_r``.

    Scales this rank's gradient bucket by its share ``b_r/B`` in place and allreduces with a sum,
    the pattern of torch's ``default_hooks.allreduce_hook`` (which divides by the world size
    instead). ``state`` is the :class:`_HookState` built by :func:`weight_gradients_by_batch`.
    """
    import torch.distributed as dist

    tensor = bucket.buffer()
    tensor.mul_(state.share)
    return (
        dist.all_reduce(tensor, group=state.process_group, async_op=True)
        .get_future()
        .then(lambda fut: fut.value()[0])
    )


def _count_device(ddp_model: Any) -> Any:
    """Where the one-element collective of the batch sizes runs: the model's device (NCCL takes
    CUDA tensors only; gloo takes CPU tensors, and CUDA ones too)."""
    import torch

    for p in ddp_model.parameters():
        return p.device
    return torch.device("cpu")


def weight_gradients_by_batch(ddp_model: Any, local_batch: int) -> BatchWeighting:
    """Make DDP's gradient the gradient of the whole global batch when ranks hold different batches.

    Call it on **every rank** (it runs one collective), after wrapping the model in
    ``DistributedDataParallel`` and before its first forward pass, with the number of samples this
    rank's loss averages over. It all-gathers the local batches of the DDP model's process group;
    if they differ, it registers :func:`batch_weighted_allreduce_hook`, which weights each rank's
    gradient by ``b_r / B`` (``B`` the sum), so that the gradient every rank applies is
    ``sum_r (b_r/B) * g_r``. If they are all equal it registers nothing (DDP's equal average is
    then already right) and the model runs exactly as before.

    The assumption, precisely: on each rank the loss whose gradient DDP reduces is the mean, over
    the ``local_batch`` samples of that rank, of a per-sample loss that depends on that sample
    only (``reduction="mean"``, the PyTorch default). Then the result is the gradient of the mean
    loss over all ``B`` samples, as one process would compute it on the concatenated batch.
    With a **sum**-reduced loss do not call this: DDP's equal average of per-rank sums is already
    ``(1/W) * sum`` over all samples, the global-batch gradient up to the constant factor ``B/W``
    (fold it into the learning rate), and weighting it again would over-count the larger batches.
    Losses that mix samples (BatchNorm statistics, in-batch negatives) are per rank either way.

    The weights are fixed here: keep every rank's batch at its ``local_batch`` for every step
    (``drop_last=True`` in the data loader). The hook takes DDP's one communication-hook slot
    (DDP allows one per model), so it cannot be combined with another hook such as fp16
    compression. Returns a :class:`BatchWeighting` describing what was found and done.
    """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if not isinstance(ddp_model, DistributedDataParallel):
        raise SriftyError(
            f"weight_gradients_by_batch needs the DistributedDataParallel-wrapped model (got {type(ddp_model).__name__}).",
            "Call it with the model returned by DistributedDataParallel(...), after wrapping.",
        )
    local_batch = _positive_int(local_batch, "weight_gradients_by_batch(local_batch)")
    group = getattr(ddp_model, "process_group", None)
    world = dist.get_world_size(group) if group is not None else dist.get_world_size()
    if world == 1:
        return BatchWeighting(local_batch, (local_batch,), local_batch, 1.0, False)
    mine = torch.tensor([local_batch], dtype=torch.int64, device=_count_device(ddp_model))
    gathered = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine, group=group)
    batches = tuple(int(t.item()) for t in gathered)
    total = sum(batches)
    share = local_batch / total
    if len(set(batches)) == 1:
        return BatchWeighting(local_batch, batches, total, share, False)
    ddp_model.register_comm_hook(_HookState(process_group=group, share=share), batch_weighted_allreduce_hook)
    return BatchWeighting(local_batch, batches, total, share, True)


__all__ = ["BATCH_ENV", "BatchWeighting", "batch_weighted_allreduce_hook", "local_batch_size",
           "weight_gradients_by_batch"]

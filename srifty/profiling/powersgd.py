"""What PyTorch's PowerSGD communication hook sends for a gradient bucket.

``powerSGD_hook`` (torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook) views each of a
bucket's gradients as a matrix of its first dimension's rows and compresses those where
``(rows + cols) * rank * min_compression_rate < rows * cols`` to two factors, P (rows x rank)
and Q (cols x rank). A bucket then takes three allreduces, one after another: the gradients
left uncompressed (biases, small layers), the Ps, the Qs. ``batched_powerSGD_hook`` views the
whole bucket as one square matrix (zero-padded) and allreduces its two factors. Both run DDP's
plain allreduce for the first ``start_powerSGD_iter`` steps.

The profiler records a bucket's messages (:func:`bucket_messages`) beside its bytes, and the
simulator allreduces them in turn where the bucket becomes ready
(srifty.features.builder.FeatureBuilder.messages).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState

BATCHED_HOOK = "batched_powerSGD_hook"


def settings(state: Any, hook_names: Sequence[str]) -> dict[str, Any] | None:
    """The profile's ``job.powersgd`` block for a hook registered with ``state``, named
    ``hook_names`` with the hooks it wraps (DDP's fp16 wrapper around the batched hook); None
    where the state is not PowerSGD's."""
    if not isinstance(state, PowerSGDState):
        return None
    return {
        "rank": int(state.matrix_approximation_rank),
        "min_compression_rate": float(state.min_compression_rate),
        "start_iter": int(state.start_powerSGD_iter),
        "batched": any(name.endswith(BATCHED_HOOK) for name in hook_names),
    }


def compresses(rows: int, cols: int, rank: int, min_compression_rate: float) -> bool:
    """Whether PowerSGD compresses a gradient viewed as ``rows`` x ``cols`` at ``rank`` (its own
    rule: the factors' elements times the minimum rate below the matrix's)."""
    return (rows + cols) * rank * min_compression_rate < rows * cols


def bucket_messages(powersgd: dict[str, Any], shapes: Sequence[Sequence[int]], element_bytes: int) -> tuple[int, ...]:
    """The bytes of each allreduce PowerSGD (``powersgd``: :func:`settings`) runs for a bucket of
    gradients of ``shapes``, in order: the uncompressed ones, the Ps, the Qs; the batched hook's
    two factors of the bucket as a square."""
    rank = powersgd["rank"]
    numels = [math.prod(s) for s in shapes]
    if powersgd["batched"]:
        side = math.ceil(math.sqrt(sum(numels)))
        return side * rank * element_bytes, side * rank * element_bytes
    plain = ps = qs = 0
    for shape, numel in zip(shapes, numels):
        rows = int(shape[0]) if shape else 1
        cols = numel // rows if rows else 0
        r = min(rows, cols, rank)
        if rows and cols and compresses(rows, cols, r, powersgd["min_compression_rate"]):
            ps, qs = ps + rows * r, qs + cols * r
        else:
            plain += numel
    return plain * element_bytes, ps * element_bytes, qs * element_bytes

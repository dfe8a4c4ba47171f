"""Whether a job fits a GPU: the tensor memory one worker holds at a per-worker batch, against the
memory of the GPU it would run on.

DDP keeps a whole replica on every worker, so a GPU too small for one worker's parameters,
gradients, optimizer state and activations cannot run the job at any node count. The profiler
follows every tensor storage of one iteration (srifty.profiling.opcount: the profile's
``job.memory``): what a worker holds between iterations (parameters, buffers, gradients,
optimizer state, DDP's gradient buckets) and the most it holds at once. Those counts do not
depend on the device, so a CPU profile says what a GPU must hold. At another per-worker batch the
part above what is held between iterations (activations and temporaries) is scaled with the batch.

Only tensor storage is counted (a CUDA profile's peak is the allocator's own where that is more:
it includes the libraries' workspaces): the CUDA context and the caching allocator's rounding
and fragmentation come on top, so a configuration whose need lies just under the GPU's memory
may still run out. Without a measured footprint, a job that states its gradient size still gives a
floor: every worker holds its parameters and their gradients, twice the gradient bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from srifty.features.hardware import hardware_of

GIB = float(2**30)
# a worker that fits but needs more than this share of its GPU's memory is warned of: the count
# leaves out the CUDA context and the caching allocator's rounding (a judgment for a warning; the
# need is not raised by it)
TIGHT_SHARE = 0.9


@dataclass(frozen=True)
class MemoryFootprint:
    """One worker's tensor storage in the profiler's counted iteration, at ``batch_size``."""

    batch_size: int
    held_bytes: int  # held between iterations: parameters, buffers, gradients, optimizer state, DDP's buckets
    peak_bytes: int  # the most held at once during the iteration

    @classmethod
    def from_json(cls, block: dict[str, Any] | None, default_batch: int | None) -> "MemoryFootprint | None":
        """The profile's ``job.memory`` (None where it is missing or has no batch)."""
        if not block:
            return None
        batch = block.get("batch_size") or default_batch
        if not batch:
            return None
        held = max(int(block.get(k) or 0) for k in ("held_bytes", "start_bytes", "end_bytes"))
        # on CUDA, what the caching allocator handed out (workspaces included) where it is more
        peak = max(int(block["peak_bytes"]), int(block.get("cuda_max_allocated_bytes") or 0))
        return cls(int(batch), held, max(peak, held))

    @property
    def per_sample_bytes(self) -> float:
        """What each sample of the batch adds: the iteration's rise above what is held, per sample."""
        return (self.peak_bytes - self.held_bytes) / self.batch_size

    def need_bytes(self, batch: float) -> float:
        """The storage one worker needs at ``batch``: what it holds between iterations, and the
        iteration's rise above that scaled with the batch."""
        return self.held_bytes + self.per_sample_bytes * batch

    def max_batch(self, capacity_bytes: float) -> float:
        """The largest per-worker batch whose need fits in ``capacity_bytes`` (0: none does)."""
        if self.held_bytes > capacity_bytes:
            return 0.0
        per_sample = self.per_sample_bytes
        return math.inf if per_sample <= 0 else (capacity_bytes - self.held_bytes) / per_sample


@dataclass(frozen=True)
class MemoryNeed:
    """One worker's need at a batch against its GPU's memory."""

    need_gib: float
    gpu_gib: float
    gpu_name: str  # "T4"
    instance_type: str
    measured: bool  # False: only the floor of parameters and gradients (no footprint was measured)
    batch: float  # the per-worker batch

    @property
    def fits(self) -> bool:
        return self.need_gib <= self.gpu_gib

    def tight_note(self) -> str | None:
        """Why a worker that fits may still run out (:func:`tight_note`), or None."""
        return tight_note(self.need_gib, self.gpu_gib, self.gpu_name, self.instance_type, self.batch)

    def need_text(self) -> str:
        if self.measured:
            return (f"{self.need_gib:.1f} GiB of tensor memory at per-worker batch {self.batch:g} (as the profiler "
                    "counted it; the CUDA context comes on top)")
        return (f"at least {self.need_gib:.1f} GiB at per-worker batch {self.batch:g} for its parameters and "
                "gradients alone (the profile has no memory count)")

    def note(self) -> str:
        """Why it does not fit, for a prediction's warnings."""
        return (f"does not fit in GPU memory: one worker needs {self.need_text()}, and the "
                f"{self.gpu_name or 'GPU'} of {self.instance_type} has {self.gpu_gib:.1f} GiB")


def tight_note(need_gib: float, gpu_gib: float, gpu_name: str, instance_type: str, batch: float) -> str | None:
    """For a worker that fits but needs more than TIGHT_SHARE of its GPU's memory, why it may still
    run out (a prediction's warning, recommend's note on its chosen configuration); else None."""
    if not TIGHT_SHARE * gpu_gib < need_gib <= gpu_gib:
        return None
    return (f"tight in GPU memory: one worker holds at least {need_gib:.1f} GiB of tensor memory at per-worker "
            f"batch {batch:g} on {instance_type}, {need_gib / gpu_gib:.0%} of its {gpu_name or 'GPU'}'s "
            f"{gpu_gib:.1f} GiB; the CUDA context and the caching allocator's rounding come on top and may not "
            "fit (a smaller per-worker batch leaves room)")


def tight_notes(memory_gib: dict[str, float], batch_split: dict[str, float], catalog: Any) -> list[str]:
    """:func:`tight_note` of each type of a ranked row (``memory_gib``, ``batch_split``: its
    per-type need and per-worker batch) whose GPU's memory is known (its Hardware, as predictions
    read it)."""
    out = []
    for t, need in memory_gib.items():
        hw = hardware_of(catalog, t)
        if hw.gpu_memory_gib and (note := tight_note(need, hw.gpu_memory_gib, hw.gpu_name, t, batch_split.get(t, 0.0))):
            out.append(note)
    return out


def left_out_notes(needs: Sequence[MemoryNeed]) -> list[str]:
    """The solver's notes on types left out for memory (``needs``: per type, the least per-worker
    batch that does not fit): one per need, naming each GPU and its types."""
    by_need: dict[str, dict[tuple[str, float], list[str]]] = {}
    for m in sorted(needs, key=lambda m: m.instance_type):
        by_need.setdefault(m.need_text(), {}).setdefault((m.gpu_name or "GPU", m.gpu_gib), []).append(m.instance_type)
    return [f"GPU memory: one worker needs {need}; left out at that per-worker batch and above: "
            + "; ".join(f"the {gpu} ({gib:.1f} GiB) of {', '.join(ts)}" for (gpu, gib), ts in gpus.items())
            for need, gpus in by_need.items()]


def footprint_at(footprints: Sequence[MemoryFootprint], batch: float) -> MemoryFootprint | None:
    """The footprint measured at the batch nearest ``batch`` (by ratio), or None."""
    if not footprints:
        return None
    return min(footprints, key=lambda f: abs(math.log(max(batch, 1e-9) / f.batch_size)))


def memory_need(footprints: Sequence[MemoryFootprint], grad_bytes: float | None, gpu_gib: float | None,
                gpu_name: str, instance_type: str, batch: float) -> MemoryNeed | None:
    """One worker's need at ``batch`` on a GPU of ``gpu_gib`` (None where the GPU's memory or
    anything about the job's is unknown). ``grad_bytes``: the stated gradient size, for the floor
    where no footprint was measured (give None for an estimated one)."""
    line = memory_line(footprints, grad_bytes, batch) if gpu_gib else None
    if line is None:
        return None
    return MemoryNeed(line[0] + line[1] * batch, float(gpu_gib), gpu_name, instance_type, bool(footprints), batch)


def memory_line(footprints: Sequence[MemoryFootprint], grad_bytes: float | None, batch: float
                ) -> tuple[float, float] | None:
    """One worker's need near ``batch`` as a line in the batch, in GiB: (what it holds whatever
    the batch, what each sample adds), from the footprint nearest ``batch``, else the floor of
    parameters and gradients (nothing per sample); None where neither is known."""
    fp = footprint_at(footprints, batch)
    if fp is not None:
        return fp.held_bytes / GIB, fp.per_sample_bytes / GIB
    return (2.0 * float(grad_bytes) / GIB, 0.0) if grad_bytes else None


def max_fitting_batch(footprints: Sequence[MemoryFootprint], grad_bytes: float | None, gpu_gib: float | None,
                      ) -> float:
    """The largest per-worker batch that fits in ``gpu_gib`` by every measured footprint (inf where
    nothing bounds it; 0 where no batch fits). Each footprint is taken for the batches nearest it."""
    if not gpu_gib:
        return math.inf
    cap = float(gpu_gib) * GIB
    if not footprints:
        return 0.0 if grad_bytes and 2.0 * float(grad_bytes) > cap else math.inf
    ordered = sorted(footprints, key=lambda f: f.batch_size)
    best = 0.0
    for i, fp in enumerate(ordered):
        # the batches this footprint answers for: up to the geometric midpoint with the next one
        low = 0.0 if i == 0 else math.sqrt(ordered[i - 1].batch_size * fp.batch_size)
        high = math.inf if i == len(ordered) - 1 else math.sqrt(fp.batch_size * ordered[i + 1].batch_size)
        fits_to = min(fp.max_batch(cap), high)
        if fits_to < low:
            break
        best = fits_to
        if fits_to < high:
            break
    return best

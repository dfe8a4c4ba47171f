"""The analytical simulator: α–β allreduce algebra and bucketed allreduce overlapped with backward.

Pure Python and numpy, no learned parts. Units: bytes, milliseconds, GB/s (1e9 bytes/s),
microseconds for link latency.

- ring allreduce of S bytes over p workers: each worker sends and receives 2(p−1)/p·S bytes
  in 2(p−1) steps: T = 2(p−1)/p · S/B + 2(p−1)·α.
- across nodes the ring crosses every node's NIC once each way, so B is the slowest link on
  the ring (inter-node NIC or intra-node path). Latency as NCCL's own tuning model counts it
  (``ncclTopoTuneModel``, src/graph/tuning.cc): of the 2(p−1) steps, 2n cross the network at
  the inter-node α and the rest stay in a node at the intra-node α (one worker per node: every
  step is an inter-node one).
- hierarchical (equal workers per node g, n nodes): intra reduce-scatter, inter allreduce of
  the node's shard on every rail (the NIC carries 2(n−1)/n·S in all), intra all-gather. Only
  where the node has an NVLink/NVSwitch fabric (``hierarchical=True``): NCCL's multi-rail
  and tree paths get close to it there (nccl-tests on p4d/p4de/p5), while PCIe nodes with one
  NIC (the Pollux g4dn traces) and gloo (emulated hosts) run the flat ring for DDP's buckets.
- tree (``tree_allreduce_ms``): NCCL's double binary tree across nodes, which its tuning takes
  for small messages on many nodes. Only on request (``tree=True``): srifty's estimate is the
  ring's, and the tree's bounds its interval from below (srifty.features.FeatureBuilder.estimate).
- iteration: forward, then backward during which DDP buckets become ready (the profile's
  buckets and ready times when known, else :func:`bucket_layout` and a uniform split); each
  bucket's allreduce starts when it is ready and the previous one finished; the step ends when
  both backward and the last allreduce are done.
- gradient accumulation (:func:`accumulated_step`): a step of several forward-backward passes,
  each like the one simulated; a pass allreduces its buckets during its own backward, and a
  pass under DDP's ``no_sync()`` is compute alone.
- synchronised batch norm (:func:`with_sync_batchnorm`): each SyncBatchNorm layer gathers its
  batch statistics across the workers in forward and allreduces their gradients in backward,
  two small collectives that the layers after it wait for.
- a sharded optimizer (:func:`with_parameter_gather`, ZeroRedundancyOptimizer): after its step
  each worker sends its shard of the parameters to the others, a ring all-gather, half a ring
  allreduce's traffic and steps, which nothing hides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

DEFAULT_BUCKET_CAP_BYTES = 25 * 1024 * 1024  # torch DDP bucket_cap_mb default
DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024  # DDP's first (last-layer) bucket is capped at 1 MiB
TREE_BANDWIDTH_SHARE = 0.92  # the tree's bandwidth against the ring's across nodes (ncclTopoTuneModel)
DEFAULT_BACKWARD_FRACTION = 2.0 / 3.0  # backward ≈ 2× forward FLOPs; used only when a profile has no split
# DDP's communication hooks as a profile names them (job.comm_hook; "builtin:" for the C++ ones) and
# the bytes each allreduces per gradient element: the compression hooks cast to 16 bits (a wrapper
# casts what the hook it wraps sends); None: the gradients as they are
_HOOKS = "torch.distributed.algorithms.ddp_comm_hooks.default_hooks."
HOOK_ELEMENT_BYTES: dict[str, int | None] = {
    _HOOKS + "allreduce_hook": None, "builtin:ALLREDUCE": None,
    _HOOKS + "fp16_compress_hook": 2, _HOOKS + "bf16_compress_hook": 2, "builtin:FP16_COMPRESS": 2,
    _HOOKS + "fp16_compress_wrapper.<locals>.fp16_compress_wrapper_hook": 2,
    _HOOKS + "bf16_compress_wrapper.<locals>.bf16_compress_wrapper_hook": 2,
}


@dataclass(frozen=True)
class Link:
    """A communication path: bandwidth (GB/s, one direction) and per-message latency (µs)."""

    gbytes_per_s: float
    latency_us: float

    def __post_init__(self) -> None:
        if not self.gbytes_per_s > 0:
            raise ValueError(f"link bandwidth must be > 0 GB/s, got {self.gbytes_per_s}")


def _transfer_ms(nbytes: float, link: Link) -> float:
    return nbytes / (link.gbytes_per_s * 1e9) * 1e3


def ring_allreduce_ms(nbytes: float, world: int, link: Link) -> float:
    """Ring allreduce time of ``nbytes`` over ``world`` workers on one kind of link."""
    return flat_ring_allreduce_ms(nbytes, 1, world, link, link)


def hierarchical_allreduce_ms(nbytes: float, nodes: int, per_node: int, intra: Link, inter: Link) -> float:
    """Reduce-scatter in the node, allreduce of the shards across nodes, all-gather in the node."""
    if nodes * per_node <= 1 or nbytes <= 0:
        return 0.0
    g, n = per_node, nodes
    t = 0.0
    if g > 1:
        t += 2 * ((g - 1) / g * _transfer_ms(nbytes, intra) + (g - 1) * intra.latency_us / 1e3)
    if n > 1:
        t += 2 * (n - 1) / n * _transfer_ms(nbytes, inter) + 2 * (n - 1) * inter.latency_us / 1e3
    return t


def flat_ring_allreduce_ms(nbytes: float, nodes: int, world: int, intra: Link, inter: Link) -> float:
    """Ring allreduce of ``world`` workers over ``nodes`` nodes: the slowest link's bandwidth,
    and 2·nodes of the 2(world−1) steps at the inter-node latency, the others at the intra-node
    one (NCCL's ring latency model)."""
    if world <= 1 or nbytes <= 0:
        return 0.0
    steps = 2 * (world - 1)
    inter_steps = min(2 * nodes, steps) if nodes > 1 else 0
    slowest = Link(min(intra.gbytes_per_s, inter.gbytes_per_s) if nodes > 1 else intra.gbytes_per_s, 0.0)
    return (steps / world * _transfer_ms(nbytes, slowest)
            + (inter_steps * inter.latency_us + (steps - inter_steps) * intra.latency_us) / 1e3)


def tree_allreduce_ms(nbytes: float, nodes: int, per_node: int, intra: Link, inter: Link) -> float:
    """NCCL's double binary tree across ``nodes`` (a chain of ``per_node`` workers in each):
    every worker sends and receives the whole message twice (reduce up, broadcast down) at
    TREE_BANDWIDTH_SHARE of the slowest link, with 2·⌊log₂ nodes⌋ network hops and 2·(per_node − 1)
    intra-node hops of latency (ncclTopoTuneModel's tree)."""
    if nodes <= 1 or nbytes <= 0:
        return 0.0
    slowest = Link(min(intra.gbytes_per_s, inter.gbytes_per_s) * TREE_BANDWIDTH_SHARE, 0.0)
    return (2 * _transfer_ms(nbytes, slowest)
            + (2 * math.floor(math.log2(nodes)) * inter.latency_us + 2 * (per_node - 1) * intra.latency_us) / 1e3)


def allreduce_ms(nbytes: float, workers_per_node: Sequence[int], intra: Link, inter: Link,
                 hierarchical: bool = True, tree: bool = False) -> float:
    """Allreduce time for a placement (workers on each node): the flat ring, or the best of it
    and the hierarchical allreduce when ``hierarchical`` (equal workers per node), and of the
    tree across nodes when ``tree``."""
    return _placed_allreduce_ms(nbytes, _Placement.of(workers_per_node), intra, inter, hierarchical, tree)


@dataclass(frozen=True)
class _Placement:
    """What the allreduce algebra reads of a placement's workers per node."""

    workers: int
    nodes: int
    equal_per_node: int  # the workers on every node where all nodes have as many, else 0
    most_per_node: int

    @classmethod
    def of(cls, workers_per_node: Sequence[int]) -> "_Placement":
        wpn = [int(w) for w in workers_per_node]
        return cls(sum(wpn), len(wpn), wpn[0] if len(set(wpn)) == 1 else 0, max(wpn, default=0))


def _placed_allreduce_ms(nbytes: float, placed: _Placement, intra: Link, inter: Link,
                         hierarchical: bool, tree: bool) -> float:
    p, n = placed.workers, placed.nodes
    if p <= 1:
        return 0.0
    if n == 1:
        return ring_allreduce_ms(nbytes, p, intra)
    best = flat_ring_allreduce_ms(nbytes, n, p, intra, inter)
    if hierarchical and placed.equal_per_node:
        best = min(best, hierarchical_allreduce_ms(nbytes, n, placed.equal_per_node, intra, inter))
    if tree:
        best = min(best, tree_allreduce_ms(nbytes, n, placed.most_per_node, intra, inter))
    return best


def bucket_layout(grad_bytes: float, cap_bytes: float = DEFAULT_BUCKET_CAP_BYTES,
                  first_bytes: float = DEFAULT_FIRST_BUCKET_BYTES) -> list[float]:
    """DDP-like bucket sizes in ready order, for a profile that does not record its buckets.

    A small first bucket (the last layers), buckets of ``cap_bytes``, and a last bucket (the
    first layers, ready only when backward ends, so its allreduce is never hidden) of
    ``cap_bytes / 2``, or what is left when less. DDP's last bucket holds whatever the full
    buckets leave, and its first one overshoots its cap by the size of the parameter that
    crosses it, so without the parameters' sizes the last bucket could be anything from nothing
    to ``cap_bytes``: half of it is that range's expectation. (Taking the remainder of
    ``grad_bytes`` after the full buckets, as DDP would with a first bucket of exactly
    ``first_bytes``, made the exposed tail a sawtooth in the gradient size: 39% of cifar10's
    gradient, 22% of imagenet's; docs/latency-model.md section 3.)
    """
    if grad_bytes <= 0:
        return []
    sizes = [min(first_bytes, grad_bytes)]
    left = grad_bytes - sizes[0]
    tail = min(left, cap_bytes / 2)
    left -= tail
    while left > 0:
        sizes.append(min(cap_bytes, left))
        left -= sizes[-1]
    if tail > 0:
        sizes.append(tail)
    return sizes


@dataclass(frozen=True)
class SimResult:
    iteration_ms: float
    compute_ms: float
    allreduce_ms: float  # sum of bucket allreduce times (as if not overlapped)
    exposed_comm_ms: float  # what the overlap leaves after backward


def _advance(t: float, work: float, busy_until: float, slowdown: float) -> float:
    """Time at which ``work`` ms of (alone) compute started at ``t`` ends, when compute runs
    ``1 + slowdown`` times slower while a collective is in flight (until ``busy_until``)."""
    if slowdown <= 0 or t >= busy_until:
        return t + work
    slow_span = busy_until - t
    if work * (1 + slowdown) <= slow_span:
        return t + work * (1 + slowdown)
    return busy_until + work - slow_span / (1 + slowdown)


def simulate_iteration(compute_ms: float, bucket_bytes: Sequence[float], workers_per_node: Sequence[int],
                       intra: Link, inter: Link, backward_fraction: float = DEFAULT_BACKWARD_FRACTION,
                       ready_fractions: Sequence[float] | None = None, optimizer_ms: float = 0.0,
                       overlap_slowdown: float = 0.0, hierarchical: bool = True, tree: bool = False) -> SimResult:
    """One training step: ``compute_ms`` (forward + backward of the slowest worker), buckets
    all-reduced as they become ready during backward, then ``optimizer_ms``.

    ``ready_fractions``: when each bucket is ready, as a fraction of backward (0..1); by default
    bucket k of K is ready after (k+1)/K of backward.
    ``overlap_slowdown``: backward runs ``1 + overlap_slowdown`` times slower while an allreduce
    is in flight (the collective competes with it for the same processor: on CPU hosts its
    thread shares the host's cores; 0 = overlap is free).
    ``hierarchical``: the allreduce may take the hierarchical form (see :func:`allreduce_ms`);
    ``tree``: the tree across nodes, where faster.
    """
    fwd = compute_ms * (1.0 - backward_fraction)
    bwd = compute_ms * backward_fraction
    k = len(bucket_bytes)
    placed = _Placement.of(workers_per_node)
    if placed.workers <= 1 or k == 0:
        return SimResult(compute_ms + optimizer_ms, compute_ms, 0.0, 0.0)
    fracs = list(ready_fractions) if ready_fractions is not None else [(i + 1) / k for i in range(k)]
    t, done, end, total = fwd, 0.0, 0.0, 0.0  # t: backward's clock; done: backward's progress (0..1)
    times = {size: _placed_allreduce_ms(size, placed, intra, inter, hierarchical, tree)  # most are the cap
             for size in set(bucket_bytes)}
    slowed = overlap_slowdown > 0
    for size, frac in zip(bucket_bytes, fracs):  # the hot loop of a large search: no calls where free
        frac = 0.0 if frac < 0.0 else 1.0 if frac > 1.0 else frac
        if frac > done:
            t = _advance(t, (frac - done) * bwd, end, overlap_slowdown) if slowed else t + (frac - done) * bwd
            done = frac
        c = times[size]
        total += c
        end = (end if end > t else t) + c
    backward_end = _advance(t, (1.0 - done) * bwd, end, overlap_slowdown)
    step_end = max(backward_end, end)
    return SimResult(step_end + optimizer_ms, compute_ms, total, step_end - compute_ms)


def accumulated_step(one_pass: SimResult, passes: int, synced: int, optimizer_ms: float) -> SimResult:
    """A step of ``passes`` forward-backward passes, each ``one_pass`` (simulated without the
    optimizer), of which ``synced`` allreduce their gradients (one where the script wraps all but
    the last in ``no_sync()``, every pass where it does not); then ``optimizer_ms``."""
    synced = min(max(synced, 1), passes)
    compute = one_pass.compute_ms * passes
    exposed = one_pass.exposed_comm_ms * synced
    return SimResult(compute + exposed + optimizer_ms, compute, one_pass.allreduce_ms * synced, exposed)


def knows_hook(hook: str | None) -> bool:
    """Whether srifty knows what DDP's communication ``hook`` sends (none registered: DDP's own);
    not PowerSGD, nor a script's own."""
    return hook is None or hook in HOOK_ELEMENT_BYTES


def hook_wire_share(hook: str | None, grad_element_bytes: float) -> float | None:
    """The share of the gradients' bytes that DDP's communication ``hook`` allreduces (1 where the
    script registers none), for gradients of ``grad_element_bytes`` per element; None for a hook
    srifty does not know (:func:`knows_hook`)."""
    if hook is None:
        return 1.0
    if not knows_hook(hook):
        return None
    sent = HOOK_ELEMENT_BYTES[hook]
    return 1.0 if sent is None or grad_element_bytes <= 0 else min(1.0, sent / grad_element_bytes)


def with_parameter_gather(step: SimResult, param_bytes: float, workers_per_node: Sequence[int], intra: Link,
                          inter: Link, hierarchical: bool = True) -> SimResult:
    """``step`` followed by the parameter all-gather of a sharded optimizer (every worker
    receiving the others' shards of ``param_bytes``): half an allreduce of them, exposed."""
    return _with_exposed(step, allreduce_ms(param_bytes, workers_per_node, intra, inter, hierarchical) / 2.0)


def with_sync_batchnorm(step: SimResult, channels: Sequence[int], workers_per_node: Sequence[int], intra: Link,
                        inter: Link, hierarchical: bool = True, tree: bool = False, passes: int = 1) -> SimResult:
    """``step`` with the collectives of SyncBatchNorm layers of ``channels`` features each, in each of
    ``passes`` forward-backward passes: per layer, forward gathers every worker's mean, inverse
    deviation and count (2C + 1 floats) and backward allreduces two sums of C floats (2C floats),
    each priced as an allreduce of 2C float32 values. The compute waits for them: exposed."""
    if sum(workers_per_node) < 2 or not channels:
        return step
    return _with_exposed(step, 2 * passes * sum(allreduce_ms(8.0 * c, workers_per_node, intra, inter, hierarchical,
                                                             tree) for c in channels))


def _with_exposed(step: SimResult, comm_ms: float) -> SimResult:
    """``step`` with ``comm_ms`` more of communication that nothing hides."""
    return SimResult(step.iteration_ms + comm_ms, step.compute_ms, step.allreduce_ms + comm_ms,
                     step.exposed_comm_ms + comm_ms)

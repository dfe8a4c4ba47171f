"""Latency model: simulator arithmetic, profile reading, emulated transfer, sweep fit, the learned
model against baselines on a held-out model, the predict CLI and the model file.

Fast by construction: synthetic profiles for the emulated paths, one small model fitted once per
module (a subsample of the Pollux corpus), the CLI run in-process (click's runner) except once.
"""

from __future__ import annotations

import json
import math
import re
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from srifty import simulate
from srifty.simulate import Link

from conftest import PROFILES, ROOT, run_srifty

POLLUX = ROOT / "profiles/pollux"


def test_ring_allreduce_hand_arithmetic() -> None:
    link = Link(gbytes_per_s=1.0, latency_us=100.0)
    # 4 workers, 100 MB: 2*(3/4)*0.1 s = 150 ms of transfer + 2*3 steps * 0.1 ms
    assert simulate.ring_allreduce_ms(100e6, 4, link) == pytest.approx(150.0 + 0.6)
    assert simulate.ring_allreduce_ms(100e6, 1, link) == 0.0
    intra, inter = Link(10.0, 10.0), Link(1.0, 100.0)
    # two nodes x 2: flat ring over the slowest link (of its 6 steps, 2 x 2 cross the network at
    # 0.1 ms, 2 stay in a node at 0.01 ms: NCCL's ring latency) vs hierarchical; the best is kept
    flat = 2 * 3 / 4 * 100.0 + 4 * 0.1 + 2 * 0.01
    hier = 2 * (1 / 2 * 10.0 + 0.01) + 2 * 1 / 2 * 100.0 + 2 * 0.1
    assert simulate.allreduce_ms(100e6, [2, 2], intra, inter) == pytest.approx(min(flat, hier))
    assert simulate.allreduce_ms(100e6, [4], intra, inter) == pytest.approx(2 * 3 / 4 * 10.0 + 6 * 0.01)
    # without the hierarchical form (PCIe nodes, gloo): the flat ring even where it is slower
    assert hier < flat and simulate.allreduce_ms(100e6, [2, 2], intra, inter, hierarchical=False) == pytest.approx(flat)
    # one worker per node: every step crosses the network
    assert simulate.allreduce_ms(100e6, [1, 1, 1], intra, inter) == pytest.approx(2 * 2 / 3 * 100.0 + 4 * 0.1)
    # 16 nodes x 4: 32 of the 126 steps at the network's latency, 94 inside a node
    assert simulate.allreduce_ms(1.0, [4] * 16, intra, Link(1.0, 100.0), hierarchical=False) == pytest.approx(
        2 * 63 / 64 * 1e-6 + 32 * 0.1 + 94 * 0.01)


def test_tree_allreduce_hand_arithmetic() -> None:
    intra, inter = Link(10.0, 10.0), Link(1.0, 100.0)
    # 16 nodes x 4: the whole message twice at 92% of the slowest link; 2 x log2(16) network hops
    # and 2 x 3 hops inside a node of latency
    tree = 2 * 100.0 / 0.92 + 2 * 4 * 0.1 + 2 * 3 * 0.01
    assert simulate.tree_allreduce_ms(100e6, 16, 4, intra, inter) == pytest.approx(tree)
    assert simulate.tree_allreduce_ms(100e6, 1, 4, intra, inter) == 0.0  # one node: no tree across nodes
    ring = simulate.allreduce_ms(100e6, [4] * 16, intra, inter, hierarchical=False)
    # a large message: the ring is faster, and kept; a small one: the tree's fewer hops win
    assert ring < tree and simulate.allreduce_ms(100e6, [4] * 16, intra, inter, False, tree=True) == ring
    small_ring = simulate.allreduce_ms(1e3, [4] * 16, intra, inter, hierarchical=False)
    small_tree = simulate.tree_allreduce_ms(1e3, 16, 4, intra, inter)
    assert small_tree < small_ring
    assert simulate.allreduce_ms(1e3, [4] * 16, intra, inter, False, tree=True) == pytest.approx(small_tree)


def test_a_step_prices_each_distinct_bucket_size_once(monkeypatch) -> None:
    """A 1.3 GB gradient is 52 buckets of four sizes (mostly the 25 MiB cap): the step prices
    four allreduces, not 52, and adds up the same total as pricing every bucket."""
    intra, inter = Link(1.0, 10.0), Link(3.0, 30.0)
    buckets = simulate.bucket_layout(1.3e9)
    real, asked = simulate._placed_allreduce_ms, []
    monkeypatch.setattr(simulate, "_placed_allreduce_ms", lambda size, *a, **k: asked.append(size) or real(size, *a, **k))
    step = simulate.simulate_iteration(400.0, buckets, [8, 8], intra, inter)
    assert sorted(asked) == sorted(set(buckets)) and len(buckets) > 10 * len(asked)
    monkeypatch.undo()
    assert step.allreduce_ms == pytest.approx(sum(simulate.allreduce_ms(b, [8, 8], intra, inter) for b in buckets),
                                              rel=1e-12)
    # where the allreduce does not slow backward the loop takes no call per bucket: the same step
    # as the general one's at a vanishing slowdown, ready times given or uniform
    ready = [min(1.0, 0.02 * i ** 1.3) for i in range(len(buckets))]
    for fracs in (None, ready):
        free = simulate.simulate_iteration(400.0, buckets, [8, 8], intra, inter, ready_fractions=fracs)
        general = simulate.simulate_iteration(400.0, buckets, [8, 8], intra, inter, ready_fractions=fracs,
                                              overlap_slowdown=1e-12)
        assert free.iteration_ms == pytest.approx(general.iteration_ms, rel=1e-9) and free.exposed_comm_ms > 0


def test_the_interval_reaches_the_tree_allreduce_across_nodes(monkeypatch, emu_catalog: Any) -> None:
    """NCCL may run an allreduce on many nodes as a tree where that is faster, which the ring
    overprices: the step's lower bound is the simulated step with the faster of the two; one
    node keeps its own."""
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder, JobProfile, Run

    cat = Catalog.default()

    def low(param_count: int, config: str, tree: bool) -> tuple[float, float]:
        if not tree:
            monkeypatch.setattr(simulate, "tree_allreduce_ms", lambda *a, **k: float("inf"))
        job = JobProfile("m", [Run("g4dn.12xlarge", (1,), 256, 20.0)], param_count=param_count)
        est = FeatureBuilder(job, cat).estimate(parse_config(config).resolved(cat), 256)
        monkeypatch.undo()
        return est.step_bounds[0], est.sim_ms

    with_tree, ring_only = low(1_600_000, "16xg4dn.12xlarge", True)[0], low(1_600_000, "16xg4dn.12xlarge", False)[0]
    job = JobProfile("m", [Run("g4dn.12xlarge", (1,), 256, 20.0)], param_count=1_600_000)
    fb = FeatureBuilder(job, cat)
    hw = fb.hardware("g4dn.12xlarge")
    c, _, _ = fb.compute_ms("g4dn.12xlarge", 256)
    args = (c, simulate.bucket_layout(1_600_000 * 4), [4] * 16, fb.node_intra("g4dn.12xlarge"), hw.inter)
    ratio = (simulate.simulate_iteration(*args, hierarchical=False, tree=True).iteration_ms
             / simulate.simulate_iteration(*args, hierarchical=False).iteration_ms)
    assert ratio < 0.95 and with_tree == pytest.approx(ring_only * ratio, rel=1e-6)
    # one node has no tree across nodes
    assert low(1_600_000, "1xg4dn.12xlarge", True)[0] == pytest.approx(low(1_600_000, "1xg4dn.12xlarge", False)[0])
    # emulated hosts run gloo's ring: no tree
    emu = JobProfile("m", [Run("emu.small", (1,), 32, 50.0)], param_count=1_600_000)
    config = parse_config("4xemu.small").resolved(emu_catalog)
    bounds = FeatureBuilder(emu, emu_catalog).estimate(config, 32).step_bounds
    monkeypatch.setattr(simulate, "tree_allreduce_ms", lambda *a, **k: 0.0)
    assert FeatureBuilder(emu, emu_catalog).estimate(config, 32).step_bounds == bounds


def test_only_nvlink_nodes_get_the_hierarchical_allreduce() -> None:
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder, JobProfile, Run, hardware_of

    cat = Catalog.default()
    for instance_type, hierarchical in (("g4dn.12xlarge", False), ("p3.16xlarge", True)):
        hw = hardware_of(cat, instance_type)
        assert hw.hierarchical_allreduce is hierarchical
        job = JobProfile("m", [Run(instance_type, (1,), 32, 100.0)], param_count=25_000_000)
        fb = FeatureBuilder(job, cat)
        est = fb.estimate(parse_config(f"2x{instance_type}:4").resolved(cat), 32)
        c, _, _ = fb.compute_ms(instance_type, 32)
        buckets = simulate.bucket_layout(25_000_000 * 4)
        args = (c, buckets, [4, 4], fb.hardware(instance_type).intra, fb.hardware(instance_type).inter)
        ring, best = (simulate.simulate_iteration(*args, hierarchical=h).iteration_ms for h in (False, True))
        assert best < ring  # on both, the hierarchical form would be faster: the choice matters
        assert est.sim_ms == pytest.approx(best if hierarchical else ring)


def test_a_compressing_communication_hook_allreduces_its_share_of_the_gradients() -> None:
    """DDP's fp16/bf16 compression hooks (Python or builtin) send two bytes per gradient element:
    half of float32 gradients, all of float16 ones; a hook srifty does not know keeps the
    gradients as they are, and a step across nodes says so."""
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder, JobProfile, Run

    cat = Catalog.default()
    config = parse_config("2xg4dn.12xlarge").resolved(cat)
    fp16 = "torch.distributed.algorithms.ddp_comm_hooks.default_hooks.fp16_compress_hook"

    def built(hook: str | None, grad_bytes: int = 100_000_000) -> Any:
        job = JobProfile("m", [Run("g4dn.12xlarge", (1,), 256, 80.0)], param_count=25_000_000, grad_bytes=grad_bytes,
                         comm_hook=hook)
        return FeatureBuilder(job, cat)

    plain = built(None).buckets()[0]
    assert sum(plain) == pytest.approx(100_000_000)
    for hook in (fp16, "builtin:FP16_COMPRESS"):
        assert built(hook).buckets()[0] == pytest.approx([b / 2 for b in plain])
    assert built(fp16, grad_bytes=50_000_000).buckets()[0] == pytest.approx(built(None, 50_000_000).buckets()[0])
    ests = {hook: built(hook).estimate(config, 256) for hook in (None, fp16, "my.own_hook")}
    assert ests[fp16].sim_ms < ests[None].sim_ms == ests["my.own_hook"].sim_ms
    assert any("my.own_hook, which srifty does not know" in n for n in ests["my.own_hook"].notes)
    assert not any("does not know" in n for n in ests[fp16].notes)


def test_powersgd_buckets_allreduce_their_recorded_messages_in_turn() -> None:
    """Where the profile recorded what PowerSGD sends for each bucket (the uncompressed gradients,
    the P and Q factors), a step across nodes allreduces those messages one after another, each
    ready with its bucket, instead of the bucket; the note gives the bytes a step sends."""
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder, JobProfile, Run
    from srifty.features.job import PowerSgd

    cat = Catalog.default()
    config = parse_config("4xg4dn.12xlarge").resolved(cat)
    buckets, ready = [1e6, 25e6, 25e6, 49e6], [0.1, 0.4, 0.7, 1.0]
    sent = [(4e3, 2e4, 3e4), (0.0, 1e5, 1.5e5), (8e3, 1e5, 1e5), (5e4, 2e5, 2e5)]
    base = JobProfile("m", [Run("g4dn.12xlarge", (1,), 64, 80.0)], grad_bytes=100_000_000, backward_fraction=0.6,
                      bucket_bytes=buckets, ready_fractions=ready, ready_device="cuda",
                      comm_hook="torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.powerSGD_hook")
    psgd = replace(base, bucket_messages=sent, powersgd=PowerSgd(1, 1000))
    fb, plain_fb = FeatureBuilder(psgd, cat), FeatureBuilder(base, cat)
    layout = fb.workers(config, 64)
    messages = [m for b in sent for m in b if m > 0]
    at = [f for b, f in zip(sent, ready) for m in b if m > 0]
    expected = simulate.simulate_iteration(layout.compute_ms, messages, layout.workers_per_node, layout.intra,
                                           layout.inter, 0.6, at, optimizer_ms=layout.step_alone_ms - layout.compute_ms,
                                           hierarchical=False)
    got = fb.simulated(config, layout, layout.inter)
    assert got.iteration_ms == pytest.approx(expected.iteration_ms)
    assert got.allreduce_ms < plain_fb.simulated(config, layout, layout.inter).allreduce_ms / 5
    est = fb.estimate(config, 64)
    assert any("allreduces 0.962 MB of its 100 MB" in n for n in est.notes)
    assert not any("does not know" in n for n in est.notes)
    assert any("does not know" in n for n in plain_fb.estimate(config, 64).notes)
    # under DDP's fp16 wrapper PowerSGD compresses half-precision gradients: half the bytes
    wrapped = replace(psgd, comm_hook="torch.distributed.algorithms.ddp_comm_hooks.default_hooks."
                                      "fp16_compress_wrapper.<locals>.fp16_compress_wrapper_hook")
    wrapped_fb = FeatureBuilder(wrapped, cat)
    wrapped_fb.buckets()
    assert wrapped_fb.messages(buckets, ready)[0] == pytest.approx([m / 2 for m in messages])


def test_several_ddp_models_allreduce_what_a_step_handed_the_hooks() -> None:
    """A script with several DDP models (a GAN) is simulated with the bytes a step handed DDP's
    communication hooks, a critic's gradients twice, not its models' gradients once; where no
    hook was seen, with the gradients."""
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder, JobProfile, Run

    cat = Catalog.default()

    def buckets(**kw: Any) -> list[float]:
        job = JobProfile("m", [Run("g4dn.12xlarge", (1,), 64, 30.0)], param_count=10_000_000, **kw)
        return FeatureBuilder(job, cat).buckets()[0]

    assert sum(buckets(ddp_models=2, allreduced_bytes=60_000_000)) == pytest.approx(60_000_000)
    assert sum(buckets(ddp_models=2)) == sum(buckets()) == pytest.approx(40_000_000)
    assert sum(buckets(allreduced_bytes=60_000_000)) == pytest.approx(40_000_000)  # one model: its buckets
    # a GAN's step allreduces in two backwards (each network's step): each takes half the compute
    # and half the bytes, one after the other, as two synced passes of an accumulating step do
    config = parse_config("4xg4dn.12xlarge").resolved(cat)
    gan = JobProfile("m", [Run("g4dn.12xlarge", (1,), 64, 30.0)], param_count=10_000_000, ddp_models=2,
                     allreduced_bytes=60_000_000, synced_passes=2)
    passes = JobProfile("m", [Run("g4dn.12xlarge", (1,), 64, 30.0)], grad_bytes=30_000_000, accumulation=2,
                        synced_passes=2)
    one = JobProfile("m", [Run("g4dn.12xlarge", (1,), 64, 30.0)], grad_bytes=60_000_000)
    sims = [FeatureBuilder(j, cat).estimate(config, 64).sim_ms for j in (gan, passes, one)]
    assert sims[0] == pytest.approx(sims[1]) and sims[0] > sims[2]


def test_a_sharded_optimizer_gathers_the_parameters_after_the_allreduce() -> None:
    """ZeRO stage 1 (ZeroRedundancyOptimizer): after the gradients' allreduce each worker sends its
    updated shard of the parameters to the others, half an allreduce of them, hidden by nothing;
    its optimizer steps only that shard."""
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder, JobProfile, Run

    cat = Catalog.default()
    config = parse_config("4xg4dn.12xlarge").resolved(cat)
    sims = {}
    for sharded in (None, "ZeroRedundancyOptimizer"):
        job = JobProfile("m", [Run("g4dn.12xlarge", (1,), 64, 30.0)], param_count=25_000_000,
                         sharded_optimizer=sharded)
        fb = FeatureBuilder(job, cat)
        layout = fb.workers(config, 64)
        sims[sharded] = fb.simulated(config, layout, layout.inter)
    plain, zero = sims[None], sims["ZeroRedundancyOptimizer"]
    gather = simulate.allreduce_ms(100_000_000, [4] * 4, layout.intra, layout.inter, hierarchical=False) / 2
    assert gather > 0 and zero.iteration_ms == pytest.approx(plain.iteration_ms + gather)
    assert any(f"adds {gather:.3g} ms" in n for n in fb.estimate(config, 64).notes)
    assert zero.exposed_comm_ms == pytest.approx(plain.exposed_comm_ms + gather)
    # where a one-worker profile timed the optimizer apart (8 of the 10 ms after backward), each of
    # the 16 workers steps 1/16 of the parameters
    timed = JobProfile("m", [Run("g4dn.12xlarge", (1,), 64, 30.0, post_ms=10.0)], param_count=25_000_000,
                       optimizer_share=0.8)
    steps = []
    for s in (None, "ZeroRedundancyOptimizer"):
        fb = FeatureBuilder(replace(timed, sharded_optimizer=s), cat)
        layout = fb.workers(config, 64)
        steps.append(fb.simulated(config, layout, layout.inter))
    assert layout.step_alone_ms - layout.compute_ms == pytest.approx(10.0)
    assert steps[1].iteration_ms == pytest.approx(steps[0].iteration_ms + gather - 8.0 * 15 / 16)
    one = parse_config("1xg4dn.xlarge").resolved(cat)  # one worker: nothing to gather
    job = JobProfile("m", [Run("g4dn.12xlarge", (1,), 64, 30.0)], param_count=25_000_000,
                     sharded_optimizer="ZeroRedundancyOptimizer")
    assert FeatureBuilder(job, cat).estimate(one, 64).sim_ms == pytest.approx(
        FeatureBuilder(replace(job, sharded_optimizer=None), cat).estimate(one, 64).sim_ms)


def test_sync_batchnorm_layers_add_their_statistics_collectives_to_a_step() -> None:
    """Each SyncBatchNorm layer of C features gathers its statistics in forward and allreduces
    their gradients in backward (each priced as an allreduce of 2C float32 values, the faster of
    NCCL's ring and tree), in every pass, exposed; one worker alone synchronises nothing. The
    interval reaches from none of that time to the ring's."""
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder, JobProfile, Run

    cat = Catalog.default()
    runs = [Run("g4dn.12xlarge", (1,), 64, 30.0)]
    for config, passes in (("4xg4dn.12xlarge", 1), ("4xg4dn.12xlarge", 2), ("1xg4dn.xlarge", 1)):
        resolved = parse_config(config).resolved(cat)
        plain, synced = (FeatureBuilder(JobProfile("m", runs, param_count=25_000_000, accumulation=passes,
                                                   sync_batchnorm=layers), cat) for layers in ((), (64, 256, 256)))
        layout = plain.workers(resolved, 64)
        base, with_bn = (fb.simulated(resolved, layout, layout.inter) for fb in (plain, synced))
        def sync_ms(tree: bool) -> float:
            return 2 * passes * sum(simulate.allreduce_ms(8.0 * c, layout.workers_per_node, layout.intra,
                                                          layout.inter, hierarchical=False, tree=tree)
                                    for c in (64, 256, 256))

        assert with_bn.iteration_ms - base.iteration_ms == pytest.approx(sync_ms(tree=True))
        if config == "1xg4dn.xlarge":
            assert sync_ms(tree=False) == 0
            continue
        assert 0 < sync_ms(tree=True) < sync_ms(tree=False)  # four nodes: the tree's fewer network hops
        est, plain_est = synced.estimate(resolved, 64), plain.estimate(resolved, 64)
        assert est.sim_ms == pytest.approx(with_bn.iteration_ms)
        # the bounds, in ms: as low as without the collectives, as high as with the ring's
        low, high = (bound * with_bn.iteration_ms for bound in est.step_bounds)
        assert low <= plain_est.step_bounds[0] * base.iteration_ms * 1.001
        assert high >= (base.iteration_ms + sync_ms(tree=False)) * 0.999
        assert any("3 SyncBatchNorm layer(s)" in n for n in est.notes)
    # CPU hosts run SyncBatchNorm as plain batch norm (under srifty; PyTorch's raises there): nothing added
    cpus = parse_config("2xc5.2xlarge").resolved(cat)
    cpu_runs = [Run("c5.2xlarge", (1,), 64, 30.0)]
    plain, synced = (FeatureBuilder(JobProfile("m", cpu_runs, param_count=25_000_000, sync_batchnorm=layers), cat)
                     for layers in ((), (64, 256, 256)))
    assert synced.estimate(cpus, 64).sim_ms == plain.estimate(cpus, 64).sim_ms


def test_overlap_simulation() -> None:
    link = Link(1.0, 0.0)
    # 2 buckets of 10 MB over 2 workers on 1 GB/s: 10 ms each. compute 100 ms, backward 60 ms.
    r = simulate.simulate_iteration(100.0, [10e6, 10e6], [1, 1], link, link, backward_fraction=0.6)
    # bucket 1 ready at 40+30=70 -> ends 80; bucket 2 ready at 100 -> ends 110
    assert r.iteration_ms == pytest.approx(110.0) and r.allreduce_ms == pytest.approx(20.0)
    assert r.exposed_comm_ms == pytest.approx(10.0)
    # the optimizer runs after the last allreduce
    r2 = simulate.simulate_iteration(100.0, [10e6, 10e6], [1, 1], link, link, 0.6, optimizer_ms=7.0)
    assert r2.iteration_ms == pytest.approx(r.iteration_ms + 7.0)
    assert simulate.simulate_iteration(100.0, [10e6], [1], link, link).iteration_ms == 100.0
    # four such passes a step: three under no_sync (compute alone), the last allreducing; or all four
    last_only, every = (simulate.accumulated_step(r, 4, synced, optimizer_ms=7.0) for synced in (1, 4))
    assert (last_only.iteration_ms, last_only.compute_ms, last_only.exposed_comm_ms) == pytest.approx((417.0, 400.0, 10.0))
    assert (every.iteration_ms, every.allreduce_ms) == pytest.approx((447.0, 80.0))
    assert sum(simulate.bucket_layout(60 * 2**20)) == pytest.approx(60 * 2**20)


def test_backward_slows_while_an_allreduce_is_in_flight() -> None:
    link = Link(1.0, 0.0)
    # forward 40, backward 60; one 20 MB bucket ready halfway through backward (t = 70), 20 ms on
    # the wire (70..90). Backward runs 2x slower meanwhile: 10 ms of its work in those 20 ms,
    # the other 20 ms after 90 -> 110 (free overlap: 100).
    r = simulate.simulate_iteration(100.0, [20e6], [1, 1], link, link, 0.6, [0.5], overlap_slowdown=1.0)
    assert r.iteration_ms == pytest.approx(110.0)
    assert simulate.simulate_iteration(100.0, [20e6], [1, 1], link, link, 0.6, [0.5]).iteration_ms == pytest.approx(100.0)
    # a 50 ms allreduce (70..120): 25 ms of backward's 30 ms of work get done in it, the last 5 after
    long = simulate.simulate_iteration(100.0, [50e6], [1, 1], link, link, 0.6, [0.5], overlap_slowdown=1.0)
    assert long.iteration_ms == pytest.approx(125.0)


# --------------------------------------------------------------------------- emulated profiles

TYPES = {"emu.small": (0.25, 200.0), "emu.medium": (0.5, 200.0), "emu.cpu": (0.75, 50.0)}
BUCKETS = [(0, 2_000_000, 30.0), (1, 3_000_000, 200.0)]  # index, bytes, ready_ms from the start of backward


def _doc(hosts: list[str], fwd: float, bwd: float, post: float, it: float, exposed: float = 0.0,
         cpu_factor: dict[str, float] | None = None) -> dict[str, Any]:
    stat = lambda v: {"median": v}  # noqa: E731
    config = "+".join(f"1x{h}" for h in hosts)
    return {
        "kind": "training", "status": "complete",
        "job": {"model": "synthetic", "local_batch_size": 8, "grad_bytes": sum(b for _, b, _ in BUCKETS),
                "buckets": [{"index": i, "bytes": b} for i, b, _ in BUCKETS]},
        "cluster": {"launcher": "emulated", "world_size": len(hosts), "nodes": len(hosts),
                    "workers_per_node": [1] * len(hosts), "instance_types": sorted(set(hosts)), "config": config,
                    "hosts": [{"instance_type": h, "spec": {"cpu_share": TYPES[h][0], "bandwidth_mbit": TYPES[h][1],
                                                            "cpu_factor": (cpu_factor or {}).get(h)}}
                              for h in hosts]},
        "summary": {"iteration_ms": stat(it), "forward_ms": stat(fwd), "backward_compute_ms": stat(bwd),
                    "exposed_comm_ms": stat(exposed), "optimizer_ms": stat(post), "other_ms": stat(0.0),
                    "buckets": [{"index": i, "bytes": b, "ready_ms": r * bwd / 200.0} for i, b, r in BUCKETS]},
    }


def _job(docs: list[dict[str, Any]]) -> Any:
    from srifty.features import job_from_profiles
    from srifty.profile import Profile

    return job_from_profiles([Profile(doc=d) for d in docs])


@pytest.fixture(scope="module")
def emu_catalog() -> Any:
    from srifty.catalog import Catalog

    return Catalog.from_emulated_spec(ROOT / "configs/emulated.yaml")


def test_profile_reading_of_the_optimizer_s_share_and_powersgd_s_messages(emu_catalog: Any) -> None:
    """The optimizer's share of the time after backward in the profile with the fewest workers,
    and those workers (what a sharded optimizer divides among the workers); PowerSGD's settings
    and each bucket's messages, read in the buckets' ready order."""
    one = _doc(["emu.small"], 100.0, 200.0, 15.0, it=320.0)
    one["summary"]["other_ms"] = {"median": 5.0}
    two = _doc(["emu.small", "emu.small"], 100.0, 200.0, 10.0, it=320.0)
    job = _job([two, one])
    assert (job.optimizer_share, job.optimizer_world) == (pytest.approx(0.75), 1)
    assert (_job([two]).optimizer_share, _job([two]).optimizer_world) == (1.0, 2)
    # a type profiled on two workers alone: its optimizer's 10 ms still follow the allreduce
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder

    layout = FeatureBuilder(_job([two]), emu_catalog).workers(parse_config("4xemu.small").resolved(emu_catalog), 8)
    assert layout.step_alone_ms - layout.compute_ms == pytest.approx(10.0)
    sent = {0: [100, 2_000, 3_000], 1: [0, 4_000, 5_000]}
    for b in one["job"]["buckets"]:
        b["sent"] = sent[b["index"]]
    one["job"]["powersgd"] = {"rank": 2, "min_compression_rate": 2.0, "start_iter": 100, "batched": False}
    job = _job([one])
    assert job.powersgd.rank == 2 and job.powersgd.start_iter == 100
    assert job.bucket_messages == [tuple(map(float, sent[i])) for i, _, _ in BUCKETS]
    assert job.runs[0].sync_ms == 0.0 and not job.powersgd.profiled  # the default: not said to have compressed
    # measured steps that ran the compression: the time backward waited is the hook's own compute
    exposed = _doc(["emu.small"], 100.0, 200.0, 15.0, it=340.0, exposed=20.0)
    exposed["job"]["powersgd"] = one["job"]["powersgd"] | {"profiled": True}
    ran = _job([exposed])
    assert ran.powersgd.profiled and ran.runs[0].sync_ms == 0.0
    assert ran.compute_curve("emu.small").at(8) == pytest.approx(340.0 - 15.0)
    exposed["job"]["powersgd"]["profiled"] = False
    assert _job([exposed]).runs[0].sync_ms == 20.0
    del one["job"]["buckets"][1]["sent"]  # a bucket without its messages: none are read
    assert _job([one]).bucket_messages is None


def test_profile_reading_and_mixed_config(emu_catalog: Any) -> None:
    from srifty.configspec import parse_config
    from srifty.features import TBF_GOODPUT, FeatureBuilder, LinkScale, run_config

    small, medium = (100.0, 200.0, 10.0), (50.0, 100.0, 5.0)  # forward, backward, optimizer
    job = _job([_doc(["emu.small"], *small, it=sum(small)), _doc(["emu.medium"], *medium, it=sum(medium)),
                _doc(["emu.medium", "emu.small"], 100.0, 200.0, 10.0, it=500.0, exposed=190.0)])
    # ready_ms counts from the start of backward: fractions of backward, not shifted by forward
    assert job.ready_fractions == pytest.approx([r / 200.0 for _, _, r in BUCKETS])
    assert job.backward_fraction == pytest.approx(200.0 / 300.0)  # from a single-host profile
    mixed = next(r for r in job.runs if r.world_size == 2)
    assert mixed.mixed and run_config(mixed).format() == "1xemu.medium:1+1xemu.small:1"
    assert job.instance_types == ["emu.medium", "emu.small"]  # a mixed run profiles neither type
    assert job.measured("emu.medium", [1, 1], 8) is None  # ...and is never reported as a homogeneous one
    # ...but is the measured figure of its own configuration, written in any host order
    for text in ("1xemu.medium+1xemu.small", "1xemu.small+1xemu.medium"):
        assert job.measured_run(parse_config(text).resolved(emu_catalog), 8).step_ms == 500.0
    assert job.measured_run(parse_config("1xemu.medium+2xemu.small").resolved(emu_catalog), 8) is None

    fb = FeatureBuilder(job, emu_catalog, LinkScale())
    est = fb.estimate(parse_config("1xemu.medium+1xemu.small").resolved(emu_catalog), 8)
    # the slowest worker (small: measured, not transferred) sets the pace; the ring runs at the
    # 200 Mbit/s bottleneck times the tbf goodput; the optimizer follows the last allreduce
    link = Link(200 / 8000.0 * TBF_GOODPUT, LinkScale().emulated_latency_us)
    buckets, fracs = [b for _, b, _ in BUCKETS], [r / 200.0 for _, _, r in BUCKETS]
    want = simulate.simulate_iteration(300.0, buckets, [1, 1], link, link, 200.0 / 300.0, fracs, optimizer_ms=10.0,
                                       hierarchical=False)
    assert not est.transferred
    assert est.sim_ms == pytest.approx(want.iteration_ms)
    # one worker per host: every step of the ring is a network step (NCCL's count), so a link
    # latency below the host's intra-host latency (10 µs) is what each step pays
    fast = LinkScale(emulated_latency_us=1.0)
    mixed_config = parse_config("1xemu.medium+1xemu.small").resolved(emu_catalog)
    est = FeatureBuilder(job, emu_catalog, fast).estimate(mixed_config, 8)
    link = Link(200 / 8000.0 * TBF_GOODPUT, 1.0)
    want = simulate.simulate_iteration(300.0, buckets, [1, 1], link, link, 200.0 / 300.0, fracs, optimizer_ms=10.0,
                                       hierarchical=False)
    with_intra_hop = simulate.simulate_iteration(300.0, buckets, [1, 1], Link(2.0, 10.0), link, 200.0 / 300.0,
                                                 fracs, optimizer_ms=10.0, hierarchical=False)
    assert with_intra_hop.iteration_ms == pytest.approx(want.iteration_ms, rel=1e-12)  # the 10 µs is never paid
    assert with_intra_hop.allreduce_ms < simulate.simulate_iteration(
        300.0, buckets, [1, 1], link, Link(link.gbytes_per_s, 10.0), 200.0 / 300.0, fracs,
        hierarchical=False).allreduce_ms  # where the network's own latency is 10 µs, it is
    assert est.sim_ms == pytest.approx(want.iteration_ms, rel=1e-9)
    assert est.compute_ms == pytest.approx(sum(small))


def test_an_accumulating_job_allreduces_in_the_passes_it_synced(emu_catalog: Any) -> None:
    """Four forward-backward passes a step: the buckets' ready times (from the start of the last
    backward) are shares of one pass's backward, and a step across workers is four passes, each
    allreducing its gradients where the profile saw it do so, not one long backward hiding one."""
    from srifty.configspec import parse_config
    from srifty.features import TBF_GOODPUT, FeatureBuilder, LinkScale

    link = Link(200 / 8000.0 * TBF_GOODPUT, LinkScale().emulated_latency_us)
    buckets, fracs = [b for _, b, _ in BUCKETS], [r / 200.0 for _, _, r in BUCKETS]
    config = parse_config("2xemu.small").resolved(emu_catalog)
    one_pass = simulate.simulate_iteration(300.0 / 4, buckets, [1, 1], link, link, 200.0 / 300.0, fracs,
                                           hierarchical=False)
    assert one_pass.exposed_comm_ms > 0
    steps = {}
    for synced in (1, 4):
        doc = _doc(["emu.small"], 100.0, 200.0, 10.0, it=310.0)
        doc["job"].update(accumulation=4, synced_passes=synced)
        for b in doc["summary"]["buckets"]:
            b["ready_ms"] /= 4  # in the last of four backwards of 50 ms each
        job = _job([doc])
        assert (job.accumulation, job.synced_passes) == (4, synced)
        assert job.ready_fractions == pytest.approx(fracs)
        est = FeatureBuilder(job, emu_catalog, LinkScale()).estimate(config, 8)
        want = simulate.accumulated_step(one_pass, 4, synced, optimizer_ms=10.0)
        assert est.sim_ms == pytest.approx(want.iteration_ms, rel=1e-9)
        steps[synced] = est.sim_ms
    assert steps[1] == pytest.approx(300.0 + one_pass.exposed_comm_ms + 10.0)
    assert steps[4] - steps[1] == pytest.approx(3 * one_pass.exposed_comm_ms)


def test_unprofiled_type_transfers_by_measured_cpu_factor(emu_catalog: Any) -> None:
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder

    factors = {"emu.small": 4.0, "emu.cpu": 1.2}
    job = _job([_doc(["emu.small"], 100.0, 200.0, 0.0, it=300.0, cpu_factor=factors)])
    assert job.cpu_factors == {"emu.small": factors["emu.small"]}  # read from the profile's host spec
    job.cpu_factors["emu.cpu"] = factors["emu.cpu"]  # as load_corpus shares the corpus' measured factors
    fb = FeatureBuilder(job, emu_catalog)
    c, transferred, note = fb.compute_ms("emu.cpu", 8)
    assert transferred and "CPU factor" in (note or "")
    assert c == pytest.approx(300.0 * factors["emu.cpu"] / factors["emu.small"])
    # without measured factors: the CPU share ratio
    job2 = _job([_doc(["emu.small"], 100.0, 200.0, 0.0, it=300.0)])
    c2, _, _ = FeatureBuilder(job2, emu_catalog).compute_ms("emu.cpu", 8)
    assert c2 == pytest.approx(300.0 * TYPES["emu.small"][0] / TYPES["emu.cpu"][0])
    est = FeatureBuilder(job2, emu_catalog).estimate(parse_config("2xemu.cpu").resolved(emu_catalog), 8)
    assert est.transferred


def test_sweep_fit_recovers_goodput_and_latency() -> None:
    from srifty.features import TBF_GOODPUT, CollectivePoint
    from srifty.comm import MIN_SWEEP_BYTES, fit_emulated_links

    g, alpha_ms = 0.9, 0.4
    pts = []
    for world in (2, 4):
        for mbit in (50.0, 200.0):
            for nbytes in (2**k for k in range(12, 25)):
                t = 2 * (world - 1) / world * nbytes * 8 / (g * mbit * 1e6) * 1e3 + 2 * (world - 1) * alpha_ms
                pts.append(CollectivePoint("x", float(nbytes), world, mbit, t))
    goodput, lat_us, n = fit_emulated_links(pts)
    assert goodput == pytest.approx(g, rel=1e-6) and lat_us == pytest.approx(alpha_ms * 1e3, rel=1e-6)
    assert n == sum(p.nbytes >= MIN_SWEEP_BYTES for p in pts)
    assert fit_emulated_links([])[0] == TBF_GOODPUT  # no sweeps: the framing prior


def test_mixed_rate_rings_get_their_own_goodput_factor(emu_catalog: Any) -> None:
    from srifty.configspec import parse_config
    from srifty.features import CollectivePoint, FeatureBuilder, LinkScale, mixed_ring_slowest_hosts
    from srifty.comm import fit_emulated_goodput_by_rate, fit_emulated_links, fit_emulated_mixed_ring

    assert [mixed_ring_slowest_hosts(r) for r in ([50, 50], [50, 200], [50, 50, 200], [200, 50, 50, 800])] == [0, 1, 2, 2]

    def sweep(config: str, mbit: float, g: float, world: int, slowest: int) -> list[CollectivePoint]:
        return [CollectivePoint(config, float(b), world, mbit, 2 * (world - 1) / world * b * 8 / (g * mbit * 1e6) * 1e3,
                                slowest) for b in (2**k for k in range(18, 25))]

    alone = sweep("2xa", 100.0, 0.9, 2, 0) + sweep("2xb", 100.0, 0.9, 3, 0)
    mixed = (sweep("2xa+1xc", 100.0, 0.72, 3, 2) + sweep("3xa+1xc", 100.0, 0.765, 4, 3)
             + sweep("2xa+1xd", 100.0, 0.81, 3, 2) + sweep("1xa+2xc", 100.0, 0.9 * 0.97, 3, 1))
    pts = alone + mixed
    # the per-rate and pooled fits read the one-rate rings only
    assert fit_emulated_goodput_by_rate(pts, 0.0) == fit_emulated_goodput_by_rate(alone, 0.0)
    assert fit_emulated_links(pts)[0] == pytest.approx(0.9, rel=1e-6)
    scale = LinkScale(emulated_latency_us=0.0, emulated_goodput_by_mbit=((100.0, 0.9),))
    one, many = fit_emulated_mixed_ring(pts, scale)
    assert one == pytest.approx(0.97, rel=1e-6)
    assert many == pytest.approx(0.85, rel=1e-6)  # the median of 0.8, 0.85 and 0.9
    assert fit_emulated_mixed_ring(alone, scale) == (1.0, 1.0)  # no mixed sweep: no loss
    # the simulator takes it: 2 x emu.cpu + 1 x emu.small mixes 50 and 200 Mbit/s with two hosts at 50
    job = _job([_doc(["emu.small"], 100.0, 200.0, 10.0, it=310.0), _doc(["emu.cpu"], 50.0, 100.0, 5.0, it=155.0)])
    with_factor = FeatureBuilder(job, emu_catalog, LinkScale(emulated_mixed_ring=(1.0, 0.5)))
    without = FeatureBuilder(job, emu_catalog, LinkScale())
    mix, same = (parse_config(c).resolved(emu_catalog) for c in ("2xemu.cpu+1xemu.small", "2xemu.cpu"))
    slow = with_factor.estimate(mix, 8).features["log_allreduce_ms"]
    assert slow > without.estimate(mix, 8).features["log_allreduce_ms"]
    assert with_factor.estimate(same, 8).sim_ms == without.estimate(same, 8).sim_ms  # one rate: untouched


def test_sustained_goodput_is_measured_per_link_rate_interpolated_and_extrapolated(emu_catalog: Any) -> None:
    from srifty.features import TBF_GOODPUT, CollectivePoint, LinkScale, hardware_of
    from srifty.comm import BULK_SWEEP_BYTES, fit_emulated_goodput_by_rate

    alpha_ms, planted = 0.4, {50.0: 0.85, 200.0: 0.93, 800.0: 0.96}
    pts = []
    for mbit, g in planted.items():
        for world in (2, 4):
            for nbytes in (2**k for k in range(18, 25)):
                t = 2 * (world - 1) / world * nbytes * 8 / (g * mbit * 1e6) * 1e3 + 2 * (world - 1) * alpha_ms
                pts.append(CollectivePoint("x", float(nbytes), world, mbit, t))
    # one large message at 100 Mbit/s is too few for a goodput of its own
    pts.append(CollectivePoint("y", float(BULK_SWEEP_BYTES), 2, 100.0, BULK_SWEEP_BYTES * 8 / 100e6 * 1e3))
    table = fit_emulated_goodput_by_rate(pts, alpha_ms * 1e3)
    assert [r for r, _ in table] == sorted(planted)
    for mbit, g in table:
        assert g == pytest.approx(planted[mbit], rel=1e-6)
    ls = LinkScale(emulated_goodput=0.9, emulated_goodput_by_mbit=table)
    assert ls.emulated_goodput_at(200.0) == pytest.approx(0.93)
    # half-way in log(rate): the shortfalls' geometric mean
    assert ls.emulated_goodput_at(400.0) == pytest.approx(1 - (0.07 * 0.04) ** 0.5)
    # outside the measured rates: the shortfall's power law fitted over all three, from the nearest
    xs, ys = np.log([50.0, 200.0, 800.0]), np.log([0.15, 0.07, 0.04])
    slope = np.polyfit(xs, ys, 1)[0]
    assert ls.emulated_goodput_at(10.0) == pytest.approx(1 - 0.15 * (10 / 50) ** slope)
    assert ls.emulated_goodput_at(1e4) == pytest.approx(1 - 0.04 * (1e4 / 800) ** slope)
    # a shortfall exactly ∝ 1/√rate is extrapolated exactly, both ways
    sqrt_law = LinkScale(emulated_goodput_by_mbit=((100.0, 0.95), (400.0, 0.975)))
    assert sqrt_law.emulated_goodput_at(25.0) == pytest.approx(0.9)
    assert sqrt_law.emulated_goodput_at(1600.0) == pytest.approx(0.9875)
    # a shortfall growing with the rate is not extrapolated (exponent clamped at 0), and the
    # goodput never drops below 0.2 of the configured rate
    growing = LinkScale(emulated_goodput_by_mbit=((100.0, 0.95), (400.0, 0.9)))
    assert growing.emulated_goodput_at(1e4) == pytest.approx(0.9) and growing.emulated_goodput_at(1.0) == pytest.approx(0.95)
    assert LinkScale(emulated_goodput_by_mbit=((100.0, 0.9), (400.0, 0.97))).emulated_goodput_at(1e-3) == 0.2
    assert LinkScale(emulated_goodput_by_mbit=((100.0, 0.9),)).emulated_goodput_at(10.0) == 0.9  # one rate: its figure
    assert LinkScale(emulated_goodput=0.9).emulated_goodput_at(50.0) == 0.9  # no table: the pooled figure
    assert fit_emulated_goodput_by_rate([], 1.0) == ()
    cpu = hardware_of(emu_catalog, "emu.cpu")  # 50 Mbit/s
    assert ls.apply(cpu).inter.gbytes_per_s == pytest.approx(cpu.inter.gbytes_per_s * 0.85)
    assert LinkScale().apply(cpu).inter.gbytes_per_s == pytest.approx(cpu.inter.gbytes_per_s * TBF_GOODPUT)


def test_overlap_slowdown_fit_recovers_a_planted_value(emu_catalog: Any) -> None:
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder, LinkScale
    from srifty.comm import CommModel

    alone = {"emu.small": (100.0, 200.0, 10.0), "emu.medium": (50.0, 100.0, 5.0), "emu.cpu": (40.0, 80.0, 4.0)}
    singles = [_doc([t], *v, it=sum(v)) for t, v in alone.items()]
    planted = LinkScale(emulated_overlap_slowdown=0.75)
    configs = [["emu.small"] * 2, ["emu.small"] * 3, ["emu.small"] * 4, ["emu.medium"] * 2, ["emu.medium"] * 3,
               ["emu.medium", "emu.small"], ["emu.cpu"] * 2]
    truth = FeatureBuilder(_job(singles), emu_catalog, planted)
    docs = singles + [
        _doc(hosts, 100.0, 200.0, 10.0,
             it=truth.estimate(parse_config("+".join(f"1x{h}" for h in hosts)).resolved(emu_catalog), 8).sim_ms)
        for hosts in configs]
    comm = CommModel().fit([_job(docs)], emu_catalog)
    assert comm.link_scale_.emulated_overlap_slowdown == pytest.approx(0.75)
    assert comm.n_overlap_runs_ == len(configs)
    # too few multi-host runs to tell: overlap is taken as free
    assert CommModel().fit([_job(docs[:5])], emu_catalog).link_scale_.emulated_overlap_slowdown == 0.0


def test_a_faster_peer_slows_the_slowest_hosts_backward_less(emu_catalog: Any) -> None:
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder, LinkScale, busy_peers

    small, medium = (210.0, 200.0), (105.0, 100.0)  # (step alone, compute) of each group
    assert busy_peers(parse_config("3xemu.small"), [small]) == 2.0
    assert busy_peers(parse_config("1xemu.medium+1xemu.small"), [medium, small]) == pytest.approx(0.5)
    assert busy_peers(parse_config("2xemu.medium+2xemu.small"), [medium, small]) == pytest.approx(2.0)
    # the simulator slows the slowest host's overlapped backward by 1 + s x busy peers
    alone = {"emu.small": (100.0, 200.0, 10.0), "emu.medium": (50.0, 100.0, 5.0)}
    job = _job([_doc([t], *v, it=sum(v)) for t, v in alone.items()])
    fb = FeatureBuilder(job, emu_catalog, LinkScale(emulated_overlap_slowdown=1.0))
    free = FeatureBuilder(job, emu_catalog, LinkScale())

    def sim(b: Any, config: str) -> float:
        return b.estimate(parse_config(config).resolved(emu_catalog), 8).sim_ms

    mixed, same = sim(fb, "1xemu.medium+1xemu.small"), sim(fb, "2xemu.small")
    assert sim(free, "1xemu.medium+1xemu.small") == pytest.approx(sim(free, "2xemu.small"))  # same slowest host, link
    assert sim(free, "2xemu.small") < mixed < same
    link = fb.hardware("emu.small").inter
    want = simulate.simulate_iteration(300.0, [b for _, b, _ in BUCKETS], [1, 1], link, link, 200.0 / 300.0,
                                       [30.0 / 200.0, 1.0], optimizer_ms=10.0, overlap_slowdown=155.0 / 310.0)
    assert mixed == pytest.approx(want.iteration_ms)


def test_residual_regimes_are_separate() -> None:
    import pandas as pd

    from srifty.features import FEATURES
    from srifty.model import MIN_RESIDUAL_ROWS, LatencyModel

    rng = np.random.default_rng(0)
    n = 60
    X = pd.DataFrame(rng.uniform(0.5, 2.0, size=(n, len(FEATURES))), columns=FEATURES)
    X["emulated"] = 0.0
    X["sim_ms"] = 100.0
    y = np.full(n, 120.0)  # real clusters: the simulator is 20% low
    few = X.iloc[: MIN_RESIDUAL_ROWS - 1].copy()
    few["emulated"] = 1.0
    lm = LatencyModel(max_iter=30, min_samples_leaf=5).fit(pd.concat([X, few]), np.r_[y, np.full(len(few), 50.0)])
    assert lm.parts_["emulated"] is None and lm.parts_["real"].n_rows == n
    assert lm.predict(X.iloc[:3]) == pytest.approx(120.0, rel=0.02)
    # an emulated row is not corrected by what real clusters taught: the simulator, widened
    assert lm.predict(few.iloc[:1])[0] == pytest.approx(100.0)
    lo, hi = lm.predict_interval(few.iloc[:1])
    assert lo[0] < 100.0 < hi[0] and lm.out_of_range(few.iloc[:1])[0]


def test_interval_is_calibrated_on_held_out_models() -> None:
    import pandas as pd

    from srifty.features import FEATURES
    from srifty.model import LatencyModel

    # four models, told apart by one feature, with residuals that do not follow it (log of
    # 1.0, 1.5, 1.1, 1.3): within its own rows each model is exact, so the quantile models give a
    # narrow interval; a model never seen can be off by the spread between models
    n = 40
    X = pd.DataFrame(np.ones((4 * n, len(FEATURES))), columns=FEATURES)
    X["comm_to_compute"] = np.repeat([0.5, 1.0, 1.5, 2.0], n)
    X["emulated"], X["transferred"], X["sim_ms"] = 0.0, 0.0, 100.0  # profiled compute: no transfer spread
    X["world_size"] = 2.0  # multi-worker rows (one worker is the compute curve alone: no residual interval)
    y = 100.0 * np.repeat([1.0, 1.5, 1.1, 1.3], n)
    groups = np.repeat(["a", "b", "c", "d"], n)
    plain = LatencyModel(max_iter=50, min_samples_leaf=5).fit(X, y)
    calibrated = LatencyModel(max_iter=50, min_samples_leaf=5).fit(X, y, groups=groups)
    row = X.iloc[:1]
    lo_p, hi_p = plain.predict_interval(row)
    lo_c, hi_c = calibrated.predict_interval(row)
    assert hi_p[0] / lo_p[0] < 1.1  # the training rows alone: narrow
    err = calibrated.parts_["real"].held_out_error
    assert err[0] < -0.05 and err[1] > 0.3  # each model predicted from the other three misses, both ways
    center = calibrated.predict(row)[0]
    # the centre moves only by the share of the residual the held-out models supported
    shrink = calibrated.parts_["real"].shrink
    assert center == pytest.approx(100.0 * (plain.predict(row)[0] / 100.0) ** shrink)
    assert lo_c[0] == pytest.approx(min(lo_p[0], center * np.exp(err[0])))
    assert hi_c[0] == pytest.approx(max(hi_p[0], center * np.exp(err[1])))


def test_the_held_out_error_is_calibrated_per_share_of_the_step_beyond_compute() -> None:
    """Four models whose compute-bound runs the simulator gets right and whose communication-bound
    runs it misses by a different factor each: a model never seen can miss the second by the spread
    between models, the first only by the scatter of repeated measurements."""
    import pandas as pd

    from srifty.features import FEATURES
    from srifty.model import LatencyModel
    from srifty.model.residual import BIN_MIN_HALF_WIDTH, EXPOSED_SHARE_EDGES, MIN_BIN_ROWS

    n = MIN_BIN_ROWS
    X = pd.DataFrame(np.ones((8 * n, len(FEATURES))), columns=FEATURES)
    X["comm_to_compute"] = np.repeat([0.5, 1.0, 1.5, 2.0], 2 * n)  # tells the models apart
    bound = np.tile(np.repeat([0, 1], n), 4)  # compute-bound rows, then communication-bound ones
    X["exposed_to_compute"] = bound
    X["emulated"], X["transferred"], X["sim_ms"], X["world_size"] = 0.0, 0.0, 100.0, 2.0
    X["compute_ms"] = np.where(bound == 1, 40.0, 97.0)  # 3% and 60% of the step beyond compute
    y = 100.0 * np.exp(np.where(bound == 1, np.repeat([0.0, 0.4, 0.1, 0.3], 2 * n), 0.0))
    groups = np.repeat(["a", "b", "c", "d"], 2 * n)
    part = LatencyModel(max_iter=50, min_samples_leaf=5).fit(X, y, groups=groups).parts_["real"]
    compute_bin, mixed_bin, comm_bin = part.held_out_error_by_share
    assert len(part.held_out_error_by_share) == len(EXPOSED_SHARE_EDGES) + 1 and mixed_bin is None  # no rows there
    assert -0.02 < compute_bin[0] <= compute_bin[1] < 0.02  # every model's compute-bound runs: exact
    assert comm_bin[0] < -0.05 and comm_bin[1] > 0.2 and part.held_out_error == pytest.approx(
        (min(compute_bin[0], comm_bin[0]), max(compute_bin[1], comm_bin[1])))
    lm = LatencyModel(max_iter=50, min_samples_leaf=5).fit(X, y, groups=groups)
    rows = X.iloc[[0, n]]
    # each row its bin's error, no narrower than the scatter of repeated measurements
    assert lm.held_out_bounds(rows) == pytest.approx(np.array([
        [-BIN_MIN_HALF_WIDTH, BIN_MIN_HALF_WIDTH], [min(comm_bin[0], -BIN_MIN_HALF_WIDTH), comm_bin[1]]]))
    low, high = lm.predict_interval(rows)
    assert high[0] / low[0] < high[1] / low[1]
    # without a compute time the share is unknown: the pooled error
    pooled = np.tile(part.held_out_error, (2, 1))
    assert lm.held_out_bounds(rows.drop(columns="compute_ms")) == pytest.approx(pooled)
    assert lm.held_out_bounds(rows.assign(compute_ms=[0.0, np.nan])) == pytest.approx(pooled)


def test_the_residual_is_applied_as_far_as_held_out_models_support_it() -> None:
    import pandas as pd

    from srifty.features import FEATURES
    from srifty.model import LatencyModel

    n = 40
    X = pd.DataFrame(np.ones((4 * n, len(FEATURES))), columns=FEATURES)
    X["emulated"], X["sim_ms"] = 0.0, 100.0
    groups = np.repeat(["a", "b", "c", "d"], n)
    # one law for every model (log residual = 0.3 × comm_to_compute): a model never seen is
    # predicted as well as the others, so all of the residual is applied
    X["comm_to_compute"] = np.tile(np.linspace(0.0, 2.0, n), 4)
    y = 100.0 * np.exp(0.3 * X["comm_to_compute"].to_numpy())
    lm = LatencyModel(max_iter=80, min_samples_leaf=5).fit(X, y, groups=groups)
    assert lm.parts_["real"].shrink == 1.0
    assert lm.predict(X.iloc[[n - 1]])[0] == pytest.approx(100.0 * np.exp(0.6), rel=0.05)
    # each model its own bias, told apart by a feature, alternating: the others predict the wrong
    # sign for a model left out, so none of the residual is applied and the simulator stands
    Y = X.copy()
    Y["comm_to_compute"] = np.repeat([0.5, 1.0, 1.5, 2.0], n)
    y = 100.0 * np.exp(np.repeat([0.3, -0.3, 0.3, -0.3], n))
    lm = LatencyModel(max_iter=80, min_samples_leaf=5).fit(Y, y, groups=groups)
    assert lm.parts_["real"].shrink == 0.0 and lm.predict(Y.iloc[:1])[0] == pytest.approx(100.0)
    # without groups there is nothing to judge by: all of it
    assert LatencyModel(max_iter=80, min_samples_leaf=5).fit(Y, y).parts_["real"].shrink == 1.0


def test_unknown_gradient_size_spans_the_corpus_slowdowns() -> None:
    import pandas as pd

    from srifty.features import FEATURES
    from srifty.model import LatencyModel

    # multi-worker training runs 1.2x .. 3x slower than their compute alone: a row whose gradient
    # size is unknown (sim_ms = compute alone) gets an interval over at least that range
    n = 60
    X = pd.DataFrame(np.ones((n, len(FEATURES))), columns=FEATURES)
    X["emulated"], X["world_size"], X["transferred"] = 0.0, 4.0, 0.0
    X["compute_ms"] = 100.0
    X["sim_ms"] = 100.0 * np.linspace(1.1, 1.5, n)
    y = 100.0 * np.linspace(1.2, 3.0, n)
    lm = LatencyModel(max_iter=30, min_samples_leaf=5).fit(X, y)
    q = np.log([1.2, 3.0])  # the whole range the training runs showed
    assert lm.parts_["real"].multi_worker_slowdown == pytest.approx(tuple(q))
    blind = X.iloc[:1].copy()
    blind["log_grad_mb"], blind["sim_ms"] = float("nan"), 100.0
    assert LatencyModel.communication_unknown(blind)[0]
    lo, hi = lm.predict_interval(blind)
    assert lo[0] <= 100.0 * np.exp(q[0]) * (1 + 1e-9) and hi[0] >= 100.0 * np.exp(q[1]) * (1 - 1e-9)
    # a known gradient size, or a single worker, keeps the quantile models' interval
    known = blind.copy()
    known["log_grad_mb"] = 1.0
    single = blind.copy()
    single["world_size"] = 1.0
    for row in (known, single):
        assert not LatencyModel.communication_unknown(row)[0]
        lo_k, hi_k = lm.predict_interval(row)
        assert hi_k[0] < 100.0 * np.exp(q[1])
    # without a compute_ms column there is nothing to learn the slowdown from
    assert LatencyModel(max_iter=30, min_samples_leaf=5).fit(X.drop(columns="compute_ms"), y) \
        .parts_["real"].multi_worker_slowdown is None


def test_transferred_gpu_compute_widens_the_interval_by_the_measured_transfer_spread(monkeypatch) -> None:
    import pandas as pd

    from srifty.features import FEATURES
    from srifty.gpuspeed import TransferError
    from srifty.model import latency as model_mod  # predict_interval reads gpu_transfer_error there
    from srifty.model import LatencyModel

    n = 60
    X = pd.DataFrame(np.ones((n, len(FEATURES))), columns=FEATURES)
    X["emulated"], X["world_size"] = 0.0, 4.0
    X["transferred"] = np.arange(n) % 2  # both values seen in training: no extrapolation widening
    X["sim_ms"] = 100.0 * np.linspace(1.1, 1.5, n)
    y = 100.0 * np.linspace(1.2, 1.6, n)
    lm = LatencyModel(max_iter=30, min_samples_leaf=5).fit(X, y)
    rows = X.iloc[:2].copy()
    rows["transferred"] = [0.0, 1.0]
    emulated = rows.copy()
    emulated["emulated"] = 1.0
    monkeypatch.setattr(model_mod, "gpu_transfer_error", lambda: None)
    base_lo, base_hi = lm.predict_interval(rows)
    spread = TransferError(q05=-0.6, q95=0.4, transfers=10, spec_q05=-0.9, spec_q95=0.7, spec_transfers=12)
    monkeypatch.setattr(model_mod, "gpu_transfer_error", lambda: spread)
    lo, hi = lm.predict_interval(rows)
    centre = np.log(lm.predict(rows) / rows["sim_ms"].to_numpy())
    sim = rows["sim_ms"].to_numpy()
    # profiled compute: unchanged; transferred: the residual's and the transfer's spread in quadrature
    assert (lo[0], hi[0]) == pytest.approx((base_lo[0], base_hi[0]))
    below, above = centre[1] - np.log(base_lo[1] / sim[1]), np.log(base_hi[1] / sim[1]) - centre[1]
    assert np.log(lo[1] / sim[1]) == pytest.approx(centre[1] - np.hypot(below, 0.6))
    assert np.log(hi[1] / sim[1]) == pytest.approx(centre[1] + np.hypot(above, 0.4))
    # carried by the spec ratio alone (a GPU without measured factors): that ratio's spread
    by_spec = rows.assign(spec_transfer=[0.0, 1.0])
    lo, hi = lm.predict_interval(by_spec)
    assert np.log(lo[1] / sim[1]) == pytest.approx(centre[1] - np.hypot(below, 0.9))
    assert np.log(hi[1] / sim[1]) == pytest.approx(centre[1] + np.hypot(above, 0.7))
    # emulated hosts transfer by measured CPU factors, not GPU spec ratios: unchanged
    monkeypatch.setattr(model_mod, "gpu_transfer_error", lambda: None)
    emu_lo, emu_hi = lm.predict_interval(emulated)
    monkeypatch.setattr(model_mod, "gpu_transfer_error", lambda: spread)
    got_lo, got_hi = lm.predict_interval(emulated)
    assert got_lo == pytest.approx(emu_lo) and got_hi == pytest.approx(emu_hi)


# --------------------------------------------------------------------------- Pollux: learned vs baselines


def _thin(job: Any, keep_every: int) -> Any:
    """The job with its single-worker runs and every ``keep_every``-th multi-worker run (fast fixtures)."""
    multi = [r for r in job.runs if r.world_size > 1]
    kept = set(map(id, multi[::keep_every]))
    return job.restricted(lambda r: r.world_size == 1 or id(r) in kept)


def _fit_without(jobs: list[Any], held_out: str) -> tuple[Any, Any, Any, Any, Any]:
    """The job ``held_out`` of ``jobs`` and what the others fit (small fits, for tests): the
    catalog, the communication model, its training table and the latency model."""
    from srifty.catalog import Catalog
    from srifty.comm import CommModel
    from srifty.model import LatencyModel, table_for

    cat = Catalog.default()
    held = next(j for j in jobs if j.model == held_out)
    train = [j for j in jobs if j is not held]
    comm = CommModel(max_rows=150).fit(train, cat)
    tr = table_for(train, cat, comm.link_scale_)
    return held, cat, comm, tr, LatencyModel(max_iter=60).fit(tr.X, tr.y_ms, groups=tr.model)


@pytest.fixture(scope="module")
def pollux_jobs() -> list[Any]:
    from srifty.features import load_corpus

    return [_thin(j, 4) for j in load_corpus([POLLUX])]


def test_model_beats_baselines_on_held_out_model(pollux_jobs: list[Any]) -> None:
    from srifty.catalog import Catalog
    from srifty.validate import METHODS, run_fold

    held = next(j for j in pollux_jobs if j.model == "imagenet")
    train = [j for j in pollux_jobs if j is not held]
    view = held.restricted(lambda r: r.world_size == 1)
    res = run_fold("lomo-1gpu", held.model, train, [held], {held.model: view}, lambda j, r: r.nodes >= 2,
                   None, Catalog.default(), quick=True)
    assert res is not None and res.n > 100
    st = res.stats()
    for m in METHODS[1:]:
        assert st["model"]["mape"] < st[m]["mape"], (m, st)
    # and it never tested on a row it could see: the view has no multi-worker run
    assert all(r.world_size == 1 for r in view.runs)


def test_a_model_without_its_gradient_size_gets_a_wide_interval_that_covers(pollux_jobs: list[Any]) -> None:
    import dataclasses

    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder
    from srifty.model import LatencyModel, table_for

    # cifar10 held out, and told nothing but its single-GPU runs: no parameter count either
    held, cat, comm, tr, lm = _fit_without(pollux_jobs, "cifar10")
    blind_view = held.restricted(lambda r: r.world_size == 1, forget_size=True)
    te = table_for([held], cat, comm.link_scale_, views={held.model: blind_view})
    assert len(te.y_ms) > 20 and LatencyModel.communication_unknown(te.X).all()
    lo, hi = lm.predict_interval(te.X)
    inside = np.mean((te.y_ms >= lo) & (te.y_ms <= hi))
    # the same model without the corpus's slowdown bound: the quantile models alone
    narrow = LatencyModel(max_iter=60).fit(tr.X, tr.y_ms, groups=tr.model)
    narrow.parts_ = {k: v if v is None else dataclasses.replace(v, multi_worker_slowdown=None)
                     for k, v in narrow.parts_.items()}
    lo_n, hi_n = narrow.predict_interval(te.X)
    inside_n = np.mean((te.y_ms >= lo_n) & (te.y_ms <= hi_n))
    assert (lo <= lo_n * (1 + 1e-9)).all() and (hi >= hi_n * (1 - 1e-9)).all()
    assert inside > inside_n and inside >= 0.8, (inside, inside_n)
    # and the prediction says why
    est = FeatureBuilder(blind_view, cat, comm.link_scale_).estimate(parse_config("2xg4dn.12xlarge").resolved(cat), 32)
    assert any("gradient size unknown" in n for n in est.notes)


def test_an_unrecorded_gradient_timeline_widens_the_interval_to_no_overlap(pollux_jobs: list[Any],
                                                                         emu_catalog: Any) -> None:
    """deepspeech2 (five GRU layers) hides far less of its allreduce than the other Pollux models:
    held out, it is predicted too fast. Its trace does not say when its gradients become ready, so
    the interval reaches the step with none of the allreduce hidden, and holds more of it; where
    the trace's own sync times were read (a window, or the default confirmed), they measured how
    much backward hides, and there is no such reach."""
    import dataclasses

    from srifty.configspec import parse_config
    from srifty.features import READY_UNKNOWN_NOTE, FeatureBuilder, load_corpus, with_fitted_overlap
    from srifty.model import predict_table, table_for

    held, cat, comm, _, lm = _fit_without(pollux_jobs, "deepspeech2")
    view = held.restricted(lambda r: r.world_size == 1)
    # the same profile, as if it had recorded its buckets' ready times (the simulator's own)
    recorded = dataclasses.replace(view, ready_fractions=[1 / 3, 2 / 3, 1.0])
    keep = lambda j, r: r.nodes >= 2  # noqa: E731
    te = table_for([held], cat, comm.link_scale_, keep=keep, views={held.model: view})
    te_r = table_for([held], cat, comm.link_scale_, keep=keep, views={held.model: recorded})
    np.testing.assert_allclose(lm.predict(te.X), lm.predict(te_r.X))  # the centre does not move
    lo, hi = lm.predict_interval(te.X)
    lo_r, hi_r = lm.predict_interval(te_r.X)
    np.testing.assert_allclose(lo, lo_r)
    assert (hi >= hi_r * (1 - 1e-9)).all() and (hi > hi_r * 1.05).mean() > 0.5
    inside = np.mean((te.y_ms >= lo) & (te.y_ms <= hi))
    inside_r = np.mean((te.y_ms >= lo_r) & (te.y_ms <= hi_r))
    assert inside > inside_r + 0.1, (inside, inside_r)
    # the reach and the residual's own error are independent: they add in quadrature (log space)
    p = lm.predict(te.X)
    reach = np.log(te.X["batch_high"].to_numpy(dtype=float))
    np.testing.assert_allclose(np.log(hi / p) ** 2, np.log(hi_r / p) ** 2 + reach ** 2, rtol=1e-6, atol=1e-9)
    config = parse_config("4xg4dn.12xlarge").resolved(cat)
    builder = FeatureBuilder(view, cat, comm.link_scale_)
    est = builder.estimate(config, 20)  # a batch its single-GPU runs measured
    assert READY_UNKNOWN_NOTE in est.notes and est.step_bounds[1] > 1.2
    # the reach is the step's, not the compute's: the compute is the profiled batch's own
    assert est.batch_bounds == (1.0, 1.0)
    assert predict_table(None, builder, [(config, 20)]).compute_source[0] == "profiled"
    # its single-node runs' sync times read a window; imagenet's confirm the default
    reads = {}
    for job in (held, next(j for j in pollux_jobs if j.model == "imagenet")):
        one_node = with_fitted_overlap(job.restricted(lambda r: r.nodes == 1), cat, comm.link_scale_)
        reads[job.model] = (one_node.overlap_fit is not None, one_node.overlap_check is not None)
        est = FeatureBuilder(one_node, cat, comm.link_scale_).estimate(config, 20)
        assert READY_UNKNOWN_NOTE not in est.notes and est.step_bounds[1] == est.batch_bounds[1] == 1.0
    assert reads == {"deepspeech2": (True, False), "imagenet": (False, True)}
    # a profile srifty recorded knows its buckets' ready times: no such widening, no such note
    emu = next(j for j in load_corpus([str(ROOT / "profiles/emulated")]) if j.ready_fractions)
    b = emu.runs[0].local_batch_size
    est = FeatureBuilder(emu, emu_catalog).estimate(parse_config("2xemu.medium").resolved(emu_catalog), b)
    assert READY_UNKNOWN_NOTE not in est.notes and est.step_bounds == (1.0, 1.0)


def test_ready_times_recorded_on_a_cpu_are_set_aside_on_gpus_and_kept_on_cpu_hosts() -> None:
    """A CPU runs backward's layers at other relative speeds than a GPU: on GPUs a CPU profile's
    recorded ready times give way to DDP's usual overlap, with the interval reaching none of the
    allreduce hidden; on emulated CPU hosts, and for ready times recorded on a GPU, they hold."""
    import dataclasses

    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty import model as m
    from srifty.features import READY_ON_CPU_NOTE, READY_UNKNOWN_NOTE, FeatureBuilder, load_job

    scale = m.load(m.SHIPPED_MODEL).link_scale
    cat = Catalog.default()
    job = load_job(ROOT / "profiles/local/transformer_lm.json")
    assert job.ready_device == "cpu" and job.ready_fractions is not None and job.ready_fractions[0] < 0.9
    config = parse_config("2xg4dn.12xlarge").resolved(cat)
    on_cpu = FeatureBuilder(job, cat, scale).estimate(config, 8)
    unrecorded = FeatureBuilder(dataclasses.replace(job, ready_fractions=None), cat, scale).estimate(config, 8)
    on_gpu = FeatureBuilder(dataclasses.replace(job, ready_device="cuda"), cat, scale).estimate(config, 8)
    # the buckets become ready evenly over backward, as with no ready times recorded
    assert on_cpu.sim_ms == pytest.approx(unrecorded.sim_ms) and on_cpu.step_bounds == unrecorded.step_bounds
    assert on_cpu.overlap_unknown and READY_ON_CPU_NOTE in on_cpu.notes and READY_UNKNOWN_NOTE not in on_cpu.notes
    assert (on_cpu.overlap_source, unrecorded.overlap_source) == ("recorded-on-cpu", "default")
    # ready times recorded on a GPU hold: its first bucket is ready early, so more of the allreduce hides
    assert on_gpu.sim_ms < on_cpu.sim_ms and not on_gpu.overlap_unknown and on_gpu.overlap_source == "recorded"
    assert on_gpu.step_bounds[1] < on_cpu.step_bounds[1] and READY_ON_CPU_NOTE not in on_gpu.notes
    # on CPU hosts they hold, from a CPU profile
    emu_job = load_job(ROOT / "profiles/emulated/cnn_resnet")
    emu_cat = m.catalog_for_jobs([emu_job])
    emu = parse_config("2xemu.small+1xemu.net").resolved(emu_cat)
    kept = FeatureBuilder(emu_job, emu_cat, scale).estimate(emu, 16)
    even = FeatureBuilder(dataclasses.replace(emu_job, ready_fractions=None), emu_cat, scale).estimate(emu, 16)
    assert emu_job.ready_device == "cpu" and not kept.overlap_unknown and even.overlap_unknown
    assert (kept.overlap_source, even.overlap_source) == ("recorded", "default")
    assert kept.step_bounds[1] < even.step_bounds[1]


def test_a_job_of_cpu_and_gpu_profiles_takes_the_gpu_s_ready_times() -> None:
    """Profiles of one model on a CPU and on a GPU: the GPU's ready times and split of forward and
    backward, whichever comes first, so that GPU rows keep a recorded timeline."""
    from srifty import profile as profile_mod
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder, job_from_profiles

    cpu, gpu = (profile_mod.load(ROOT / f"profiles/{d}/cnn_resnet/b32.json") for d in ("cpu", "h200"))
    summary = gpu.doc["summary"]
    bwd, fwd = summary["backward_compute_ms"]["median"], summary["forward_ms"]["median"]
    ready = sorted(b["ready_ms"] / bwd for b in summary["buckets"])
    for order in ([cpu, gpu], [gpu, cpu]):
        job = job_from_profiles(order)
        assert job.ready_device == "cuda" and job.ready_fractions == pytest.approx(ready)
        assert job.backward_fraction == pytest.approx(bwd / (fwd + bwd))
        assert {r.instance_type for r in job.runs} == {"local", "p5en.48xlarge"}
    alone = job_from_profiles([cpu])
    assert alone.ready_device == "cpu" and alone.ready_fractions != pytest.approx(ready)
    cat = Catalog.default()
    est = FeatureBuilder(job, cat).estimate(parse_config("2xp5en.48xlarge").resolved(cat), 32)
    assert not est.overlap_unknown


def test_a_job_profiled_at_several_batches_takes_the_nearest_batch_s_ready_times() -> None:
    """The H200 profiles of cnn_resnet put the first of its two buckets at 0.37, 0.27 and 0.13 of
    backward at batches 32, 128 and 512 (profiles/h200, as job_from_profiles reads them): a row at
    a batch simulates with the ready times and backward share recorded nearest it, whatever the
    profiles' file names, and a one-batch job keeps its only ones."""
    import dataclasses

    from srifty import simulate
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder, load_job

    job = load_job(str(ROOT / "profiles/h200/cnn_resnet"))
    assert [t.batch for t in job.ready_by_batch] == [32, 128, 512]
    assert [round(t.fractions[0], 2) for t in job.ready_by_batch] == [0.37, 0.27, 0.13]
    assert [job.ready_times_at(b).batch for b in (8, 63, 64, 65, 300, 4096)] == [32, 32, 32, 128, 512, 512]
    cat = Catalog.default()
    config = parse_config("2xp5en.48xlarge").resolved(cat)
    slow = simulate.Link(0.5, 30.0)  # a network slow enough that when the buckets are ready shows

    def step_ms(j: Any, batch: float) -> float:
        builder = FeatureBuilder(j, cat)
        return builder.simulated(config, builder.workers(config, batch), slow).iteration_ms

    for batch, nearest in ((32, job.ready_by_batch[0]), (512, job.ready_by_batch[2])):
        alone = dataclasses.replace(job, ready_fractions=list(nearest.fractions),
                                    backward_fraction=nearest.backward_fraction, ready_by_batch=())
        assert step_ms(job, batch) == pytest.approx(step_ms(alone, batch))
    first = dataclasses.replace(job, ready_by_batch=())  # the first profile's (batch 128) at every batch
    assert step_ms(first, 32) != pytest.approx(step_ms(job, 32), rel=1e-3)
    one = load_job(str(ROOT / "profiles/h200/cnn_resnet/b32.json"))
    assert len(one.ready_by_batch) == 1 and one.ready_times_at(512) is None


def test_the_cpu_timeline_check_predicts_both_ways_on_the_held_out_model(pollux_jobs: list[Any], tmp_path: Path
                                                                        ) -> None:
    """validate_cpu_timeline holds a model out as lomo-1gpu does, gives it its CPU profile's
    timeline, and predicts its multi-GPU runs as srifty takes that timeline and as recorded."""
    import shutil

    from srifty import model as m
    from srifty.validate import render_cpu_timeline, timeline_summary, validate_cpu_timeline

    shutil.copytree(ROOT / "profiles/cpu/imagenet", tmp_path / "imagenet")  # one model's CPU profile only
    cat = m.catalog_for_jobs(pollux_jobs)
    checks = validate_cpu_timeline(pollux_jobs, cat, tmp_path, quick=True)
    assert [c.model for c in checks] == ["imagenet"]
    c = checks[0]
    held = next(j for j in pollux_jobs if j.model == "imagenet")
    assert c.taken.n == c.as_recorded.n == sum(r.world_size >= 2 for r in held.runs)
    np.testing.assert_array_equal(c.taken.measured, c.as_recorded.measured)
    got = c.cells()
    # imagenet's CPU profile has most of its buckets ready early in backward: taken as recorded,
    # backward hides more of the allreduce, and every step comes out faster
    assert (c.as_recorded.predicted["model"] <= c.taken.predicted["model"] * (1 + 1e-9)).all()
    assert got["as_recorded"]["signed"] < got["taken"]["signed"]
    assert got["taken"]["inside"] >= got["as_recorded"]["inside"]
    assert got["taken"]["mape"] == pytest.approx(float(np.mean(c.taken.errors["model"])))
    assert timeline_summary(checks)[0]["model"] == "imagenet"
    page = render_cpu_timeline(checks)
    row = next(line for line in page.splitlines() if line.startswith("| imagenet |"))
    assert row.split(" | ")[2:4] == [f"{got['taken']['mape']:.1f}", f"{got['taken']['signed']:+.1f}"]
    assert render_cpu_timeline([]) == ""


def test_an_overlap_read_off_sync_times_may_be_wrong_down_to_ddp_s_usual_one(pollux_jobs: list[Any]) -> None:
    """deepspeech2's window is read off its single-node sync times (its gradients ready late), and
    held out so its compute-bound runs across nodes (big batches: under 10% beyond compute) are
    predicted too slow: the interval's lower end reaches the step at DDP's usual overlap (held out
    with the whole trace, 46% of those rows were inside without it: docs/latency-model.md)."""
    from srifty.features import FeatureBuilder, run_config, with_fitted_overlap
    from srifty.model import table_for

    held, cat, comm, _, lm = _fit_without(pollux_jobs, "deepspeech2")
    view = with_fitted_overlap(held.restricted(lambda r: r.nodes == 1), cat, comm.link_scale_)
    assert view.overlap_fit is not None and view.backward_fraction < simulate.DEFAULT_BACKWARD_FRACTION
    te = table_for([held], cat, comm.link_scale_, keep=lambda j, r: r.nodes >= 2, views={held.model: view})
    builder = FeatureBuilder(view, cat, comm.link_scale_)
    usual = []  # the step at DDP's usual overlap over the step at the read window, per row
    for r in te.runs:
        config = run_config(r)
        layout = builder.workers(config, r.local_batch_size)
        read = builder.simulated(config, layout, layout.inter)
        tree = builder.simulated(config, layout, layout.inter, tree=True)
        at_usual = builder.simulated(config, layout, layout.inter, window=simulate.DEFAULT_BACKWARD_FRACTION)
        usual.append(min(at_usual.iteration_ms / read.iteration_ms, 1.0))
        est = builder.estimate(config, r.local_batch_size)
        assert est.step_bounds[0] == pytest.approx(est.batch_bounds[0] * tree.iteration_ms / read.iteration_ms
                                                   * usual[-1])
    usual = np.array(usual)
    assert (usual < 0.97).mean() > 0.9  # the read window exposes more of the allreduce than DDP's usual
    lo, hi = lm.predict_interval(te.X)
    lo_without, _ = lm.predict_interval(te.X.assign(batch_low=te.X["batch_low"] / usual))
    assert (usual < 0.9).sum() >= 5 and (lo < lo_without * 0.97)[usual < 0.9].all()
    assert (lo <= lo_without * (1 + 1e-9)).all()
    compute_bound = te.X["compute_ms"].to_numpy() > 0.9 * te.y_ms
    inside = ((lo <= te.y_ms) & (te.y_ms <= hi))[compute_bound].mean()
    assert compute_bound.sum() >= 5 and inside >= 0.85, inside


def test_an_interval_fitted_on_one_model_says_it_is_not_calibrated(pollux_jobs: list[Any], tmp_path: Path) -> None:
    """With the runs of one model only, nothing measures how far a model never seen misses: the
    fit says so, and so does every multi-worker prediction of that regime; with two models, neither."""
    from srifty import model as m
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty.model import UNCALIBRATED_NOTE, Predictor

    cat = Catalog.default()
    by_name = {j.model: j for j in pollux_jobs}
    target = by_name["imagenet"].restricted(lambda r: r.world_size == 1)
    rows = [(parse_config("4xg4dn.12xlarge").resolved(cat), 32), (parse_config("1xg4dn.12xlarge:1").resolved(cat), 32)]
    one = Predictor.train([by_name["cifar10"]], cat, quick=True)
    assert one.meta["uncalibrated_regimes"] == ["real"]
    several, single = one.predict(target, cat, rows)
    assert UNCALIBRATED_NOTE in several.warnings and UNCALIBRATED_NOTE not in single.warnings
    # what it can measure, it does: each node count of cifar10 predicted from the others bounds the interval
    part = one.latency.parts_["real"]
    assert part.held_out_groups == "node counts" and part.held_out_error is not None
    low, high = one.latency.held_out_bounds(one.builder(target, cat).frame(rows[:1]))[0]
    assert np.log(several.interval_ms[1] / several.iteration_ms) >= high - 1e-9
    assert np.log(several.interval_ms[0] / several.iteration_ms) <= low + 1e-9
    saved = tmp_path / "one.npz"
    m.save(one, saved)
    assert m.load(saved).latency.parts_["real"].held_out_groups == "node counts"
    two = Predictor.train([by_name["cifar10"], by_name["ncf"]], cat, quick=True)
    assert two.meta["uncalibrated_regimes"] == []
    assert UNCALIBRATED_NOTE not in two.predict(target, cat, rows)[0].warnings


def test_rings_within_one_node_get_their_own_pcie_figure(pollux_jobs: list[Any], emu_catalog: Any) -> None:
    import dataclasses

    from srifty.catalog import Catalog
    from srifty.features import hardware_of
    from srifty.comm import CommModel, simulated_ms

    cat = Catalog.default()
    stated = [j for j in pollux_jobs if j.grad_bytes or j.param_count]
    scale = CommModel(max_rows=150).fit(stated, cat).link_scale_
    assert scale.node_intra_efficiency is not None
    joint = dataclasses.replace(scale, node_intra_efficiency=None)

    def log_error(ls: Any, keep: Any) -> "np.ndarray":
        pairs = [(j, r) for j in stated for r in j.runs if r.world_size > 1 and keep(r)]
        return np.log(simulated_ms(pairs, cat, ls) / np.array([r.step_ms for _, r in pairs]))

    one_node = lambda r: r.nodes == 1  # noqa: E731
    # the measured single-node runs are simulated closer with their own figure than with the joint one
    assert len(log_error(scale, one_node)) > 10
    assert np.median(np.abs(log_error(scale, one_node))) < np.median(np.abs(log_error(joint, one_node)))
    # and rings across nodes are untouched by it
    np.testing.assert_allclose(log_error(scale, lambda r: r.nodes > 1), log_error(joint, lambda r: r.nodes > 1))
    # the figure applies to PCIe only: an emulated host keeps its scaled link
    raw = hardware_of(emu_catalog, "emu.medium")
    assert scale.within_node(raw, scale.apply(raw)) == scale.apply(raw).intra
    # without single-node runs to fit it on, there is none
    multi_only = [j.restricted(lambda r: r.nodes > 1 or r.world_size == 1) for j in stated]
    assert CommModel(max_rows=150).fit(multi_only, cat).link_scale_.node_intra_efficiency is None


@pytest.fixture(scope="module")
def model_file(pollux_jobs: list[Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    from srifty import model as m
    from srifty.catalog import Catalog

    pred = m.Predictor.train(pollux_jobs, Catalog.default(), quick=True)
    out = tmp_path_factory.mktemp("m") / "m.npz"
    m.save(pred, out)
    return out


def test_a_cluster_larger_than_any_trained_on_is_carried_by_the_trend_not_widened(
        model_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond the largest cluster in training (16 nodes of the Pollux trace) the residual's trend in
    log(nodes) carries the figure: outside the training range in the node count alone, the interval
    is as it would be inside, and the warning says so; outside it in the world size too (the trees
    read it, flat beyond the range), the interval is widened."""
    from srifty import model as m
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty.features import load_job
    from srifty.model import latency

    pred, cat = m.load(model_file), Catalog.default()
    job = load_job(ROOT / "profiles/pollux/imagenet")
    rows = [(parse_config(c).resolved(cat), 32) for c in ("32xg4dn.12xlarge:1", "32xg4dn.12xlarge:4")]
    X = pred.builder(job, cat).frame(rows)
    assert pred.latency.out_of_range(X) == [["nodes"], ["nodes", "world_size"]]
    lo, hi = pred.latency.predict_interval(X)
    monkeypatch.setattr(latency, "TREND_FEATURES", ())  # every feature outside widens, as before
    lo_w, hi_w = pred.latency.predict_interval(X)
    assert hi[0] < hi_w[0] * 0.95 and lo[0] >= lo_w[0]  # nodes alone: not widened
    assert (hi[1], lo[1]) == (hi_w[1], lo_w[1])  # the world size too: widened either way
    monkeypatch.undo()
    notes = [p.warnings for p in pred.predict(job, cat, rows)]
    assert any("far outside the training data (node count): the residual's trend in cluster size" in w
               for w in notes[0])
    assert any("(node count, worker count): the interval is widened" in w for w in notes[1])


def test_a_loose_profile_widens_the_interval_and_says_so(model_file: Path, emu_catalog: Any) -> None:
    from srifty import model as m
    from srifty.configspec import parse_config
    from srifty.features import LOOSE_PROFILE_CI

    pred = m.load(model_file)

    def job(ci_ms: float) -> Any:
        d = _doc(["emu.small"], 100.0, 200.0, 10.0, it=310.0)
        d["summary"]["iteration_ms"].update(ci_low=310.0 - ci_ms, ci_high=310.0 + ci_ms)
        return _job([d])

    rows = [(parse_config(c).resolved(emu_catalog), 8) for c in ("1xemu.small", "2xemu.small")]
    tight, loose = pred.predict(job(3.1), emu_catalog, rows), pred.predict(job(31.0), emu_catalog, rows)
    ci = 31.0 / 310.0
    assert 3.1 / 310.0 < LOOSE_PROFILE_CI < ci
    # measured: the point is kept, the interval is the profile's own CI
    assert loose[0].source == "measured" and loose[0].iteration_ms == tight[0].iteration_ms == 310.0
    assert loose[0].interval_ms == pytest.approx((310.0 * (1 - ci), 310.0 * (1 + ci)))
    assert tight[0].interval_ms == pytest.approx((310.0 * 0.99, 310.0 * 1.01))  # its ±1% CI, no warning
    assert any("measured to ±10% only" in w for w in loose[0].warnings)
    assert not any("measured to" in w for w in tight[0].warnings)
    # predicted: the model's interval, widened by the profile's CI on both sides
    assert loose[1].iteration_ms == pytest.approx(tight[1].iteration_ms)
    assert loose[1].interval_ms == pytest.approx((tight[1].interval_ms[0] * (1 - ci), tight[1].interval_ms[1] * (1 + ci)))
    assert any("±10% only" in w for w in loose[1].warnings) and not any("only (95% CI)" in w for w in tight[1].warnings)
    # recommend's vectorised path gives the same intervals and the same warning
    import pandas as pd

    from srifty.oracle import ModelOracle

    oracle = ModelOracle(job(31.0), emu_catalog, pred)
    df = oracle.predict_rows(pd.DataFrame({"instance_type": ["emu.small"] * 2, "workers_per_node": [1, 1],
                                           "nodes": [1, 2], "local_batch_size": [8, 8]}))
    for (_, row), want in zip(df.iterrows(), loose):
        assert (row.interval_low_ms, row.interval_high_ms) == pytest.approx(want.interval_ms)
    assert any("±10% only" in n for n in oracle.notes)


def _predict(*args: str) -> Any:
    from srifty.cli import cli

    return CliRunner().invoke(cli, ["predict", *args])


def test_predict_json_shape(model_file: Path) -> None:
    res = _predict("--profile", str(POLLUX / "imagenet"), "--config", "4xg4dn.12xlarge",
                   "--local-batch-size", "64", "--model", str(model_file), "--json")
    assert res.exit_code == 0, res.stderr
    d = json.loads(res.stdout.strip().splitlines()[-1])
    assert set(d) == {"config", "local_batch_size", "iteration_ms", "interval_ms", "throughput_samples_per_s", "source",
                      "parts", "memory_gib", "warnings"}
    # the trace counts no memory: the floor of its 25,557,032 float32 parameters and their gradients
    assert d["memory_gib"] == pytest.approx(2 * 4 * 25_557_032 / 2**30, abs=1e-4)
    # the row's own warnings, as stderr says them (an imported trace: its ready times unrecorded, its sync times read)
    assert any("imagenet's gradients become ready" in w for w in d["warnings"])
    assert all(f"warning: 4xg4dn.12xlarge:4: {w}" in res.stderr for w in d["warnings"])
    assert d["source"] == "predicted" and d["interval_ms"][0] <= d["iteration_ms"] <= d["interval_ms"][1]
    assert d["throughput_samples_per_s"] == pytest.approx(16 * 64 / (d["iteration_ms"] / 1e3), rel=1e-3)
    parts = d["parts"]  # the step = the slowest worker's compute alone + the rest, each with its source
    assert parts["compute_ms"] + parts["communication_ms"] == pytest.approx(d["iteration_ms"], rel=1e-4)
    assert parts["compute_source"] in ("profiled", "profiled-other-batch") and parts["network_source"] == "fitted-on-type"
    # an exact measured config is reported as measured; another type as transferred
    res = _predict("--profile", str(POLLUX / "imagenet"), "--config", "1xg4dn.12xlarge:1",
                   "-b", "81", "--model", str(model_file), "--json")
    assert json.loads(res.stdout.splitlines()[-1])["source"] == "measured"
    res = _predict("--profile", str(POLLUX / "imagenet"), "--config", "2xp3.8xlarge",
                   "-b", "64", "--model", str(model_file), "--json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1])["source"] == "transferred"
    # and says what the transfer is worth, and what to do instead
    assert "by GPU/CPU spec ratio, a rough estimate" in res.stderr and "profile on p3.8xlarge" in res.stderr
    # between two GPUs with measured speed factors (V100 -> H100), the transfer says it used them
    res = _predict("--profile", str(ROOT / "profiles/lambda/resnet50-amp/p3.8xlarge.json"), "--config",
                   "1xp5.48xlarge", "-b", "256", "--model", str(model_file), "--json")
    assert res.exit_code == 0, res.stderr
    assert "by GPU/CPU spec ratio with measured GPU speed factors, a rough estimate" in res.stderr
    # to a GPU without measured factors (A10G): the spec ratio alone, which the feature table marks
    # so that the interval takes that ratio's spread
    res = _predict("--profile", str(ROOT / "profiles/lambda/resnet50-amp/p3.8xlarge.json"), "--config",
                   "1xg5.xlarge", "-b", "256", "--model", str(model_file), "--json")
    assert res.exit_code == 0, res.stderr
    assert "by GPU/CPU spec ratio, a rough estimate" in res.stderr
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder, load_job

    fb = FeatureBuilder(load_job(ROOT / "profiles/lambda/resnet50-amp/p3.8xlarge.json"), Catalog.default())
    table = fb.frame([(parse_config(c), 256) for c in ("1xp3.8xlarge", "1xp5.48xlarge", "1xg5.xlarge")])
    assert table["spec_transfer"].tolist() == [0.0, 0.0, 1.0]


def _ring_inverted(job: Any, catalog: Any, link_scale: Any) -> float:
    """The median over ``job``'s single-node multi-worker runs of the gradient bytes whose ring
    allreduce over the PCIe link of rings across nodes takes the run's whole sync time."""
    from srifty.features import FeatureBuilder

    builder, sizes = FeatureBuilder(job, catalog, link_scale), []
    for r in job.runs:
        if r.nodes == 1 and r.world_size > 1 and r.sync_ms:
            link, p = builder.hardware(r.instance_type).intra, r.world_size
            sizes.append((r.sync_ms / 1e3 - 2 * (p - 1) * link.latency_us * 1e-6) * link.gbytes_per_s * 1e9
                         / (2 * (p - 1) / p))
    return float(np.median(sizes))


def test_a_held_out_check_predicts_each_run_across_nodes_from_the_single_node_runs(pollux_jobs: list[Any],
                                                                                 model_file: Path) -> None:
    from srifty import model as m
    from srifty.catalog import Catalog
    from srifty.errors import SriftyError
    from srifty.features import estimate_gradient_size, run_config, with_fitted_overlap
    from srifty.validate import check_held_out

    cat = Catalog.default()
    held = next(j for j in pollux_jobs if j.model == "deepspeech2")
    pred = m.Predictor.train([j for j in pollux_jobs if j is not held], cat, quick=True)
    check = check_held_out([held], pred, cat)
    tested = [r for r in held.runs if r.nodes >= 2]
    assert check.seen == () and len(check.rows) == len(tested) > 100
    # each row is what `srifty predict` answers for the job known by its single-node runs alone
    view = held.restricted(lambda r: r.nodes == 1)
    direct = pred.predict(view, cat, [(run_config(r).resolved(cat), r.local_batch_size) for r in tested[:5]])
    for row, p, r in zip(check.rows, direct, tested):
        assert (row.predicted_ms, (row.low_ms, row.high_ms), row.measured_ms) == (p.iteration_ms, p.interval_ms,
                                                                                  r.step_ms)
        assert row.beyond_compute == pytest.approx(1 - p.parts["compute_ms"] / r.step_ms)
    cells = {c["group"]: c for c in check.cells("nodes")}
    err = np.array([row.error for row in check.rows])
    assert cells["all"]["rows"] == len(tested) and cells["all"]["mape"] == pytest.approx(np.mean(np.abs(err)))
    assert cells["all"]["inside_interval"] == pytest.approx(np.mean([row.inside for row in check.rows]))
    assert cells["all"]["interval_ratio"] == pytest.approx(np.median([row.high_ms / row.low_ms for row in check.rows]))
    assert sum(c["rows"] for c in check.cells("regime") if c["group"] != "all") == len(tested)
    assert sum(c["rows"] for c in check.cells("nodes") if c["group"] != "all") == len(tested)
    # deepspeech2 hides little of its allreduce, which its single-node sync times show (features.overlap)
    assert with_fitted_overlap(view, cat, pred.link_scale).overlap_fit is not None
    assert abs(cells["all"]["signed_median"]) < 10 and cells["all"]["mape"] < cells["all"]["simulator_mape"] / 2
    # told no gradient size, the same sync times give one: the size whose simulated single-node runs
    # match them, near the count of its code, and its runs across nodes predicted about as well
    blind = held.restricted(lambda r: True, forget_size=True)
    size = estimate_gradient_size(blind.restricted(lambda r: r.nodes == 1), cat, pred.link_scale)
    counted = held.param_count * 4
    assert size is not None and counted / 1.3 < size.grad_bytes < counted * 1.3, (size, counted)
    read = with_fitted_overlap(blind.restricted(lambda r: r.nodes == 1), cat, pred.link_scale)
    assert (read.grad_bytes, read.grad_bytes_estimated, read.overlap_fit is not None) == (size.grad_bytes, True, True)
    assert check.sources() == [("deepspeech2", "stated", "read-from-sync", len(tested))]
    blind_check = check_held_out([blind], pred, cat)
    assert blind_check.sources() == [("deepspeech2", "read-from-sync", "read-from-sync", len(tested))]
    blind_cells = {c["group"]: c for c in blind_check.cells("nodes")}
    assert blind_cells["all"]["mape"] < max(1.5 * cells["all"]["mape"], cells["all"]["mape"] + 3), blind_cells["all"]
    # and each such prediction says where its gradient size came from
    (p,) = pred.predict(read, cat, [(run_config(tested[0]).resolved(cat), tested[0].local_batch_size)])
    assert p.parts["gradient_source"] == "read-from-sync", p.parts
    assert f"single-node sync times ({size.grad_bytes / 1e6:.3g} MB)" in " ".join(p.warnings)
    assert direct[0].parts["gradient_source"] == "stated"
    # the ring of one node inverted through the link of rings across nodes (the estimate's former
    # method) puts it at a third of that size, and those runs far too fast
    assert size.grad_bytes > 2 * _ring_inverted(view, cat, pred.link_scale)
    # a model trained on its runs says the check is not held out; training read its overlap, none of the others'
    trained = m.load(model_file)
    assert check_held_out([held], trained, cat).seen == ("deepspeech2",)
    assert list(trained.meta["overlap_windows"]) == ["deepspeech2"] and pred.meta["overlap_windows"] == {}
    with pytest.raises(SriftyError, match="runs across nodes"):  # nothing to predict
        check_held_out([view], pred, cat)
    # a job with nothing to predict beside one that has: left out and named
    both = check_held_out([view, held], pred, cat)
    assert len(both.rows) == len(check.rows) and both.skipped == (f"deepspeech2 ({len(view.runs)} run(s) on one "
                                                                   "node, 0 across nodes)",)


def test_a_job_whose_overlap_nobody_read_gets_the_training_models_unread_error(pollux_jobs: list[Any],
                                                                                 model_file: Path) -> None:
    """deepspeech2's window was read in training, so the real regime also keeps the held-out error
    of the same runs with it at the default, and a row whose overlap was neither recorded nor read
    takes that bound; a row whose window was read keeps the other."""
    from srifty import model as m
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty.model.residual import BIN_MIN_HALF_WIDTH, REPEAT_SCATTER, compute_share, share_bin

    pred = m.load(model_file)
    part = pred.latency.parts_["real"]
    assert part.held_out_error is not None and part.held_out_error_unread is not None
    assert part.held_out_error_unread != part.held_out_error
    cat = Catalog.default()
    ds2 = next(j for j in pollux_jobs if j.model == "deepspeech2")
    rows = [(parse_config(c).resolved(cat), 20) for c in ("2xg4dn.12xlarge", "4xg4dn.12xlarge:2", "8xg4dn.12xlarge")]
    read = pred.builder(ds2.restricted(lambda r: r.nodes == 1), cat).frame(rows)  # its sync times read
    unread = pred.builder(ds2.restricted(lambda r: r.world_size == 1), cat).frame(rows)  # none to read
    assert (read["overlap_unknown"] == 0).all() and (unread["overlap_unknown"] == 1).all()
    centre = np.log(pred.latency.predict(unread) / unread["sim_ms"].to_numpy())
    sim = unread["sim_ms"].to_numpy()
    read_bounds = pred.latency.held_out_bounds(unread.assign(overlap_unknown=0.0))
    unread_bounds = pred.latency.held_out_bounds(unread)
    # each row takes its share bin's bound of the runs as read, or as nobody read them
    bins = share_bin(compute_share(unread), centre)
    for b, rows_in in ((b, bins == b) for b in set(bins)):
        for bounds, pooled, by_share in ((read_bounds, part.held_out_error, part.held_out_error_by_share),
                                         (unread_bounds, part.held_out_error_unread,
                                          part.held_out_error_unread_by_share)):
            expect = pooled if b < 0 or by_share is None or by_share[b] is None else \
                (min(by_share[b][0], -BIN_MIN_HALF_WIDTH), max(by_share[b][1], BIN_MIN_HALF_WIDTH))
            assert np.allclose(bounds[rows_in], expect)
    as_read = np.log(np.array(pred.latency.predict_interval(unread.assign(overlap_unknown=0.0))) / sim)
    as_unread = np.log(np.array(pred.latency.predict_interval(unread)) / sim)
    # the bound each takes, where it is the widest term (the interval's quadrature only widens it)
    for side, sign in ((0, -1), (1, 1)):
        wider = sign * (unread_bounds[:, side] - read_bounds[:, side]) > 0
        assert np.all(np.where(wider, sign * (as_unread[side] - as_read[side]) >= -1e-12,
                               sign * (as_unread[side] - as_read[side]) <= 1e-12))
    assert not np.allclose(as_unread, as_read)
    # the low end: the unread bound, or the measured compute less its scatter where that is higher
    floor = np.log(unread["compute_ms"].to_numpy() * np.minimum(unread["batch_low"].to_numpy(), 1.0) / sim)
    assert np.all(as_unread[0] <= np.maximum(centre + unread_bounds[:, 0], floor - REPEAT_SCATTER) + 1e-12)
    # the high end: the unread error alone, or the read one with the reach to none of the allreduce
    # hidden (as_read) where wider; not the unread error with the reach, which counts the overlap twice
    reach = np.log(unread["batch_high"].to_numpy())
    alone = np.log(pred.latency.predict_interval(unread.drop(columns=["batch_low", "batch_high"]))[1] / sim)
    read_alone = np.log(pred.latency.predict_interval(
        unread.assign(overlap_unknown=0.0).drop(columns=["batch_low", "batch_high"]))[1] / sim)
    assert (reach > 0.1).all() and (alone > as_read[1] + 0.01).any()
    assert np.all(alone <= read_alone + reach)  # deepspeech2's reach is long: the unread error is its own
    np.testing.assert_allclose(as_unread[1], np.maximum(alone, as_read[1]), rtol=0, atol=1e-9)
    assert np.all(as_unread[1] >= centre + unread_bounds[:, 1] - 1e-12)
    assert (as_unread[1] < centre + np.hypot(alone - centre, reach) - 0.01).all()


def test_an_overlap_nobody_read_costs_at_most_the_whole_allreduce(pollux_jobs: list[Any], model_file: Path) -> None:
    """An unread row's high end is the unread held-out error (deepspeech2's, a model whose allreduce
    sets its step) only as far as the read error and the row's whole reach to none of the allreduce
    hidden add up: cifar10 from its single-GPU runs, where little of the step is the allreduce, is
    bounded there, no lower than the read error and the reach in quadrature."""
    from srifty import model as m
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config

    pred = m.load(model_file)
    cat = Catalog.default()
    cifar10 = next(j for j in pollux_jobs if j.model == "cifar10")
    rows = [(parse_config(c).resolved(cat), 256) for c in ("1xg4dn.12xlarge:2", "1xg4dn.12xlarge:4", "2xg4dn.12xlarge:4")]
    unread = pred.builder(cifar10.restricted(lambda r: r.world_size == 1), cat).frame(rows)
    assert (unread["overlap_unknown"] == 1).all()
    sim = unread["sim_ms"].to_numpy()
    centre = np.log(pred.latency.predict(unread) / sim)
    reach = np.log(unread["batch_high"].to_numpy())

    def high(table: Any) -> Any:
        return np.log(pred.latency.predict_interval(table)[1] / sim)

    alone = high(unread.drop(columns=["batch_low", "batch_high"]))
    read_alone = high(unread.assign(overlap_unknown=0.0).drop(columns=["batch_low", "batch_high"]))
    got = high(unread)
    assert (alone > read_alone + reach + 0.02).all()  # further than the whole allreduce can reach
    np.testing.assert_allclose(got, np.maximum(np.minimum(alone, read_alone + reach),
                                               centre + np.hypot(read_alone - centre, reach)), rtol=0, atol=1e-9)
    assert np.all(got < alone - 0.02) and np.all(got >= high(unread.assign(overlap_unknown=0.0)) - 1e-12)


def test_validate_holdout_reads_a_trace_and_prints_its_tables(model_file: Path, tmp_path: Path) -> None:
    import csv

    from srifty.cli import cli

    with open(ROOT / "data/traces/pollux_g4dn12xlarge.import.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["model"] == "ncf"][::8]
    trace = tmp_path / "ncf.csv"
    with open(trace, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    across = sum("+" in r["placement"] for r in rows)
    res = CliRunner().invoke(cli, ["validate", "--holdout", str(trace), "--model", str(model_file)])
    assert res.exit_code == 0, res.stderr
    assert "not a held-out check" in res.stderr  # the fixture's model was trained on ncf
    assert any(line.split()[:3] == ["ncf", "all", str(across)] for line in res.stdout.splitlines())
    d = json.loads(CliRunner().invoke(cli, ["validate", "--holdout", str(trace), "--model", str(model_file),
                                            "--json"]).stdout)
    assert len(d["rows"]) == across and d["seen"] == ["ncf"]
    # how ncf's communication was read, in both outputs: its size stated, its sync times kept the default
    assert d["sources"] == [{"model": "ncf", "gradient_source": "stated", "overlap_source": "default-checked",
                             "rows": across}]
    assert f"ncf: gradient size stated, overlap default-checked ({across} rows)" in res.stdout
    for bad in (["--holdout", str(trace), "--quick"], ["--model", str(model_file)]):
        res = run_srifty("validate", *bad)
        assert res.returncode == 1 and "--holdout" in res.stderr and "Traceback" not in res.stderr


def test_predict_configs_that_cannot_be_read_get_a_clear_error(tmp_path: Path) -> None:
    """--configs given a configuration instead of a file, a CSV without a config column, or a bad
    batch: exit 1 with one paragraph saying what to give, no traceback."""
    no_column = tmp_path / "no-column.csv"
    no_column.write_text("configuration\n2xg4dn.12xlarge\n")
    bad_batch = tmp_path / "bad-batch.csv"
    bad_batch.write_text("config,local_batch_size\n2xg4dn.12xlarge,many\n")
    for configs, said in (("2xg5.xlarge,4xg5.xlarge", "for one configuration use --config"),
                          (str(no_column), "needs a 'config' column"), (str(bad_batch), "line 2: local_batch_size")):
        res = run_srifty("predict", "--profile", str(POLLUX / "imagenet"), "--configs", configs)
        assert res.returncode == 1 and said in res.stderr and "Traceback" not in res.stderr, res.stderr
        assert "unexpectedly" not in res.stderr
    # a batch of no samples, or fewer (as a file or through the library), is refused, not read as none given
    from srifty import api
    from srifty.errors import SriftyError

    for batch in ("0", "-5"):
        (tmp_path / "batch.csv").write_text(f"config,local_batch_size\n2xg4dn.12xlarge,{batch}\n")
        res = _predict("--profile", str(POLLUX / "imagenet"), "--configs", str(tmp_path / "batch.csv"))
        assert res.exit_code == 1 and isinstance(res.exception, SriftyError), res.output
        assert f"line 2: local_batch_size '{batch}' is not a whole number of 1 to" in str(res.exception)
    with pytest.raises(SriftyError, match=r"A per-worker batch is a number above 0, not -5\. \(row 1\)"):
        api.predict([str(POLLUX / "imagenet")], [("2xg4dn.12xlarge", -5)], where=[" (row 1)"])
    # a batch_split that is not TYPE=BATCH, or names a type its row does not hold: the line is named

    for split, said in (("g4dn.12xlarge=0", "line 3: batch_split 'g4dn.12xlarge=0': expected TYPE=BATCH"),
                        ("g4dn.12xlarge:16", "line 3: batch_split 'g4dn.12xlarge:16': expected TYPE=BATCH"),
                        ("g4dn.12xlarge=16;g5.xlarge=4", "names g5.xlarge, which no configuration asked for holds "
                                                         f"({tmp_path / 'split.csv'} line 3)")):
        (tmp_path / "split.csv").write_text(f"config,batch_split\n2xg5.xlarge,\n2xg4dn.12xlarge,{split}\n")
        res = _predict("--profile", str(POLLUX / "imagenet"), "--configs", str(tmp_path / "split.csv"))
        assert res.exit_code == 1 and isinstance(res.exception, SriftyError), res.output
        assert said in str(res.exception), str(res.exception)


def test_predict_a_mix_at_each_type_s_own_batch(model_file: Path) -> None:
    """--type-batch: every worker of a type at its own batch (a mix as recommend splits it). Each
    group computes at its batch; the step waits for the slower; the global batch is the sum."""
    from srifty.errors import SriftyError

    args = ("--profile", str(POLLUX / "imagenet"), "--model", str(model_file), "--json")
    res = _predict(*args, "--config", "1xg4dn.12xlarge+1xg4dn.xlarge", "-b", "32", "--type-batch", "g4dn.xlarge=8")
    assert res.exit_code == 0, res.stderr
    d = json.loads(res.stdout.splitlines()[-1])
    assert d["batch_split"] == {"g4dn.12xlarge": 32, "g4dn.xlarge": 8}
    assert d["local_batch_size"] == (4 * 32 + 8) / 5  # their mean
    assert d["throughput_samples_per_s"] == pytest.approx((4 * 32 + 8) / (d["iteration_ms"] / 1e3), rel=1e-3)
    # the slowest worker's compute: the g4dn.12xlarge's T4s at 32, not the g4dn.xlarge's at 8
    alone = json.loads(_predict(*args, "--config", "1xg4dn.12xlarge:1", "-b", "32").stdout.splitlines()[-1])
    assert d["parts"]["compute_ms"] == pytest.approx(alone["parts"]["compute_ms"], rel=1e-6)
    # at one batch for both, no split is said, and the g4dn.xlarge's share is larger
    same = json.loads(_predict(*args, "--config", "1xg4dn.12xlarge+1xg4dn.xlarge", "-b", "32").stdout.splitlines()[-1])
    assert "batch_split" not in same and same["local_batch_size"] == 32
    # a type no configuration holds, or a batch that is not one: a clear error
    for bad, said in (("p4d.24xlarge=8", "which no configuration asked for holds"), ("g4dn.xlarge=x", "TYPE=BATCH"),
                      ("g4dn.xlarge", "TYPE=BATCH")):
        res = _predict(*args, "--config", "1xg4dn.12xlarge+1xg4dn.xlarge", "--type-batch", bad)
        assert res.exit_code == 1 and isinstance(res.exception, SriftyError) and said in str(res.exception), res.output


def test_predict_configs_says_each_warning_once_with_its_rows(model_file: Path, tmp_path: Path) -> None:
    """A CSV of many rows gets each distinct warning once, naming the rows it concerns, not once per row."""
    csv_path = tmp_path / "configs.csv"
    csv_path.write_text("config,local_batch_size\n2xg4dn.12xlarge,32\n4xg4dn.12xlarge,32\n4xg4dn.12xlarge,64\n"
                        "2xg5.xlarge,32\n2xg6.xlarge,32\n2xg4dn.xlarge,32\n2xg5.2xlarge,32\n"
                        "2xg6.2xlarge,32\n")
    res = _predict("--profile", str(POLLUX / "imagenet"), "--configs", str(csv_path), "--model", str(model_file))
    assert res.exit_code == 0, res.stderr
    assert len(res.stdout.strip().splitlines()) == 8
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning: ") and "catalog snapshot" not in line]
    assert len(warnings) == len(set(warnings))
    # every row is an imported trace's: its ready-time warning is one line for all seven
    ready = [w for w in warnings if "gradients become ready" in w]
    assert ready == [next(w for w in ready)] and ready[0].startswith("warning: every row (8): ")
    # the four rows of one-GPU types with a spec-ratio compute share how far outside the training
    # data they lie: three named, one counted
    outside = [w for w in warnings if "far outside the training data" in w and "compute carried from another type" in w]
    assert len(outside) == 1 and outside[0].count(" at batch ") == 3 and " and 1 more row(s): " in outside[0]
    # rows of one-GPU types, whose unstated intra-node link never holds their ring back, are not told of it
    assert not any("intra-node" in w for w in warnings)
    # a warning that names its type stays with that type's row alone
    prior = [w for w in warnings if "the network between g5.xlarge nodes was never measured" in w]
    assert len(prior) == 1 and prior[0].startswith("warning: 2xg5.xlarge:1 at batch 32: the network")
    # one row keeps the configuration as its prefix
    one = _predict("--profile", str(POLLUX / "imagenet"), "--config", "2xg5.xlarge", "-b", "32", "--model", str(model_file))
    assert any(line.startswith("warning: 2xg5.xlarge:1: the network") for line in one.stderr.splitlines())


def test_one_transferred_worker_is_warned_of_its_widening_not_of_communication(model_file: Path) -> None:
    """One worker on a type with compute carried from another has its interval widened, because the
    residual saw runs of several workers only; the warning says that, not that its communication
    features lie outside the training data (it has none). Two such workers get the feature list."""
    res = _predict("--profile", str(POLLUX / "imagenet"), "-b", "32", "--config", "1xg5.xlarge",
                   "--config", "2xg5.xlarge", "--model", str(model_file), "--json")
    assert res.exit_code == 0, res.stderr
    one, two = (json.loads(line) for line in res.stdout.splitlines())
    assert [w for w in one["warnings"] if "one worker, its compute carried" in w]
    assert not [w for w in one["warnings"] if "far outside the training data" in w]
    assert [w for w in two["warnings"] if "far outside the training data (" in w]


def test_predict_takes_several_configs(model_file: Path) -> None:
    """--config given more than once: one row each, in order, and each shared warning said once."""
    args = ["--profile", str(POLLUX / "imagenet"), "-b", "32", "--model", str(model_file)]
    both = _predict(*args, "--config", "2xg5.xlarge", "--config", "4xg4dn.12xlarge", "--json")
    assert both.exit_code == 0, both.stderr
    rows = [json.loads(line) for line in both.stdout.splitlines()]
    assert [r["config"] for r in rows] == ["2xg5.xlarge:1", "4xg4dn.12xlarge:4"]
    for row, config in zip(rows, ("2xg5.xlarge", "4xg4dn.12xlarge")):  # each as it is alone
        alone = json.loads(_predict(*args, "--config", config, "--json").stdout)
        assert row["iteration_ms"] == alone["iteration_ms"] and row["interval_ms"] == alone["interval_ms"]
    table = _predict(*args, "--config", "2xg5.xlarge", "--config", "4xg4dn.12xlarge")
    assert sum("gradients become ready" in line for line in table.stderr.splitlines()) == 1
    for extra in (["--configs", str(ROOT / "README.md")], []):  # both ways, or neither
        res = _run("predict", "--profile", str(POLLUX / "imagenet"), *extra, *(["--config", "2xg5.xlarge"] if extra else []))
        assert res.returncode == 1 and "by --config (once or more) or by --configs" in res.stderr, res.stderr


def test_predict_on_a_terminal_is_a_table_of_the_rows_and_their_parts(model_file: Path) -> None:
    """On a terminal `predict` prints a table: each row's step, interval and throughput as --json
    gives them, and its two parts with where each came from; piped, one plain line per row."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    args = [sys.executable, "-m", "srifty", "predict", "--profile", str(POLLUX / "imagenet"), "-b", "32",
            "--model", str(model_file), "--config", "2xg4dn.12xlarge", "--config", "2xg5.12xlarge"]
    rows = [json.loads(line) for line in subprocess.run(args + ["--json"], capture_output=True, text=True,
                                                        timeout=300, cwd=str(ROOT)).stdout.splitlines()]
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))  # a terminal 200 columns wide
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=subprocess.DEVNULL, cwd=str(ROOT),
                            env={**env, "TERM": "xterm"})  # not a dumb one, which rich sets at 80 columns
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=300) == 0
    text = re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode())
    assert "compute from" in text and "network" in text
    for row in rows:
        line = next(line for line in text.splitlines() if row["config"] in line)
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        parts = row["parts"]
        assert cells[2] == f"{row['iteration_ms']:,.1f}" and cells[4] == f"{row['throughput_samples_per_s']:,.1f}"
        assert cells[3] == "–".join(f"{ms:,.1f}" if ms < 100 else f"{ms:,.0f}" for ms in row["interval_ms"])
        assert cells[5] == f"{parts['compute_ms']:,.1f}" and cells[7] == f"{parts['communication_ms']:,.1f}"
        assert cells[6].startswith(parts["compute_source"]) and cells[8] == parts["network_source"]
    assert {r["parts"]["network_source"] for r in rows} == {"fitted-on-type", "prior"}
    piped = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=str(ROOT)).stdout.splitlines()
    assert len(piped) == 2 and all("samples/s" in line for line in piped)


@pytest.mark.parametrize("profile, config, batch, compute, carried, network, overlap", [
    ("pollux/cifar10", "4xg4dn.12xlarge", 64, "measured", None, "measured", "measured"),  # a run of the trace itself
    # the trace's sync times read, and DDP's usual overlap kept
    ("pollux/imagenet", "2xg4dn.12xlarge", 48, "profiled-other-batch", None, "fitted-on-type", "default-checked"),
    # TCP of a type no run has seen; T4 and A10G have no measured speed factors: the spec speeds alone
    ("pollux/imagenet", "2xg5.xlarge", 32, "transferred", ["spec-speed"], "prior", "default-checked"),
    ("pollux/imagenet", "1xg5.12xlarge", 32, "transferred", ["spec-speed"], "prior", "default-checked"),  # its PCIe
    # eight T4s per node, the trace's GPU: its compute as profiled, no ratio
    ("pollux/imagenet", "2xg4dn.metal", 32, "transferred", ["same-gpu"], "prior", "default-checked"),
    # one four-GPU run, no sync time and no single-GPU run to compare it with: nothing to read
    ("lambda/resnet50-amp/p3.8xlarge.json", "2xp3.8xlarge", 256, "profiled-other-batch", None, "prior", "default"),
    ("pollux/deepspeech2", "2xg4dn.12xlarge", 23, "profiled-other-batch", None, "fitted-on-type", "read-from-sync"),
    # one worker: nothing to send; a CPU profile's operators carried to the GPU
    ("local/cnn_resnet.json", "1xg5.xlarge", 32, "transferred", ["operator-model"], "none", "none"),
    # several GPUs from a CPU profile: its recorded ready times do not carry to them
    ("local/transformer_lm.json", "2xg4dn.12xlarge", 8, "transferred", ["operator-model"], "fitted-on-type",
     "recorded-on-cpu"),
    ("lambda/resnet50-amp/p3.8xlarge.json", "1xp5.48xlarge:1", 256, "transferred", ["gpu-speed-factors"], "none",
     "none"),  # V100 -> H100: both GPUs have measured factors
    ("emulated/cnn_resnet", "2xemu.small+1xemu.net", 16, "profiled", None, "emulated-sweeps", "recorded"),
])
def test_predict_says_where_compute_and_communication_come_from(profile: str, config: str, batch: int, compute: str,
                                                                 carried: list[str] | None, network: str,
                                                                 overlap: str) -> None:
    from srifty import model as m
    from srifty.configspec import parse_config
    from srifty.oracle import load_inputs

    job, cat = load_inputs([str(ROOT / "profiles" / profile)], None, with_emulated=True)
    p = m.load(m.SHIPPED_MODEL).predict(job, cat, [(parse_config(config).resolved(cat), batch)])[0]
    assert (p.parts["compute_source"], p.parts["network_source"], p.parts["overlap_source"]) == (compute, network,
                                                                                                 overlap)
    assert p.parts["compute_transfer"] == carried
    assert p.parts["compute_source"] in m.COMPUTE_SOURCES and p.parts["network_source"] in m.NETWORK_SOURCES
    assert p.parts["overlap_source"] in m.OVERLAP_SOURCES and p.parts["gradient_source"] in m.GRADIENT_SOURCES
    assert p.parts["communication_ms"] == pytest.approx(max(p.iteration_ms - p.parts["compute_ms"], 0.0), abs=1e-3)


def test_transfer_method_names_how_compute_was_carried(emu_catalog: Any) -> None:
    from srifty.features import COMPUTE_TRANSFERS, FeatureBuilder, JobProfile, Run

    run = Run("emu.small", (1,), 16, 100.0)
    # both emulated hosts calibrated: their measured CPU factors; one of them not: the spec figures
    calibrated = JobProfile("m", [run], param_count=1_000_000, cpu_factors={"emu.small": 4.0, "emu.large": 1.5})
    fb = FeatureBuilder(calibrated, emu_catalog)
    assert (fb.transfer_method("emu.small"), fb.transfer_method("emu.large")) == (None, "cpu-factors")
    assert fb.compute_ms("emu.large", 16)[0] == pytest.approx(100.0 * 1.5 / 4.0)
    half = JobProfile("m", [run], param_count=1_000_000, cpu_factors={"emu.small": 4.0})
    assert FeatureBuilder(half, emu_catalog).transfer_method("emu.large") == "spec-speed"
    assert {"cpu-factors", "spec-speed"} <= set(COMPUTE_TRANSFERS)


def test_a_gpu_without_spec_figures_is_not_carried_to_by_its_host_s_cpus() -> None:
    """The catalog knows p6-b300's B300 by name only (no spec row, tests/test_catalog.py). Its
    192 vCPUs are no measure of its compute: no job is carried to it, from a CPU profile or a GPU
    one. predict says so; recommend leaves the type out with that note and keeps the others."""
    from srifty.catalog import Catalog
    from srifty.features import hardware_of

    cat = Catalog.default()
    b300, b200, cpu = (hardware_of(cat, t) for t in ("p6-b300.48xlarge", "p6-b200.48xlarge", "c5.2xlarge"))
    assert b300.speed_for("tf32") is None and b200.speed_for("tf32") > 0 and cpu.speed_for(None) == 8.0
    for profile in (PROFILES / "local" / "cnn_resnet.json", PROFILES / "h200" / "cnn_resnet"):
        res = run_srifty("predict", "--profile", str(profile), "--config", "1xp6-b300.48xlarge:1")
        assert res.returncode != 0 and "Cannot transfer cnn_resnet's compute time to p6-b300.48xlarge" in res.stderr
    res = run_srifty("recommend", "--profile", str(PROFILES / "local" / "cnn_resnet.json"), "--instance-types",
                     "p6-*", "--budget", "400", "--json")
    doc = json.loads(res.stdout)
    assert any(n.startswith("p6-b300.48xlarge left out: Cannot transfer") for n in doc["notes"])
    assert {t for r in doc["recommendations"] for t in r["batch_split"]} == {"p6-b200.48xlarge"}


def test_the_prediction_cache_keeps_what_cannot_be_predicted(tmp_path: Path) -> None:
    """Which types the job's compute cannot be carried to, and a grid that fails for one, are as much
    a function of the cache's key as a prediction: a second run learns them from the cache, with
    no model loaded, and says the same."""
    import pandas as pd

    from srifty import model as m
    from srifty.errors import SriftyError
    from srifty.oracle import CachedOracle, ModelOracle, load_inputs

    job, cat = load_inputs([str(PROFILES / "local" / "cnn_resnet.json")], None)
    made: list[int] = []

    def make() -> ModelOracle:
        made.append(1)
        return ModelOracle(job, cat, m.load(m.SHIPPED_MODEL))

    types = ["g5.xlarge", "p6-b300.48xlarge"]
    grid = pd.DataFrame({"instance_type": types, "workers_per_node": [1, 1], "nodes": [1, 1],
                         "local_batch_size": [32.0, 32.0]})
    answers = []
    for _ in range(2):
        cached = CachedOracle(make, {"test": 1}, 32, tmp_path)
        skip = cached.unpredictable(types, 32)
        with pytest.raises(SriftyError) as failed:
            cached.predict_rows(grid)
        answers.append((skip, failed.value.message, failed.value.hint))
    assert answers[0] == answers[1] and len(made) == 1
    assert list(answers[0][0]) == ["p6-b300.48xlarge"]
    assert answers[0][0]["p6-b300.48xlarge"] == f"{answers[0][1]} {answers[0][2]}"  # the reason and what to do
    assert cached.predict_rows(grid.head(1)).iteration_ms.iloc[0] > 0 and len(made) == 2


def test_compute_from_the_same_gpu_is_taken_as_profiled_and_takes_no_transfer_spread() -> None:
    """g4dn.xlarge carries the T4 of the trace's g4dn.12xlarge: its compute is the profile's, not
    carried by a speed ratio, so its interval takes neither the measured spread of GPU-to-GPU
    ratios nor the widening for a feature no training row has (every training row is profiled)."""
    from srifty import model as m
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder
    from srifty.oracle import load_inputs

    job, cat = load_inputs([str(POLLUX / "imagenet")], None)
    pred = m.load(m.SHIPPED_MODEL)
    fb = pred.builder(job, cat)
    assert fb.transfer_method("g4dn.xlarge") == "same-gpu" and fb.transfer_method("g5.xlarge") == "spec-speed"
    got, transferred, note = fb.compute_ms("g4dn.xlarge", 32)
    assert transferred and got == fb.compute_ms("g4dn.12xlarge", 32)[0] and "same GPU (T4)" in note
    X = FeatureBuilder.frame_of([fb.row_estimate(parse_config("4xg4dn.xlarge").resolved(cat), 32)])
    assert X["same_gpu_transfer"].iloc[0] == 1.0
    as_ratio = X.assign(same_gpu_transfer=0.0)  # the same row, as a transfer by a speed ratio of 1
    lm = pred.latency
    assert "transferred" in lm.out_of_range(as_ratio)[0] and "transferred" not in lm.out_of_range(X)[0]
    (lo,), (hi,) = lm.predict_interval(X)
    (lo_r,), (hi_r,) = lm.predict_interval(as_ratio)
    centre = float(lm.predict(X)[0])
    assert lo_r < lo < centre < hi < hi_r


def test_an_interval_starts_no_lower_than_the_measured_compute() -> None:
    """No multi-GPU Pollux run is shorter than its slowest worker's single-GPU compute at its batch
    by more than REPEAT_SCATTER, so an interval on a type whose compute was measured starts no
    lower than that; one transferred to a type nobody profiled keeps its wider low end."""

    import numpy as np

    from srifty import model as m
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder, load_corpus, run_config
    from srifty.model.residual import REPEAT_SCATTER

    cat = Catalog.default()
    gaps = []
    for job in load_corpus([str(POLLUX)]):
        builder = FeatureBuilder(job, cat)
        for r in job.runs:
            if r.world_size > 1:
                gaps.append(math.log(r.step_ms / builder.estimate(run_config(r), r.local_batch_size).compute_ms))
    assert min(gaps) > -REPEAT_SCATTER and np.mean(np.array(gaps) < 0) < 0.01
    job = load_corpus([str(POLLUX / "imagenet")])[0].restricted(lambda r: r.world_size == 1)
    pred = m.load(m.SHIPPED_MODEL)
    # batch 40 was measured on one GPU: no bounds on the compute there
    config = parse_config("4xg4dn.12xlarge:1").resolved(cat)
    on_type = pred.predict(job, cat, [(config, 40)])[0]
    assert on_type.source == "predicted" and on_type.parts["compute_source"] == "profiled"
    floor = on_type.parts["compute_ms"] * math.exp(-REPEAT_SCATTER)
    assert on_type.interval_ms[0] >= floor * (1 - 1e-6)  # (parts round compute_ms to 0.1 µs)
    # the same row with its compute transferred from another GPU: no floor, a lower low end
    X = pred.builder(job, cat).frame([(config, 40)])
    low, _ = pred.latency.predict_interval(X.assign(transferred=1.0))
    assert low[0] < floor


def test_far_outside_training_range_warns(model_file: Path) -> None:
    res = _predict("--profile", str(POLLUX / "cifar10"), "--config", "64xg4dn.12xlarge",
                   "--model", str(model_file), "--json")
    assert res.exit_code == 0 and "outside the training data" in res.stderr
    d = json.loads(res.stdout.splitlines()[-1])
    assert d["interval_ms"][1] / d["interval_ms"][0] > 1.2


def test_compute_curve_is_held_within_its_bounds_outside_the_measured_batches() -> None:
    from srifty.features import ComputeCurve

    one = ComputeCurve.from_points([(32, 8.0)])
    assert one.bounds(32) == (8.0, 8.0) and one.at(64) == 16.0  # proportional: the top of its bounds
    # a larger batch takes no less time, and no more per sample; a smaller one the reverse
    assert one.bounds(64) == (8.0, 16.0) and one.bounds(16) == (4.0, 8.0)
    two = ComputeCurve.from_points([(32, 8.0), (128, 9.0)])
    assert two.covers(64) and two.at(64) == pytest.approx(8.0 + 32 / 96)  # interpolated
    # between two measured batches: within both neighbours' bounds, [max(8, 9 * 64/128), min(8 * 64/32, 9)]
    assert two.bounds(64) == (8.0, 9.0)
    # noisy neighbours that contradict the bounds (the larger batch measured faster): the interval
    # still takes in the interpolated time
    noisy = ComputeCurve.from_points([(256, 6.9), (1024, 6.5)])
    assert noisy.bounds(512) == pytest.approx((6.5, 6.9)) and not noisy.covers(4096)
    assert two.at(512) == pytest.approx(9.0 + 384 / 96)  # the last segment's line, inside [9, 36]
    assert two.bounds(512) == (9.0, 36.0) and two.bounds(8) == (2.0, 8.0)
    # a falling last segment (noise) would extrapolate below the largest batch's time: held there
    assert ComputeCurve.from_points([(256, 6.9), (1024, 6.5)]).at(4096) == 6.5
    # a superlinear one, above proportional: held at the per-sample rate of the largest batch
    assert ComputeCurve.from_points([(8, 1.0), (16, 4.0)]).at(32) == pytest.approx(8.0)


def test_batch_check_against_hand_arithmetic() -> None:
    from srifty.validate import BatchCheck, batch_scaling_summary

    up = BatchCheck("d", "m on t", 32, 8.0, 128, 10.0)  # 4x the batch, 1.25x the time
    assert up.ratio == 4 and up.proportional_ape() == pytest.approx((8.0 * 4 / 10.0 - 1) * 100)  # 220%
    assert up.inside_bounds()  # within [8, 32]
    down = BatchCheck("d", "m on t", 128, 10.0, 32, 8.0)
    assert down.proportional_ape() == pytest.approx((1 - 2.5 / 8.0) * 100) and down.inside_bounds()  # [2.5, 10]
    # the bounds hold for the true times; a measurement scatters about them by up to e^0.05 (REPEAT_SCATTER)
    assert BatchCheck("d", "m on t", 32, 8.0, 64, 16.8).inside_bounds()  # 5% over [8, 16]
    assert not BatchCheck("d", "m on t", 32, 8.0, 64, 16.9).inside_bounds()  # 5.6% over
    assert BatchCheck("d", "m on t", 32, 8.0, 64, 7.7).inside_bounds()  # larger batch 4% faster
    assert not BatchCheck("d", "m on t", 32, 8.0, 64, 7.5).inside_bounds()
    faster = BatchCheck("d", "m on t", 32, 8.0, 128, 7.0)  # a larger batch measured faster: outside
    assert not faster.inside_bounds()
    s = batch_scaling_summary([up, down, faster])["d"]["2-4"]
    assert s["pairs"] == 3 and s["inside_bounds"] == pytest.approx(2 / 3)


def test_a_gpu_step_far_below_its_peak_is_called_launch_bound() -> None:
    from srifty import model as m
    from srifty.features import LAUNCH_BOUND_PEAK_SHARE, FeatureBuilder, load_job

    h200 = ROOT / "profiles" / "h200"
    doc = json.loads((h200 / "cnn_resnet" / "b32.json").read_text())
    job = load_job(h200 / "cnn_resnet")
    fb = FeatureBuilder(job, m.catalog_for_jobs([job]))
    # 3 x the counted forward FLOPs over the compute curve's time, against the H200's TF32 spec
    assert job.precision == "tf32" and fb.hardware("p5en.48xlarge").peak_tflops("tf32") == 494.5
    want = 3 * doc["job"]["forward_flops"] / (fb.curve("p5en.48xlarge").at(32) / 1e3) / 494.5e12
    assert fb.peak_share("p5en.48xlarge", 32) == pytest.approx(want) and want < 0.01
    assert fb.peak_share("p4d.24xlarge", 32) == fb.peak_share("p5en.48xlarge", 32)  # the compute source's
    carried, _, note = fb.compute_ms("p4d.24xlarge", 32)
    assert "the profiled step reaches 0.4% of p5en.48xlarge's spec FLOPS" in note
    # without an operator count the whole step is carried by the ratio; the interval reaches the
    # step with only that arithmetic carried, the rest (launches, host) kept
    profiled = fb.curve("p5en.48xlarge").at(32)
    low, high = fb.transfer_bounds("p4d.24xlarge", 32)
    least = profiled * (1 - want) + profiled * want * carried / profiled
    assert (low, high) == pytest.approx((least / carried, 1.0)) and carried > 2 * profiled and low < 0.5
    assert fb.batch_bounds("p4d.24xlarge", 32)[0] == pytest.approx((low, high))
    assert f"its interval spans x{low:.2f} to x1.00 of the figure" in note and "operator model puts" not in note
    assert fb.transfer_bounds("p5en.48xlarge", 32) is None  # profiled there: nothing carried
    # outside the profiled batches the clause is said once, in the transfer note, not again in the batch one
    from srifty.configspec import parse_config

    est = fb.estimate(parse_config("1xp4d.24xlarge:1").resolved(m.catalog_for_jobs([job])), 8)
    assert sum("spec FLOPS" in n for n in est.notes) == 1 and any("outside the" in n for n in est.notes)
    (_, _), own = fb.batch_bounds("p5en.48xlarge", 8)
    assert "spec FLOPS" in own  # the profiled type's own batch note keeps it
    # transformer_lm at batch 128 is near half its FP32 peak: no such clause
    lm = load_job(h200 / "transformer_lm")
    fb = FeatureBuilder(lm, m.catalog_for_jobs([lm]))
    assert fb.peak_share("p5en.48xlarge", 128) > 0.4 > LAUNCH_BOUND_PEAK_SHARE > fb.peak_share("p5en.48xlarge", 8)
    assert fb.launch_bound_note("p4d.24xlarge", 512) == "" and fb.launch_bound_note("p4d.24xlarge", 8)
    # near its peak the reach stays near the ratio's figure; far below it, near the profiled step
    near, far = fb.transfer_bounds("p4d.24xlarge", 128)[0], fb.transfer_bounds("p4d.24xlarge", 8)[0]
    k = fb.compute_ms("p4d.24xlarge", 128)[0] / fb.curve("p5en.48xlarge").at(128)
    assert 1 / k < far < near < 1 and near == pytest.approx(1 / k + fb.peak_share("p5en.48xlarge", 128) * (1 - 1 / k))
    # a CPU profile has no GPU peak to hold it against
    from srifty.catalog import Catalog
    from srifty.oracle import load_inputs

    cpu, hosts = load_inputs([str(ROOT / "profiles" / "local" / "cnn_resnet.json")], Catalog.default())
    assert FeatureBuilder(cpu, hosts).peak_share("local", 32) is None
    assert FeatureBuilder(cpu, hosts).transfer_bounds("p4d.24xlarge", 32) is None  # the operator model carries it


def test_a_note_gives_times_without_exponents(model_file: Path) -> None:
    """Milliseconds in a note read as numbers do: 1,166, not 1.17e+03."""
    from srifty.features.notes import readable_ms

    assert [readable_ms(x) for x in (1166.4, 34885.2, 100.0, 58.49, 0.012345)] == \
        ["1,166", "34,885", "100", "58.5", "0.0123"]
    res = _predict("--profile", str(POLLUX / "imagenet"), "--config", "2xg4dn.12xlarge", "-b", "256",
                   "--model", str(model_file))
    (note,) = [line for line in res.stderr.splitlines() if "its compute is extrapolated" in line]
    assert "e+0" not in note and re.search(r"\(\d,\d{3} ms there, anywhere from \d{3} to \d,\d{3} ms\)", note), note


def test_a_batch_outside_the_profiled_ones_says_so_and_its_interval_covers_the_h200_measurements(
        model_file: Path) -> None:
    from srifty.model.residual import REPEAT_SCATTER

    # profiles/h200: the examples on one H200 at three batches each (2026-12-04). On such a GPU a
    # small step hardly grows with the batch, so a time proportional to the batch misses far
    h200 = ROOT / "profiles" / "h200"
    for model, small, large in (("cnn_resnet", 32, 512), ("transformer_lm", 8, 128)):
        args = ("--config", "1xp5en.48xlarge:1", "-b", str(large), "--model", str(model_file), "--json")
        res = _predict("--profile", str(h200 / model), *args)
        measured = json.loads(res.stdout.splitlines()[-1])
        assert measured["source"] == "measured"
        res = _predict("--profile", str(h200 / model / f"b{small}.json"), *args)
        assert res.exit_code == 0, res.stderr
        d = json.loads(res.stdout.splitlines()[-1])
        assert d["source"] == "predicted"
        assert f"per-worker batch {large} is outside the batch {small} profiled on p5en.48xlarge" in res.stderr
        assert d["interval_ms"][0] <= measured["iteration_ms"] <= d["interval_ms"][1]
        assert d["iteration_ms"] > 1.5 * measured["iteration_ms"]  # the point estimate: proportional, far off
        # one worker on the profiled type: the compute curve, so the interval is its bounds (the
        # proportional point is their top, the time at the profiled batch their bottom), each end
        # widened by the scatter of repeated measurements, and no residual's
        assert d["interval_ms"][1] == pytest.approx(d["iteration_ms"] * math.exp(REPEAT_SCATTER))
        assert d["interval_ms"][0] < measured["iteration_ms"] and "far outside the training data" not in res.stderr
        # inside the profiled batches no such warning, and an interval within the neighbours' bounds
        res = _predict("--profile", str(h200 / model), "--config", "1xp5en.48xlarge:1", "-b", str(2 * small),
                       "--model", str(model_file), "--json")
        assert res.exit_code == 0 and "is outside the" not in res.stderr
        d = json.loads(res.stdout.splitlines()[-1])
        assert d["interval_ms"][1] / d["interval_ms"][0] < 2.0  # at most the 2x to the next measured batch


def test_unknown_type_did_you_mean_real_cli(model_file: Path) -> None:
    # once through a real subprocess, as a user runs it
    res = run_srifty("predict", "--profile", str(POLLUX / "ncf"), "--config", "2xg4dn.12xlarg", "--model", str(model_file))
    assert res.returncode != 0 and "Did you mean 'g4dn.12xlarge'" in res.stderr


def test_model_file_round_trip_and_refuses_what_is_not_arrays(model_file: Path, pollux_jobs: list[Any],
                                                              tmp_path: Path) -> None:
    from srifty import model as m
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config

    pred = m.load(model_file)
    assert pred.meta["data_sha256"] == m.corpus_hash(pollux_jobs) and "scikit-learn" in pred.meta["libraries"]
    # the link scale comes back whole, the emulated goodput per rate and the node-count shares included
    from dataclasses import replace

    tabled = m.Predictor(pred.latency, replace(pred.link_scale, emulated_goodput_by_mbit=((50.0, 0.86), (200.0, 0.93)),
                                               tcp_node_shares=(("g4dn.12xlarge", 2, 0.71),)), pred.meta)
    m.save(tabled, tmp_path / "tabled.npz")
    assert m.load(tmp_path / "tabled.npz").link_scale == tabled.link_scale
    assert pred.latency.n_features_in_ == len(pred.latency.feature_names_in_)
    # the loaded model answers exactly as the one that was saved
    cat = Catalog.default()
    job = next(j for j in pollux_jobs if j.model == "cifar10")
    rows = [(parse_config("3xg4dn.12xlarge").resolved(cat), 32)]
    again = m.Predictor.train(pollux_jobs, cat, quick=True)
    assert pred.predict(job, cat, rows)[0].iteration_ms == pytest.approx(again.predict(job, cat, rows)[0].iteration_ms)
    assert pred.predict(job, cat, rows)[0].interval_ms == pytest.approx(again.predict(job, cat, rows)[0].interval_ms)
    assert pred.latency.parts_["real"].held_out_error == pytest.approx(again.latency.parts_["real"].held_out_error)
    assert pred.latency.parts_["real"].held_out_error is not None  # the Pollux models are groups
    assert pred.latency.parts_["real"].held_out_error_unread == pytest.approx(
        again.latency.parts_["real"].held_out_error_unread)
    assert pred.latency.parts_["real"].multi_worker_slowdown == pytest.approx(
        again.latency.parts_["real"].multi_worker_slowdown)
    assert pred.latency.parts_["real"].multi_worker_slowdown is not None
    assert pred.latency.parts_["real"].trend == pytest.approx(again.latency.parts_["real"].trend)
    assert pred.latency.parts_["real"].trend != (0.0, 0.0)  # Pollux runs span 1 to 16 nodes: a line was fitted
    assert pred.latency.parts_["real"].shrink == again.latency.parts_["real"].shrink
    # a file of another format, or of the skops archives srifty wrote before, says so
    old = tmp_path / "old.skops"
    with zipfile.ZipFile(old, "w") as z:
        z.writestr("schema.json", "{}")
    with pytest.raises(m.ModelError, match="older srifty"):
        m.load(old)
    # a tree whose nodes point outside it is refused before it is walked
    with np.load(model_file, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["real_upper_right"] = arrays["real_upper_right"] + 10_000
    broken = tmp_path / "broken.npz"
    with open(broken, "wb") as fh:
        np.savez(fh, **arrays)
    with pytest.raises(m.ModelError, match="inconsistent"):
        m.load(broken)
    # loading imports neither scikit-learn nor skops nor torch
    import subprocess
    import sys

    code = (f"import sys; from srifty import model as m; m.load({str(model_file)!r}); "
            "bad = [k for k in ('sklearn', 'skops', 'torch') if k in sys.modules]; assert not bad, bad")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


def test_estimator_contract() -> None:
    import pandas as pd

    from srifty.features import FEATURES
    from srifty.model import LatencyModel, ModelError

    lm = LatencyModel(max_iter=5)
    assert lm.max_iter == 5 and not hasattr(lm, "parts_")
    with pytest.raises(ModelError, match="not fitted"):
        lm.predict(pd.DataFrame(np.ones((2, len(FEATURES) + 1)), columns=FEATURES + ["sim_ms"]))


def test_shipped_model_is_current_with_the_shipped_corpus() -> None:
    """srifty/data/latency-model.npz (``make model``) answers recommend's first run without a
    minute of training; it must be trained on exactly the corpus shipped beside it."""
    from srifty import model as m
    from srifty.comm import measured_allreduce
    from srifty.features import load_corpus

    card = m.read_card(m.SHIPPED_MODEL)
    assert card is not None, "run `make model`"
    assert card["features"] == list(m.RESIDUAL_FEATURES), "features changed: run `make model`"
    jobs = load_corpus(m.corpus_paths())
    assert card["data_sha256"] == m.corpus_hash(jobs), "the shipped corpus changed: run `make model`"
    assert card["allreduce_sha256"] == m.allreduce_hash(measured_allreduce()[0]), \
        "the measured allreduces changed: run `make model`"
    pred = m.load(m.SHIPPED_MODEL)
    assert pred.meta["data_sha256"] == card["data_sha256"] and pred.meta["rows"] == card["rows"]


def test_default_model_prefers_the_shipped_one_and_retrains_a_stale_cache(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, model_file: Path) -> None:
    import shutil

    from srifty import model as m
    from srifty import oracle

    monkeypatch.delenv("SRIFTY_MODEL", raising=False)
    monkeypatch.setenv("SRIFTY_CATALOG_DIR", str(tmp_path))
    # the shipped model is used as it is while its card is current
    assert oracle.default_model_path() == m.SHIPPED_MODEL
    # another model revision: the shipped model is not used, the cache is
    monkeypatch.setattr(m.persistence, "MODEL_REVISION", m.MODEL_REVISION + 1)
    cache = tmp_path / oracle.CACHED_MODEL
    assert oracle.default_model_path() == cache
    monkeypatch.setattr(m.persistence, "MODEL_REVISION", m.MODEL_REVISION)
    monkeypatch.setattr(m.persistence, "SHIPPED_MODEL", tmp_path / "not-shipped.npz")
    # a cache trained on another corpus (the Pollux subset of `model_file`) is retrained, not trusted
    shutil.copy(model_file, cache)
    shutil.copy(m.card_path(model_file), m.card_path(cache))
    card = json.loads(m.card_path(cache).read_text())
    assert card["data_sha256"] != m.read_card(m.SHIPPED_MODEL)["data_sha256"]
    trained: list[str] = []
    monkeypatch.setattr(m, "default_predictor", lambda quick=False: trained.append("x") or m.load(model_file))
    said: list[str] = []
    oracle.load_predictor(None, said.append)
    assert trained and any("another corpus" in s for s in said)
    # ... and a cache whose card matches this installation and the shipped corpus is loaded as it is
    card["data_sha256"] = m.read_card(m.SHIPPED_MODEL)["data_sha256"]
    m.card_path(cache).write_text(json.dumps(card))
    trained.clear()
    assert oracle.load_predictor(None, said.append) is not None and not trained


def test_validate_quick_on_every_shipped_corpus(tmp_path: Path, monkeypatch, quick_validation) -> None:
    """`srifty validate --quick` (the CI subset): every shipped corpus gets its splits, each split
    is scored on exactly the rows it should hold out, and the report is written. The command's
    api.validate call (the shipped corpora, quick) is answered by the session's one computation of
    it (conftest.quick_validation), which tests/test_api.py reads too."""
    from srifty import api
    from srifty.features import load_corpus
    from srifty.comm import measured_allreduce
    from srifty.validate import METHODS, README_END, README_START, replicate_floor

    done, lines = quick_validation
    calls = []

    def computed(corpora: Any, quick: bool, say: Any) -> Any:
        calls.append((tuple(corpora), quick))
        for line in lines:
            say(line)
        return done

    monkeypatch.setattr(api, "validate", computed)
    out = tmp_path / "ACCURACY.md"
    readme = tmp_path / "README.md"
    readme.write_text(f"# intro\n\n{README_START}\nold figures\n{README_END}\n\n## after\n")
    res = CliRunner().invoke(_cli(), ["validate", "--quick", "--json", "--out", str(out), "--readme", str(readme)])
    assert res.exit_code == 0, res.stderr
    assert calls == [((), True)] and "pollux/lomo-1gpu: holding out cifar10" in res.stderr
    splits = json.loads(res.stdout)["splits"]
    text = readme.read_text()  # the table between the markers is replaced, the rest kept
    assert text.startswith("# intro\n\n" + README_START) and text.endswith(README_END + "\n\n## after\n")
    assert "old figures" not in text
    grad_known = json.loads(res.stdout)["grad_known"]  # splits where some models lack a stated parameter count
    pollux = load_corpus([str(ROOT / "profiles/pollux")])
    assert all(j.param_count for j in pollux) and "pollux/lomo-1gpu" not in grad_known  # every Pollux size stated
    known = grad_known["lambda/lomo-1gpu"]  # models with a stated parameter count only
    lam = load_corpus([str(ROOT / "profiles/lambda")])
    assert known["n"] == sum(1 for j in lam if j.param_count or j.grad_bytes for r in j.runs if r.world_size >= 2)
    assert 0 < known["n"] < splits["lambda/lomo-1gpu"]["model"]["n"]
    # the README gets one summary line: each corpus's first split, the stated-gradient figure, the link
    lomo = splits["pollux/lomo-1gpu"]["model"]
    summary = text.split(README_START + "\n")[1].split("\n" + README_END)[0]
    assert "\n" not in summary and summary.endswith("[docs/ACCURACY.md](docs/ACCURACY.md).")
    assert f"pollux/lomo-1gpu {lomo['mape']:.1f}% (a model never seen, from its single-GPU runs; noise floor " \
        in summary
    assert f"; {known['mape']:.1f}% on the {known['n']} rows whose gradient size is stated)" in summary
    # interval coverage: the share of held-out rows inside the model's interval
    assert 0.0 < lomo["inside_interval"] <= 1.0
    assert lomo["interval_ratio"] > 1.0 and "its width, high/low (median)" in out.read_text()
    # every split also by regime and by node count: the groups partition the split's rows
    doc = json.loads(res.stdout)
    for key in ("by_regime", "by_nodes"):
        for split, cells in doc[key].items():
            assert sum(c["rows"] for c in cells) == splits[split]["model"]["n"], (key, split)
            assert all(0.0 <= c["inside_interval"] <= 1.0 and c["model_mape"] >= 0 for c in cells)
    for split in splits:  # and each fold by regime: its cells partition the split's rows too
        cells = [c for c in doc["by_fold_and_regime"] if c["split"] == split]
        assert sum(c["rows"] for c in cells) == splits[split]["model"]["n"], split
    regimes = {c["group"] for c in doc["by_regime"]["pollux/lomo-1gpu"]}
    assert any(g.startswith("communication-bound") for g in regimes) and len(regimes) == 3
    pooled_coverage = sum(c["inside_interval"] * c["rows"] for c in doc["by_regime"]["pollux/lomo-1gpu"])
    assert pooled_coverage / lomo["n"] == pytest.approx(lomo["inside_interval"])
    assert "By regime:" in out.read_text() and "By node count:" in out.read_text()
    emu = splits["emulated/loco"]
    assert f"emulated/loco {emu['model']['mape']:.1f}%" in summary
    assert {"pollux/lomo-1gpu", "pollux/nodes>4", "lambda/lomo-1gpu", "emulated/loco"} <= set(splits)
    # compute at another batch: every ordered pair of batches of a job alone on one device
    batch = json.loads(res.stdout)["batch_scaling"]
    h200 = batch["h200"]  # 3 examples x 3 batches, x4 apart: 6 ordered pairs each, 4 at x4 and 2 at x16
    assert h200["2-4"]["pairs"] == 12 and h200["4+"]["pairs"] == 6 and h200["2-4"]["jobs"] == 3
    assert {"pollux", "gavel", "emulated", "h200"} <= set(batch)
    assert "## Compute at another batch" in out.read_text()
    for name, corpus in (("pollux", "profiles/pollux"), ("lambda", "profiles/lambda")):
        jobs = load_corpus([str(ROOT / corpus)])
        multi_gpu = sum(1 for j in jobs for r in j.runs if r.world_size >= 2)
        assert splits[f"{name}/lomo-1gpu"]["model"]["n"] == multi_gpu
    emulated = load_corpus([str(ROOT / "profiles/emulated")])
    assert splits["emulated/loco"]["model"]["n"] == sum(1 for j in emulated for r in j.runs if r.nodes >= 2)
    for st in splits.values():
        assert set(st) == set(METHODS)
        assert all(0 <= st[k]["median"] <= st[k]["p90"] and np.isfinite(st[k]["mape"]) for k in st)
    assert "| lambda/lomo-1gpu |" in out.read_text()
    # the noise floor: Pollux measured some configurations more than once (node order aside)
    floor = json.loads(res.stdout)["noise_floor"]["pollux"]
    assert floor["rows"] == replicate_floor(pollux, "pollux").rows > 0 and 0 < floor["mape"] < 50
    assert sum(m["rows"] for m in floor["by_model"].values()) == floor["rows"]
    assert f"noise floor {floor['mape']:.1f}%)" in summary
    assert f"Noise floor (pollux): {floor['rows']} multi-GPU rows" in out.read_text()
    # the communication model against measured nccl-tests allreduces, one row per type and node count
    allreduce = json.loads(res.stdout)["allreduce"]
    rows, _ = measured_allreduce()
    assert sum(a["sizes"] for a in allreduce) == len(rows)
    assert all(a["catalog_mape"] >= 0 for a in allreduce) and "## Allreduce: nccl-tests on EC2" in out.read_text()
    # compute transfer across GPUs on Gavel's single-GPU rows, in the JSON and the report
    transfer = json.loads(res.stdout)["gpu_transfer"]
    assert set(transfer) == {"gavel", "lambda", "nvidia-dle"} and "## Compute transfer across GPUs" in out.read_text()
    for ds, t in transfer.items():
        assert t["transfers"] > 20
        assert f"| {ds} | all | {t['transfers']} | {t['srifty_mape']:.1f} (" in out.read_text()  # not in the README


def test_gpu_transfer_check_against_hand_arithmetic(tmp_path: Path) -> None:
    import csv
    import statistics

    from srifty.catalog import Catalog
    from srifty.validate import read_gavel, validate_gpu_transfer

    cat = Catalog.default()
    checks, notes = validate_gpu_transfer(cat)
    single, multi = read_gavel(ROOT / "data/traces/gavel_throughputs.csv")
    k80, v100 = cat.gpu_spec("K80"), cat.gpu_spec("V100")
    speed = {g: math.sqrt(s.fp32_tflops * s.memory_bandwidth_gbytes_per_s) for g, s in (("K80", k80), ("V100", v100))}
    # Gavel, ResNet-50 at batch 32: V100's step time predicted from K80's by the √(FLOPS × bandwidth) ratio
    c = next(c for c in checks if (c.dataset, c.group, c.source_gpu, c.target_gpu)
             == ("gavel", ("ResNet-50", "32"), "K80", "V100"))
    measured_step = 1000.0 / single[("ResNet-50", "32", "V100")]
    predicted_step = 1000.0 / single[("ResNet-50", "32", "K80")] * speed["K80"] / speed["V100"]
    assert c.ape("spec") == pytest.approx(abs(predicted_step / measured_step - 1) * 100)
    assert c.ape("fp32-flops") == pytest.approx(
        abs(single[("ResNet-50", "32", "V100")] / single[("ResNet-50", "32", "K80")]
            / (v100.fp32_tflops / k80.fp32_tflops) - 1) * 100)
    # every model and batch measured on both GPUs, both ways; P100 has no spec and is said to be left out
    both = {(m, b) for m, b, g in single if g == "K80"} & {(m, b) for m, b, g in single if g == "V100"}
    assert sum(c.dataset == "gavel" for c in checks) == 2 * len(both) and any("P100" in n for n in notes)
    # the multi-GPU rows faster per GPU than alone are counted in the note
    eff = [v / n / single[(m, b, g)] for (m, b, g, n), v in multi.items() if (m, b, g) in single]
    assert any(f"{sum(e > 1.05 for e in eff)} of {len(eff)}" in n for n in notes)
    # Lambda, v2 release, ResNet-50 AMP: H200 from H100 by √(FP16 tensor FLOPS × bandwidth), the
    # rates the medians over the systems each GPU was measured on
    with open(ROOT / "data/traces/lambda_compiled_single_gpu.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["model"] == "ResNet-50 v1.5" and r["precision"] == "FP16/AMP"
                and r["source"].endswith("v2)")]
    rate = {g: statistics.median(float(r["throughput_value"]) for r in rows if r["gpu_model"] == g)
            for g in ("H100-SXM5-80GB", "H200-SXM-140GB")}
    h100, h200 = cat.gpu_spec("H100"), cat.gpu_spec("H200")
    ratio = math.sqrt(h200.fp16_bf16_tensor_tflops_dense * h200.memory_bandwidth_gbytes_per_s
                      / (h100.fp16_bf16_tensor_tflops_dense * h100.memory_bandwidth_gbytes_per_s))
    c = next(c for c in checks if c.dataset == "lambda" and c.group[:3] == ("v2", "ResNet-50 v1.5", "amp")
             and (c.source_gpu, c.target_gpu) == ("H100", "H200"))
    assert c.measured_ratio == pytest.approx(rate["H200-SXM-140GB"] / rate["H100-SXM5-80GB"])
    assert c.ape("spec") == pytest.approx(abs(c.measured_ratio / ratio - 1) * 100)
    # GPUs of different benchmark releases are never compared (their software differs)
    assert all(c.group[0] in ("v0", "v1", "v2") for c in checks if c.dataset == "lambda")
    assert not any(c.dataset == "lambda" and {c.source_gpu, c.target_gpu} == {"V100-32GB", "H100"} for c in checks)
    # a trace with none of the GPUs srifty has specs for: no checks, and it says why
    path = tmp_path / "g.csv"
    with open(ROOT / "data/traces/gavel_throughputs.csv", newline="") as fh, open(path, "w", newline="") as out:
        rows = [r for r in csv.DictReader(fh) if r["gpu_model"] == "P100"]
        w = csv.DictWriter(out, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    none, why = validate_gpu_transfer(cat, path, tmp_path / "missing.csv", tmp_path / "missing.csv")
    assert none == [] and any("P100" in n for n in why) and any("missing.csv: not found" in n for n in why)


def test_validate_refuses_a_readme_without_the_table_markers_before_fitting(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# no markers here\n")
    res = run_srifty("validate", "--quick", "--readme", str(readme))
    assert res.returncode != 0 and "no generated accuracy summary" in res.stderr and "Traceback" not in res.stderr
    assert "holding out" not in res.stderr  # refused before any fold ran
    assert readme.read_text() == "# no markers here\n"


def test_allreduce_estimate_on_catalog_links_is_the_ring_formula() -> None:
    """One nccl-tests row by hand: 8 GPUs of one p4d, ring over NVSwitch at the catalog's rate."""
    from srifty.catalog import Catalog
    from srifty.features import hardware_of
    from srifty.comm import allreduce_us
    from srifty.features import AllreduceRow

    cat = Catalog.default()
    hw = hardware_of(cat, "p4d.24xlarge")
    nbytes = 1 << 30
    want_us = (2 * 7 / 8 * nbytes / (hw.intra.gbytes_per_s * 1e9) + 2 * 7 * hw.intra.latency_us * 1e-6) * 1e6
    assert allreduce_us(cat, [AllreduceRow("p4d.24xlarge", 1, 8, float(nbytes), 0.0)], None)[0] == \
        pytest.approx(want_us, rel=1e-9)
    # a fitted NVLink efficiency scales the NVSwitch link only; TCP/PCIe figures do not touch it
    from srifty.features import LinkScale

    half = allreduce_us(cat, [AllreduceRow("p4d.24xlarge", 1, 8, float(nbytes), 0.0)], LinkScale(
        fast_links=(("p4d.24xlarge", 0.5, 1.0),), intra_efficiency=0.01, inter_efficiency=0.01, latency_factor=10))[0]
    assert half == pytest.approx((want_us - 2 * 7 * hw.intra.latency_us) * 2 + 2 * 7 * hw.intra.latency_us, rel=1e-9)
    assert hw.intra_kind == "nvlink" and hw.inter_kind == "efa"
    g4 = hardware_of(cat, "g4dn.12xlarge")
    assert g4.intra_kind == "pcie" and g4.inter_kind == "tcp"


def _cli() -> Any:
    from srifty.cli import cli

    return cli


def test_a_damaged_shipped_model_is_not_overwritten(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                     model_file: Path) -> None:
    """The shipped model cannot be loaded (damaged): srifty trains into the cache, never into
    the installed package."""
    import shutil

    from srifty import model as m
    from srifty import oracle

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    bad = pkg / "latency-model.npz"
    bad.write_bytes(b"not a zip")
    shutil.copy(m.card_path(model_file), m.card_path(bad))
    monkeypatch.setattr(m, "SHIPPED_MODEL", bad)
    monkeypatch.setattr(m.persistence, "SHIPPED_MODEL", bad)  # what shipped_model() reads
    monkeypatch.setattr(m, "default_predictor", lambda quick=False: m.load(model_file))
    monkeypatch.delenv("SRIFTY_MODEL", raising=False)
    monkeypatch.setenv("SRIFTY_CATALOG_DIR", str(tmp_path / "cache"))
    assert oracle.default_model_path() == bad
    said: list[str] = []
    assert oracle.load_predictor(None, said.append) is not None
    assert bad.read_bytes() == b"not a zip" and (tmp_path / "cache" / oracle.CACHED_MODEL).exists()
    assert any("cannot be used" in s for s in said)


def test_a_gpu_without_a_stated_bandwidth_is_compared_on_the_same_basis() -> None:
    """T4g's spec states no memory bandwidth: it is imputed from its FLOPS by the median GB/s per
    TFLOPS of the other GPUs, so a T4g (8.14 TFLOPS) and a T4 (8.1) come out within 20%, not 6x apart."""
    import csv

    from srifty.catalog import Catalog
    from srifty.features import hardware_of, median_gbytes_per_tflop

    rows = [r for r in csv.DictReader((ROOT / "srifty/data/gpu_specs.csv").open())
            if r["memory_bandwidth_gbytes_per_s"] and r["fp32_tflops"]]
    ratios = sorted(float(r["memory_bandwidth_gbytes_per_s"]) / float(r["fp32_tflops"]) for r in rows)
    assert median_gbytes_per_tflop() == ratios[len(ratios) // 2]
    cat = Catalog.default()
    t4, t4g = hardware_of(cat, "g4dn.xlarge"), hardware_of(cat, "g5g.xlarge")
    assert 0.8 < t4g.speed_for("fp32") / t4.speed_for("fp32") < 1.25
    assert t4g.mem_gbytes_per_s == pytest.approx(8.14 * median_gbytes_per_tflop())
    assert any("imputed" in n for n in t4g.notes) and not any("imputed" in n for n in t4.notes)


def test_replicate_floor_against_hand_arithmetic() -> None:
    """Repeated measurements of one configuration (node order ignored) give the noise floor:
    each row's distance from the mean of the others, scaled by √((n−1)/n)."""
    from srifty.features import JobProfile, Run
    from srifty.validate import floor_sentence, replicate_floor

    t = "g4dn.12xlarge"
    runs = [Run(t, (1, 2), 32, 100.0), Run(t, (2, 1), 32, 110.0),  # one configuration, node order swapped
            Run(t, (2, 2), 32, 200.0), Run(t, (2, 2), 32, 190.0), Run(t, (2, 2), 32, 210.0),
            Run(t, (2, 2), 64, 300.0),  # another batch: measured once, not a replicate
            Run(t, (1,), 32, 50.0), Run(t, (1,), 32, 60.0)]  # single-worker rows: not what the splits test
    floor = replicate_floor([JobProfile("a", runs), JobProfile("b", [Run(t, (1, 1), 8, 10.0)])], "corpus")
    assert floor is not None and (floor.rows, floor.configurations) == (5, 2)
    pair = [10 * np.sqrt(1 / 2) / 100, 10 * np.sqrt(1 / 2) / 110]
    triple = [abs(200 - 200) / 200, abs(190 - 205) / 190, abs(210 - 195) / 210]
    triple = [e * np.sqrt(2 / 3) for e in triple]
    assert floor.mape == pytest.approx(np.mean(pair + triple) * 100)
    assert floor.by_model == (("a", pytest.approx(floor.mape), 5),)
    assert f"each lies on average {floor.mape:.1f}% from" in floor_sentence(floor)
    assert replicate_floor([JobProfile("b", [Run(t, (1, 1), 8, 10.0)])]) is None


def test_residual_trend_in_node_count_extrapolates_beyond_the_largest_cluster_seen() -> None:
    import pandas as pd

    from srifty.features import FEATURES
    from srifty.model import LatencyModel

    # the simulator misses by a law in log(nodes) (+8% per doubling) plus a bump at 3 nodes
    # that the trees must learn; training sees 1 to 4 nodes, the question is 16
    nodes = np.tile([1.0, 2.0, 3.0, 4.0], 40)
    X = pd.DataFrame(np.ones((len(nodes), len(FEATURES))), columns=FEATURES)
    X["emulated"], X["transferred"], X["sim_ms"], X["nodes"] = 0.0, 0.0, 100.0, nodes
    law = lambda n: 0.08 / np.log(2.0) * np.log(n)  # noqa: E731
    y = 100.0 * np.exp(law(nodes) + np.where(nodes == 3.0, 0.05, 0.0))
    lm = LatencyModel(max_iter=100, min_samples_leaf=5).fit(X, y)
    a, b = lm.parts_["real"].trend
    big = X.iloc[:2].copy()
    big["nodes"] = [16.0, 2.0]
    got = np.log(lm.predict(big) / 100.0)
    # the robust line follows the law (the bump at 3 nodes is a quarter of the rows: Huber
    # weighs it down); at 16 nodes the prediction carries the trend on, where trees alone stay
    # at the 4-node value (0.16)
    assert b == pytest.approx(0.08 / np.log(2.0), rel=0.15)
    assert got[0] == pytest.approx(law(16.0), abs=0.03) and got[0] > law(4.0) + 0.1
    assert got[1] == pytest.approx(law(2.0), abs=0.01)


def test_residual_trend_never_predicts_a_larger_cluster_faster_than_its_ring() -> None:
    import pandas as pd

    from srifty.features import FEATURES
    from srifty.model import LatencyModel

    # residuals that fall with the node count (2-node rows the slowest, as in the Pollux traces):
    # a line through them would put 16 nodes below anything seen; the trend stays flat instead
    nodes = np.tile([1.0, 2.0, 3.0, 4.0], 40)
    X = pd.DataFrame(np.ones((len(nodes), len(FEATURES))), columns=FEATURES)
    X["emulated"], X["transferred"], X["sim_ms"], X["nodes"] = 0.0, 0.0, 100.0, nodes
    r = np.select([nodes == 1.0, nodes == 2.0], [0.10, 0.30], 0.05)
    lm = LatencyModel(max_iter=100, min_samples_leaf=5).fit(X, 100.0 * np.exp(r))
    a, b = lm.parts_["real"].trend
    assert b == 0.0 and 0.05 <= a <= 0.10  # the residual's robust centre (the 3- and 4-node half of the rows)
    big = X.iloc[:1].copy()
    big["nodes"] = [16.0]
    assert np.log(lm.predict(big)[0] / 100.0) == pytest.approx(0.05, abs=0.01)  # the 4-node value, not below


def test_bucket_layout_without_a_profile_ends_in_a_half_cap_bucket() -> None:
    mib, cap = 2**20, simulate.DEFAULT_BUCKET_CAP_BYTES
    # 60 MiB: the 1 MiB first bucket, full buckets, and the last (first layers) at half the cap
    assert simulate.bucket_layout(60 * mib) == pytest.approx([mib, cap, 60 * mib - mib - cap - cap / 2, cap / 2])
    assert simulate.bucket_layout(8 * mib) == pytest.approx([mib, 7 * mib])  # less than half a cap left: all of it
    assert simulate.bucket_layout(0.5 * mib) == pytest.approx([0.5 * mib])
    for size in (3e6, 44.7e6, 102.2e6, 1.3e9):
        layout = simulate.bucket_layout(size)
        assert sum(layout) == pytest.approx(size) and max(layout) <= cap
        assert layout[-1] == pytest.approx(min(size - mib, cap / 2))


def test_accuracy_page_names_the_folds_and_the_pooled_splits_a_baseline_wins() -> None:
    from srifty.validate import METHODS, SplitResult, ValidationReport, render_markdown

    def fold(split: str, name: str, model: list[float], pollux: list[float]) -> SplitResult:
        errors = {m: np.array([50.0] * len(model)) for m in METHODS}
        errors["model"], errors["pollux"] = np.array(model), np.array(pollux)
        y = np.ones(len(model))
        return SplitResult(split, name, len(model), errors, y, {m: y for m in METHODS})

    report = ValidationReport()
    # split "a": the model wins both folds; split "b": it wins fold b1 narrowly and loses b2 by
    # more, so pooled over b1+b2 (model mean 12.0, pollux 11.0) pollux is better
    report.results += [fold("a", "a1", [5.0, 7.0], [9.0, 9.0]), fold("a", "a2", [4.0], [8.0]),
                       fold("b", "b1", [10.0, 10.0], [11.0, 11.0]), fold("b", "b2", [16.0], [11.0])]
    text = render_markdown(report, "srifty validate", ["c"], None)
    assert "does **not** beat every baseline on: b/b2." in text
    assert "Pooled over its folds, a baseline is better on: b (pollux 11.0% against the model's 12.0%)." in text
    report.results = report.results[:2]
    text = render_markdown(report, "srifty validate", ["c"], None)
    assert "beats every baseline on every fold" in text and "beats every baseline on every split" in text


def test_accuracy_page_splits_the_stated_gradient_rows_by_node_count() -> None:
    from srifty.validate import METHODS, SplitResult, ValidationReport, render_markdown

    def fold(name: str, model: list[float], known: list[bool], nodes: list[int]) -> SplitResult:
        errors = {m: np.array([50.0] * len(model)) for m in METHODS}
        errors["model"] = np.array(model)
        y = np.ones(len(model))
        return SplitResult("s", name, len(model), errors, y, {m: y for m in METHODS}, np.array(known),
                           None, np.array(nodes, dtype=float))

    report = ValidationReport()
    # stated rows: 20 and 10 on one node, 4, 6 and 8 on several; the unstated 90 counts in neither
    report.results += [fold("f1", [20.0, 4.0, 90.0], [True, True, False], [1, 2, 4]),
                       fold("f2", [10.0, 6.0, 8.0], [True, True, True], [1, 8, 16])]
    assert report.pooled_grad_known()["s"] == (pytest.approx(48 / 5), 5)
    (one, n_one), (many, n_many) = report.grad_known_by_nodes()["s"]
    assert (one, n_one, many, n_many) == (pytest.approx(15.0), 2, pytest.approx(6.0), 3)
    text = render_markdown(report, "srifty validate", ["c"], None)
    assert "the model's MAPE is 9.6% (15.0% over the 2 rows on one node, 6.0% over the 3 on several)." in text


def test_a_type_s_network_fitted_on_one_model_predicts_another_better_than_the_prior() -> None:
    """The network of g4dn.12xlarge fitted on cifar10's trace alone (CommModel: the type's TCP figure,
    the PCIe share of a ring across nodes, the latency factor), against the prior of documented
    facts (PCIe line rate, the instance's rate, NCCL's flows at AWS's per-flow limit), on the
    multi-node rows of every other Pollux model on that type: the simulator alone."""
    import numpy as np

    from srifty.catalog import Catalog
    from srifty.features import LinkScale, load_corpus
    from srifty.comm import CommModel, simulated_ms

    cat = Catalog.default()
    jobs = {j.model: j for j in load_corpus([str(ROOT / "profiles" / "pollux")])}
    fitted = CommModel(max_rows=200).fit([jobs["cifar10"]], cat).link_scale_
    (itype, gbps), = fitted.tcp_links
    assert itype == "g4dn.12xlarge" and 0 < gbps < 50 * 0.96
    prior = LinkScale()  # documented figures only: PCIe line rates, the instance's rate, NCCL's flows
    for name in ("imagenet", "deepspeech2", "ncf"):
        pairs = [(jobs[name], r) for r in jobs[name].runs if r.nodes >= 2]
        y = np.array([r.step_ms for _, r in pairs])
        err_fit = np.mean(np.abs(simulated_ms(pairs, cat, fitted) / y - 1))
        err_prior = np.mean(np.abs(simulated_ms(pairs, cat, prior) / y - 1))
        assert err_fit < err_prior, (name, err_fit, err_prior)


def test_a_type_s_network_is_measured_at_each_node_count_its_runs_cover() -> None:
    """g4dn.12xlarge's network fitted on the traces of cifar10 and imagenet: every model's rings
    across two nodes of it ran slower than its figure fitted over all node counts (ncf's 2-node
    allreduce took 28.7 ms against 18.5 across three, docs/latency-model.md section 3), so the fit
    keeps a share for two nodes, and with it the simulator predicts the 2-node runs of the two
    models it never saw closer; rings over other node counts or a mix of types keep the figure."""
    from dataclasses import replace

    from srifty.catalog import Catalog
    from srifty.comm import MIN_NODE_COUNT_RUNS, CommModel, simulated_ms
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder, load_corpus
    from srifty.features.notes import node_share_note

    cat = Catalog.default()
    jobs = {j.model: j for j in load_corpus([str(ROOT / "profiles" / "pollux")])}
    train = [jobs["cifar10"], jobs["imagenet"]]
    assert sum(1 for j in train for r in j.runs if r.nodes == 2) >= MIN_NODE_COUNT_RUNS
    fitted = CommModel(max_rows=200).fit(train, cat).link_scale_
    share = fitted.tcp_node_share(["g4dn.12xlarge"], 2)
    assert share < 1.0
    assert [n for t, n, _ in fitted.tcp_node_shares] == [2]
    assert fitted.tcp_node_share(["g4dn.12xlarge"], 3) == 1.0
    assert fitted.tcp_node_share(["g4dn.12xlarge", "g5.12xlarge"], 2) == 1.0
    without = replace(fitted, tcp_node_shares=())
    for name in ("deepspeech2", "ncf"):
        pairs = [(jobs[name], r) for r in jobs[name].runs if r.nodes == 2]
        y = np.array([r.step_ms for _, r in pairs])
        with_share, plain = simulated_ms(pairs, cat, fitted), simulated_ms(pairs, cat, without)
        assert np.all(with_share >= plain)  # a slower network never makes a step faster
        err_share, err_plain = (float(np.median(np.abs(np.log(s / y)))) for s in (with_share, plain))
        assert err_share < err_plain, (name, err_share, err_plain)
        three = [(jobs[name], r) for r in jobs[name].runs if r.nodes == 3]
        assert np.array_equal(simulated_ms(three, cat, fitted), simulated_ms(three, cat, without))
    # a prediction says so where the share applies, and nowhere else
    builder = FeatureBuilder(jobs["ncf"], cat, fitted)
    two, three = (builder.estimate(parse_config(f"{n}xg4dn.12xlarge:4").resolved(cat), 64.0).notes for n in (2, 3))
    assert [n for n in two if "network across 2 nodes" in n] == [node_share_note("g4dn.12xlarge", 2, share)]
    assert not [n for n in three if "network across" in n]


def test_overlap_is_read_off_sync_times_where_backward_does_not_hide_the_allreduce() -> None:
    """deepspeech2's single-node runs, as a trace imported without its multi-node rows (no ready
    times), with the g4dn.12xlarge links fitted on cifar10's trace: the default overlap misses its
    measured sync times by more than x2, the window read off them predicts its runs across nodes
    better than the default, and the models whose sync times the default explains keep it (the
    simulator alone)."""
    from dataclasses import replace

    import numpy as np

    from srifty import simulate
    from srifty.catalog import Catalog
    from srifty.comm import CommModel, simulated_ms
    from srifty.features import (FeatureBuilder, derived_sync, fit_overlap, load_corpus, run_config, sync_error,
                                 with_fitted_overlap)
    from srifty.features.notes import overlap_fitted_note

    cat = Catalog.default()
    jobs = {j.model: j for j in load_corpus([str(POLLUX)])}
    scale = CommModel(max_rows=200).fit([jobs["cifar10"]], cat).link_scale_
    one_node = jobs["deepspeech2"].restricted(lambda r: r.nodes == 1)
    read = with_fitted_overlap(one_node, cat, scale)
    fit = read.overlap_fit
    assert fit is not None and fit.runs == sum(1 for r in one_node.runs if r.world_size > 1)
    assert fit.default_error == sync_error(one_node, cat, scale, simulate.DEFAULT_BACKWARD_FRACTION) > math.log(2)
    assert fit.error == sync_error(one_node, cat, scale, fit.window) < fit.default_error / 2
    assert read.backward_fraction == fit.window < simulate.DEFAULT_BACKWARD_FRACTION
    across = [r for r in jobs["deepspeech2"].runs if r.nodes >= 2]
    y = np.array([r.step_ms for r in across])

    def error(job: Any) -> float:
        return float(np.median(np.abs(np.log(simulated_ms([(job, r) for r in across], cat, scale) / y))))

    assert error(read) < error(one_node) / 2, (error(read), error(one_node))
    est = FeatureBuilder(read, cat, scale).estimate(run_config(across[0]), across[0].local_batch_size)
    assert overlap_fitted_note(read) in est.notes
    for name in ("cifar10", "imagenet", "ncf"):  # the others keep the default, read and said so
        view = jobs[name].restricted(lambda r: r.nodes == 1)
        kept = with_fitted_overlap(view, cat, scale)
        assert kept == view and kept.overlap_fit is None and kept.overlap_check == fit_overlap(view, cat, scale), name
    assert fit_overlap(replace(one_node, ready_fractions=[1.0]), cat, scale) is None  # recorded: never refitted
    assert fit_overlap(jobs["deepspeech2"].restricted(lambda r: r.world_size == 1), cat, scale) is None
    # a trace of step times only: each multi-GPU run's sync time is its step less the one-GPU step
    # at its batch (interpolated between measured batches), none outside the one-GPU batches
    steps_only = replace(one_node, runs=[replace(r, sync_ms=None) if r.world_size > 1 else r for r in one_node.runs])
    single = {r.local_batch_size: r.step_ms for r in one_node.runs if r.world_size == 1}
    derived = derived_sync(steps_only)
    multi = [i for i, r in enumerate(steps_only.runs) if r.world_size > 1]
    assert sorted(derived) == [i for i in multi if min(single) <= steps_only.runs[i].local_batch_size <= max(single)]
    at_measured = [(steps_only.runs[i], ms) for i, ms in derived.items()
                   if steps_only.runs[i].local_batch_size in single]
    assert at_measured and all(ms == pytest.approx(max(r.step_ms - single[r.local_batch_size], 0.0))
                               for r, ms in at_measured)
    assert derived_sync(one_node) == {}  # stated sync times are never replaced
    assert fit_overlap(steps_only, cat, scale).applies


def test_tcp_network_prior_follows_the_documented_limits() -> None:
    from srifty.catalog import Catalog
    from srifty.features import FLOW_GBPS, FRAME_GOODPUT, NCCL_AWS_FLOWS, LinkScale, hardware_of

    cat = Catalog.default()
    small, big = hardware_of(cat, "g5.xlarge"), hardware_of(cat, "g5.12xlarge")
    # nothing measured: the instance's rate (frame goodput) or NCCL's 16 flows at 5 Gbit/s each
    assert LinkScale().tcp_gbps(small) == pytest.approx(2.5 * FRAME_GOODPUT)
    assert LinkScale().tcp_gbps(big) == pytest.approx(min(40 * FRAME_GOODPUT, NCCL_AWS_FLOWS * FLOW_GBPS))
    # one type measured at 8 Gbit/s: its flows stand for every unmeasured type, capped by each rate
    measured = LinkScale(tcp_links=(("g4dn.12xlarge", 8.0),))
    assert measured.tcp_gbps(big) == 8.0 and measured.tcp_gbps(small) == pytest.approx(2.5 * FRAME_GOODPUT)
    assert measured.network_measured(hardware_of(cat, "g4dn.12xlarge")) and not measured.network_measured(big)
    # a cluster placement group doubles what a flow carries (10 Gbit/s, not 5)
    assert replace_pg(measured).tcp_gbps(big) == 16.0


def test_an_efa_network_nobody_measured_may_be_as_slow_as_tcp() -> None:
    """An EFA type without nccl-tests rows is priced at the catalog's EFA rate, but NCCL without
    the EFA plugin runs over sockets: the slow end of its prior is the TCP prior, and a row across
    its nodes has an interval that reaches the step on it and says why; an EFA type measured by
    nccl-tests keeps its fitted figure, with none of that spread."""
    from srifty.catalog import Catalog
    from srifty.features import PRIOR_NETWORK_SPREAD, LinkScale, hardware_of

    cat = Catalog.default()
    scale = LinkScale(tcp_links=(("g4dn.12xlarge", 6.3),), fast_links=(("p4d.24xlarge", 0.25, 0.5),))
    metal = scale.apply(hardware_of(cat, "g4dn.metal"))
    assert metal.inter_kind == "efa" and metal.inter.gbytes_per_s == pytest.approx(100 / 8)
    assert scale.prior_inter(metal).gbytes_per_s == pytest.approx(6.3 / 8)  # the measured flows, not 100/2
    tcp = scale.apply(hardware_of(cat, "g5.12xlarge"))
    assert scale.prior_inter(tcp).gbytes_per_s == pytest.approx(tcp.inter.gbytes_per_s / PRIOR_NETWORK_SPREAD)
    p4d = scale.apply(hardware_of(cat, "p4d.24xlarge"))
    assert scale.network_measured(p4d) and not scale.network_measured(metal)
    rows = {}
    for config in ("2xg4dn.metal:8", "2xg4dn.12xlarge:4"):
        res = _run("predict", "--profile", str(ROOT / "profiles" / "pollux" / "imagenet"), "--config", config,
                   "-b", "32", "--json")
        assert res.returncode == 0, res.stderr
        rows[config] = json.loads(res.stdout)
    metal_row, measured = rows["2xg4dn.metal:8"], rows["2xg4dn.12xlarge:4"]
    (note,) = [w for w in metal_row["warnings"] if "never measured" in w]
    assert "the catalog's EFA rate" in note and "down to TCP" in note and "per-flow" not in note
    assert "measures only that TCP fallback, the interval's slow end" in note  # no sweep measures EFA
    assert "`srifty import-nccl`, measures the EFA network" in note  # nccl-tests on the user's nodes does
    # the interval reaches the step over TCP at the measured type's flows, as the note says
    slow = float(re.search(r"to x([0-9.]+) of the step", note).group(1))
    from srifty import model as m
    from srifty.configspec import parse_config
    from srifty.features import load_corpus

    builder = m.load(m.shipped_model()).builder(load_corpus([str(ROOT / "profiles" / "pollux" / "imagenet")])[0], cat)
    config = parse_config("2xg4dn.metal:8").resolved(cat)
    layout = builder.workers(config, 32)
    over_tcp = (builder.simulated(config, layout, builder.link_scale.prior_inter(builder.hardware("g4dn.metal")))
                .iteration_ms / builder.simulated(config, layout, layout.inter).iteration_ms)
    assert slow == pytest.approx(over_tcp, abs=6e-3) and slow > 1.2
    assert metal_row["interval_ms"][1] >= metal_row["iteration_ms"] * slow * (1 - 5e-3)
    # the measured type's PCIe share is fitted: no note that its line rate was taken
    assert not any("line rate" in w for w in measured["warnings"])
    assert any("PCIe Gen3 x16 line rate" in w for w in metal_row["warnings"])


def test_an_intra_node_link_no_source_states_spans_the_interval() -> None:
    """g5.12xlarge's catalog row says 'PCIe', without a generation or a rate: a ring within one
    node of it takes the 10 GB/s prior, and the step's bounds reach the step at half that rate and
    with a link that never holds the ring back, as the row's note says. A type whose link is
    stated (g4dn.12xlarge, PCIe Gen3) has none of that spread, and neither has a ring across
    one-GPU nodes, which the network holds back long before the unstated link would."""
    from dataclasses import replace

    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder, JobProfile, Run, hardware_of

    cat = Catalog.default()
    job = JobProfile("m", [Run("g4dn.12xlarge", (1,), 64, 40.0)], param_count=25_000_000)
    assert not hardware_of(cat, "g5.12xlarge").intra_stated and hardware_of(cat, "g4dn.12xlarge").intra_stated

    def estimate(config: str, stated: bool = False) -> Any:
        fb = FeatureBuilder(job, cat)
        if stated:  # the same figure, as if a source stated it
            fb._hw["g5.12xlarge"] = replace(fb.hardware("g5.12xlarge"), intra_stated=True)
        return fb.estimate(parse_config(config).resolved(cat), 64)

    unstated, stated = estimate("1xg5.12xlarge"), estimate("1xg5.12xlarge", stated=True)
    (note,) = [n for n in unstated.notes if "states the intra-node link" in n]
    assert note.startswith("g5.12xlarge: ") and "as PCIe at 10 GB/s" in note
    assert not any("states the intra-node link" in n for n in stated.notes)
    low, high = (float(x) for x in re.search(r"spans x([0-9.]+) to x([0-9.]+) of the step", note).groups())
    assert unstated.sim_ms == stated.sim_ms and low < 0.9 and high > 1.1
    fb = FeatureBuilder(job, cat)
    config = parse_config("1xg5.12xlarge").resolved(cat)
    layout = fb.workers(config, 64)

    def step_at(gbytes_per_s: float) -> float:
        return fb.simulated(config, replace(layout, intra=Link(gbytes_per_s, layout.intra.latency_us)),
                            layout.inter).iteration_ms / unstated.sim_ms

    assert (low, high) == (pytest.approx(step_at(1e6), abs=5e-3), pytest.approx(step_at(layout.intra.gbytes_per_s / 2),
                                                                                abs=5e-3))
    assert unstated.step_bounds[0] == pytest.approx(stated.step_bounds[0] * step_at(1e6))
    assert unstated.step_bounds[1] == pytest.approx(stated.step_bounds[1] * step_at(layout.intra.gbytes_per_s / 2))
    for config in ("1xg4dn.12xlarge", "2xg5.xlarge"):
        assert not any("states the intra-node link" in n for n in estimate(config).notes)


def test_a_ring_across_nodes_is_no_faster_inside_a_node_than_a_ring_on_one() -> None:
    """Across nodes of a type whose network nobody measured, PCIe is taken at its line rate, but
    within one node at the efficiency fitted on single-node rings: the hops between the GPUs of a
    node are never faster in a ring across two nodes than in a ring on one, so two nodes of eight
    GPUs never allreduce faster than one (before, `srifty predict` of profiles/pollux/imagenet at
    batch 32 exposed 7 ms of communication on two g5.48xlarge and 141 ms on one). One GPU per node
    has no such hop; the measured g4dn.12xlarge keeps its fitted figure across nodes."""
    from srifty import model as m
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty.features import JobProfile, Run

    cat = Catalog.default()
    job = JobProfile("m", [Run("g4dn.12xlarge", (1,), 64, 200.0)], param_count=25_000_000)
    builder = m.load(m.shipped_model()).builder(job, cat)
    assert builder.link_scale.node_intra_efficiency is not None
    for t in ("g4dn.metal", "g5.48xlarge", "g5.12xlarge"):
        configs = [parse_config(f"{n}x{t}").resolved(cat) for n in (1, 2)]
        one, two = (builder.workers(c, 64) for c in configs)
        assert two.intra.gbytes_per_s == pytest.approx(builder.node_intra(t).gbytes_per_s) == one.intra.gbytes_per_s
        assert builder.hardware(t).intra.gbytes_per_s > 5 * two.intra.gbytes_per_s  # the line rate it was
        alone, across = (np.expm1(builder.estimate(c, 64).features["log_allreduce_ms"]) for c in configs)
        assert across >= alone
    single = builder.workers(parse_config("2xg5.xlarge").resolved(cat), 64)
    assert single.intra.gbytes_per_s == builder.hardware("g5.xlarge").intra.gbytes_per_s
    measured = builder.workers(parse_config("2xg4dn.12xlarge").resolved(cat), 64)
    assert measured.intra.gbytes_per_s == builder.hardware("g4dn.12xlarge").intra.gbytes_per_s
    assert measured.intra.gbytes_per_s < builder.node_intra("g4dn.12xlarge").gbytes_per_s
    # in a mix, g5.12xlarge's unstated link spans the interval only where it is the ring's slowest:
    # beside NVLink nodes it is, beside the measured g4dn.12xlarge (fitted lower) it is not
    for mix, told in (("1xg5.12xlarge+1xp3.16xlarge", True), ("1xg5.12xlarge+1xg4dn.12xlarge", False)):
        notes = builder.estimate(parse_config(mix).resolved(cat), 64).notes
        assert any(n.startswith("g5.12xlarge: no source srifty ships states the intra-node link") for n in notes) is told


def replace_pg(scale):
    from dataclasses import replace

    return replace(scale, placement_group=True)


SWEEP_BYTES = (1 << 20, 4 << 20, 16 << 20, 64 << 20)  # the message sizes of _ec2_sweep's allreduces


def _ec2_sweep(tmp_path: Path, itype: str, per_node: int, truth: Any, network: dict[str, Any] | None) -> Path:
    """A collectives profile of the EC2 backend across 2 nodes of ``itype``, its times what
    ``truth`` (a LinkScale) gives as the nodes sat (``network``: the profile's network block)."""
    from dataclasses import replace

    from srifty.catalog import Catalog
    from srifty.comm import allreduce_us
    from srifty.features import AllreduceRow

    cat = Catalog.default()
    doc = json.loads((ROOT / "profiles" / "local" / "collectives.json").read_text())
    doc["cluster"].update(launcher="ec2", world_size=2 * per_node, nodes=2, workers_per_node=[per_node] * 2,
                          instance_types=[itype])
    doc["cluster"].pop("network", None)
    if network is not None:
        doc["cluster"]["network"] = network
    for h in doc["cluster"]["hosts"]:
        h["instance_type"] = itype
    as_sat = replace(truth, placement_group=bool((network or {}).get("placement_group")))
    tcp = (network or {}).get("transport") == "tcp"  # an EFA type's sweep over TCP: its fallback
    doc["collectives"] = [{**doc["collectives"][0], "world_size": 2 * per_node, "nodes": 2,
                           "workers_per_node": [per_node] * 2, "bytes": b,
                           "median_ms": float(allreduce_us(cat, [AllreduceRow(itype, 2, per_node, b, 0, over_tcp=tcp)],
                                                           as_sat)[0]) / 1e3}
                          for b in SWEEP_BYTES]
    out = tmp_path / f"{itype}.json"
    out.write_text(json.dumps(doc))
    return out


def test_a_type_s_network_is_fitted_from_its_measured_allreduces(tmp_path) -> None:
    """An EC2 allreduce sweep across 2 nodes of g5.12xlarge whose times are what a 20 Gbit/s
    network gives: load_allreduce_rows reads it, fit_tcp_allreduce recovers the rate (to the
    grid's 12% steps), and a model trained with it calls that type's network measured."""
    from srifty.catalog import Catalog
    from srifty.features import LinkScale, hardware_of, load_allreduce_rows
    from srifty.comm import fit_tcp_allreduce

    cat = Catalog.default()
    truth = LinkScale(tcp_links=(("g5.12xlarge", 20.0),))
    _ec2_sweep(tmp_path, "g5.12xlarge", 4, truth, None)
    rows = load_allreduce_rows([tmp_path])
    assert [(r.instance_type, r.nodes, r.gpus_per_node, r.nbytes) for r in rows] == \
        [("g5.12xlarge", 2, 4, float(b)) for b in SWEEP_BYTES]
    ((itype, gbps),) = fit_tcp_allreduce(cat, rows, LinkScale())
    assert itype == "g5.12xlarge" and abs(gbps / 20.0 - 1) < 0.06
    assert LinkScale(tcp_links=((itype, gbps),)).network_measured(hardware_of(cat, "g5.12xlarge"))


def test_a_sweep_in_a_placement_group_fits_the_flows_outside_one(tmp_path) -> None:
    """The EC2 backend records whether its nodes sat in a cluster placement group, where AWS lets
    each TCP flow run at twice the rate: a sweep there of a 10 Gbit/s network (20 in the group) is
    fitted as 10, so a prediction outside a group takes 10 and one inside 20, as measured. A sweep
    whose profile does not say (recorded before it did) counts as outside one, over TCP."""
    from srifty.catalog import Catalog
    from srifty.comm import fit_tcp_allreduce
    from srifty.features import LinkScale, load_allreduce_rows

    cat = Catalog.default()
    truth = LinkScale(tcp_links=(("g5.12xlarge", 10.0),))
    _ec2_sweep(tmp_path, "g5.12xlarge", 4, truth, {"transport": "tcp", "placement_group": True})
    rows = load_allreduce_rows([tmp_path])
    assert rows and all(r.over_tcp and r.placement_group for r in rows)
    ((itype, gbps),) = fit_tcp_allreduce(cat, rows, LinkScale())
    assert itype == "g5.12xlarge" and abs(gbps / 10.0 - 1) < 0.06
    old = tmp_path / "old"
    old.mkdir()
    _ec2_sweep(old, "g5.12xlarge", 4, truth, None)
    assert all(r.over_tcp and not r.placement_group for r in load_allreduce_rows([old]))


def test_an_efa_type_s_sweep_over_tcp_sets_only_the_slow_end_of_its_interval(tmp_path) -> None:
    """srifty's EC2 backend attaches no EFA interface, so its sweep across two g4dn.metal nodes
    measures TCP: the EFA efficiency is not fitted on it (as the same rows over EFA would be, at
    the grid's floor), the type's network stays a prior, and `srifty fit` says why. What it
    measures, the TCP fallback, is fitted (fit_tcp_fallback recovers the rate the sweep was made
    at), kept by the model (LinkScale.tcp_fallback), and a prediction across g4dn.metal nodes
    reaches down to it: further than with the TCP prior of 16 flows at 5 Gbit/s."""
    from dataclasses import replace

    from srifty import model as m
    from srifty.catalog import Catalog
    from srifty.comm import TCP_ON_EFA_NOTE, fit_fast_links, fit_tcp_fallback, tcp_on_efa
    from srifty.configspec import parse_config
    from srifty.features import LinkScale, hardware_of, load_allreduce_rows, load_corpus

    cat = Catalog.default()
    # about what the TCP fallback gives: the Pollux trace's g4dn.12xlarge flows carry 6.3 Gbit/s of 100
    tcp = LinkScale(tcp_fallback=(("g4dn.metal", 6.3),))
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    _ec2_sweep(sweep, "g4dn.metal", 8, tcp, {"transport": "tcp", "placement_group": False})
    rows = load_allreduce_rows([sweep])
    assert rows and all(r.over_tcp for r in rows)
    assert fit_fast_links(cat, rows) == () and tcp_on_efa(cat, rows) == ["g4dn.metal"]
    over_efa = [replace(r, over_tcp=False) for r in rows]
    ((itype, _, efa),) = fit_fast_links(cat, over_efa)
    assert itype == "g4dn.metal" and efa == 0.1 and tcp_on_efa(cat, over_efa) == []
    assert not LinkScale(fast_links=fit_fast_links(cat, rows)).network_measured(hardware_of(cat, "g4dn.metal"))
    ((itype, gbps),) = fit_tcp_fallback(cat, rows, LinkScale())
    assert itype == "g4dn.metal" and gbps == pytest.approx(6.3, rel=0.1)
    res = _run("fit", str(sweep), str(ROOT / "profiles" / "emulated" / "mlp_recsys"), "--quick", "--out",
               str(tmp_path / "m.npz"))
    assert res.returncode == 0, res.stderr
    assert TCP_ON_EFA_NOTE.format(itype="g4dn.metal") in res.stderr
    fitted = m.load(str(tmp_path / "m.npz"))
    scale = fitted.link_scale
    assert dict(scale.tcp_fallback)["g4dn.metal"] == pytest.approx(gbps)
    metal = scale.apply(hardware_of(cat, "g4dn.metal"))
    assert not scale.network_measured(metal)
    assert scale.prior_inter(metal).gbytes_per_s == pytest.approx(gbps / 8)  # not the 80 Gbit/s TCP prior
    job = load_corpus([str(ROOT / "profiles" / "pollux" / "imagenet")])[0]
    config = parse_config("2xg4dn.metal:8").resolved(cat)
    prior = m.Predictor(fitted.latency, replace(scale, tcp_fallback=()), fitted.meta)
    highs = [p.predict(job, cat, [(config, 32)])[0].interval_ms[1] for p in (prior, fitted)]
    assert highs[1] > highs[0]  # a fallback slower than the prior reaches further


def test_placement_group_speeds_a_flow_limited_network_in_predict() -> None:
    outs = []
    for flag in ([], ["--placement-group"]):
        res = _run("predict", "--profile", str(ROOT / "profiles" / "pollux" / "imagenet"), "--config", "2xg5.12xlarge",
                   "-b", "200", "--json", *flag)
        assert res.returncode == 0, res.stderr
        outs.append(json.loads(res.stdout)["parts"])
    plain, grouped = outs
    assert grouped["compute_ms"] == plain["compute_ms"] and plain["network_source"] == "prior"
    assert grouped["communication_ms"] < plain["communication_ms"]


def _run(*args: str):
    from conftest import run_srifty

    return run_srifty(*args)


def test_each_model_s_network_regime_is_its_median_share_beyond_compute() -> None:
    import numpy as np

    from srifty.features import load_corpus
    from srifty.model import catalog_for_jobs, table_for
    from srifty.validate import REGIMES, model_regimes

    jobs = load_corpus([str(ROOT / "profiles" / "pollux")])
    cat = catalog_for_jobs(jobs)
    got = model_regimes(jobs, cat)
    assert set(got) == {j.model for j in jobs}
    for j in jobs:
        t = table_for([j], cat, None, keep=lambda job, r: r.nodes >= 2)
        share = float(np.median(np.clip(1 - t.X["compute_ms"].to_numpy(dtype=float) / t.y_ms, 0, 1)))
        assert got[j.model] == next(label for label, hi in REGIMES if share < hi).split(" (")[0]
    assert len(set(got.values())) >= 2  # the corpus has a regime to leave out (ACCURACY.md, pollux/loro)


def _h200_with_operator_count(example: str, batch: int, tmp_path: Path) -> Any:
    """profiles/h200's profile of ``example`` at ``batch`` with the operator count the profiler
    now records, taken from the CPU profile of the same example and batch (the count does not
    depend on the device; the H200 profiles predate it), loaded as a job."""
    from srifty.features import load_job

    doc = json.loads((ROOT / "profiles" / "h200" / example / f"b{batch}.json").read_text())
    cpu = json.loads((ROOT / "profiles" / "cpu" / example / f"b{batch}.json").read_text())
    doc["job"]["operators"] = cpu["job"]["operators"]
    (tmp_path / example).mkdir()
    (tmp_path / example / f"b{batch}.json").write_text(json.dumps(doc))
    return load_job(tmp_path / example)


def test_a_gpu_profile_with_operator_counts_is_carried_to_other_batches_by_the_operator_model(
        tmp_path: Path) -> None:
    """profiles/h200 at the smallest batch, given the operator count the profiler records (taken
    here from the CPU profile of the same example and batch: the count does not depend on the
    device), predicts the larger batches measured on the H200 far better than proportion."""
    import statistics

    from srifty import model as m
    from srifty.features import FeatureBuilder, load_job

    errors, proportional = [], []
    for example, small, larger in (("cnn_resnet", 32, (128, 512)), ("transformer_lm", 8, (32, 128)),
                                   ("mlp_recsys", 256, (1024, 4096))):
        job = _h200_with_operator_count(example, small, tmp_path)
        curve = FeatureBuilder(job, m.catalog_for_jobs([job])).curve("p5en.48xlarge")
        plain = load_job(ROOT / "profiles" / "h200" / example / f"b{small}.json")
        assert curve.shape is not None and curve.at(small) == plain.compute_curve("p5en.48xlarge").at(small)
        for large in larger:
            measured = load_job(ROOT / "profiles" / "h200" / example / f"b{large}.json").compute_curve(
                "p5en.48xlarge").at(large)
            errors.append(abs(curve.at(large) / measured - 1))
            proportional.append(abs(plain.compute_curve("p5en.48xlarge").at(large) / measured - 1))
            low, high = curve.bounds(large)
            assert low <= curve.at(large) <= high
    assert statistics.median(errors) < 0.25 < 1.0 < statistics.median(proportional)
    assert sum(e < p for e, p in zip(errors, proportional)) == len(errors)


def test_a_gpu_profile_with_operator_counts_keeps_its_launches_on_another_gpu(tmp_path: Path) -> None:
    """profiles/h200 given the operator count the profiler records (from the CPU profile of the
    same example and batch, as above): carried to the A100 of a p4d, the operator model's launches
    and host work stay as they are and only the rest goes by the speed ratio; a launch-bound CNN then
    barely changes, a transformer near its peak goes most of the way, and both stay within the
    interval's ends (only the arithmetic carried, the whole step carried)."""
    from srifty import model as m
    from srifty.features import FeatureBuilder, load_job

    moved = {}
    for example, batch in (("cnn_resnet", 128), ("transformer_lm", 128)):
        job = _h200_with_operator_count(example, batch, tmp_path)
        fb = FeatureBuilder(job, m.catalog_for_jobs([job]))
        plain = FeatureBuilder(load_job(ROOT / "profiles" / "h200" / example), m.catalog_for_jobs([job]))
        profiled = fb.curve("p5en.48xlarge").at(batch)
        whole, _, _ = plain.compute_ms("p4d.24xlarge", batch)  # no operator count: all by the ratio
        split, transferred, note = fb.compute_ms("p4d.24xlarge", batch)
        kept = fb.kept_share("p5en.48xlarge", batch)
        assert plain.kept_share("p5en.48xlarge", batch) == 0.0 and transferred
        # the operator model's fixed costs over its compute on the H200, at most all but the arithmetic at peak
        h200 = fb.hardware("p5en.48xlarge")
        terms = job.operator_terms(batch, h200.peak_tflops(job.precision), h200.mem_gbytes_per_s)
        sm = fb.step_model
        fixed = (sm.host_ms + sm.launch_us * terms.compute_kernels / 1e3) / sm.split_ms(terms)[0]
        post_fixed = (sm.launch_us * terms.post_kernels / 1e3 + sm.host_factor * terms.host_input_ms) / \
            sm.split_ms(terms)[1]
        assert fb.kept_share("p5en.48xlarge", batch, "post") == pytest.approx(post_fixed)
        post, whole_post = fb.post_ms("p4d.24xlarge", batch), plain.post_ms("p4d.24xlarge", batch)
        own_post = fb.post_ms("p5en.48xlarge", batch)
        assert post == pytest.approx(own_post * (post_fixed + (1 - post_fixed) * whole_post / own_post))
        assert kept == pytest.approx(min(fixed, 1 - fb.peak_share("p5en.48xlarge", batch)))
        assert split == pytest.approx(profiled * (kept + (1 - kept) * whole / profiled))
        assert f"the operator model puts {kept:.0%} of the profiled compute in kernel launches" in note
        low, high = fb.transfer_bounds("p4d.24xlarge", batch)
        least = profiled * (1 - fb.peak_share("p5en.48xlarge", batch) * (1 - whole / profiled))
        assert (low * split, high * split) == pytest.approx((least, whole))
        assert least <= split <= whole
        moved[example] = (split / profiled, whole / profiled)
        if example == "cnn_resnet":
            # an operator count without a FLOP count: the arithmetic could be none of the step
            job.forward_flops_per_sample = None
            blind = FeatureBuilder(job, m.catalog_for_jobs([job]))
            assert blind.peak_share("p5en.48xlarge", batch) is None
            centre = blind.compute_ms("p4d.24xlarge", batch)[0]
            assert blind.transfer_bounds("p4d.24xlarge", batch) == pytest.approx((profiled / centre, whole / centre))
    (cnn, cnn_whole), (lm, lm_whole) = moved["cnn_resnet"], moved["transformer_lm"]
    assert cnn < 1.2 < 2 < cnn_whole  # launch-bound: nearly unchanged where the ratio says over 2x
    assert lm - 1 > (cnn - 1) * 3 and lm < lm_whole  # near its peak: carried much further


def test_accuracy_page_holds_each_fold_s_regimes_to_the_targets() -> None:
    """Every fold by regime (the measured share beyond compute): rows, MAPE, signed median error,
    coverage, and whether the cell meets the MAPE target (at most 10%, in cells of at least 20 rows),
    computed from the rows; the page lists the cells of 20 rows or more, and names each split's
    regimes whose coverage lies outside 85-95%; and every fold by node count."""
    from srifty.validate import METHODS, SplitResult, ValidationReport, render_markdown

    def fold(name: str, beyond: list[float], predicted: list[float], inside: list[bool]) -> SplitResult:
        y = np.full(len(beyond), 100.0)
        p = np.array(predicted)
        errors = {m: np.abs(p - y) / y * 100 for m in METHODS}
        errors["pollux"] = np.full(len(y), 30.0)
        return SplitResult("s", name, len(y), errors, y, {m: p for m in METHODS}, None, np.array(inside),
                           np.full(len(y), 2.0), np.array(beyond), np.full(len(y), 2.0))

    report = ValidationReport()
    # f1: 20 compute-bound rows 5% too slow, all inside; 20 communication-bound rows, half 20% too fast
    # and half 10% too fast, 18 inside; f2: 5 mixed rows, exact, and 20 communication-bound ones 5% too
    # fast, 14 inside
    report.results += [fold("f1", [0.05] * 20 + [0.6] * 20, [105.0] * 20 + [80.0] * 10 + [90.0] * 10,
                            [True] * 38 + [False] * 2),
                       fold("f2", [0.2] * 5 + [0.5] * 20, [100.0] * 5 + [95.0] * 20, [True] * 19 + [False] * 6)]
    cells = report.by_fold_and_regime()
    assert [(c["fold"], c["group"].split(" (")[0], c["rows"]) for c in cells] == [
        ("f1", "compute-bound", 20), ("f1", "communication-bound", 20), ("f2", "mixed", 5),
        ("f2", "communication-bound", 20)]
    compute, comm, mixed, comm2 = cells
    assert compute["model_mape"] == pytest.approx(5.0) and compute["model_signed_median"] == pytest.approx(5.0)
    assert compute["inside_interval"] == 1.0 and compute["meets_mape_target"] is True
    assert comm["model_mape"] == pytest.approx(15.0) and comm["model_signed_median"] == pytest.approx(-15.0)
    assert comm["inside_interval"] == pytest.approx(0.9) and comm["meets_mape_target"] is False
    assert comm["baseline"] in METHODS[1:] and comm["interval_ratio"] == 2.0
    assert mixed["meets_mape_target"] is None and comm2["meets_mape_target"] is True
    text = render_markdown(report, "srifty validate", ["c"], None)
    assert "| s | f1 | communication-bound (>40%) | 20 | 15.0 | -15.0 | 90 | x2.00 | no |" in text
    assert "| s | f2 | mixed" not in text and "(1 smaller cells left out)" in text
    assert "2 of the 3 cells meet the MAPE target." in text
    # pooled over the folds: compute-bound 100% inside (too wide), communication-bound 32 of 40 (80%)
    # the compute-bound rows all lie within ±0.10 in log of the prediction (5% off), twice the
    # scatter of repeated runs; of the communication-bound rows, f2's 20 do (5% too fast) and f1's none (10%
    # too fast is -0.105 in log)
    assert [round(c["inside_least"], 3) for c in cells] == [1.0, 0.0, 1.0, 1.0]
    assert ("of at least 20 rows; 0 of 2 meet it; s compute-bound 100% (interval too wide, yet 100% lie "
            "within ±0.10 in log of the prediction, twice the scatter of repeated runs); "
            "s communication-bound 80% (interval too narrow).") in text
    assert "| s | compute-bound (<10% beyond compute) | 20 | 5.0 | +5.0 | 5.0 (simulator) | 100 | x2.00 | 100 |" in text
    assert "| s | communication-bound (>40%) | 40 | 10.0 | -7.5 | 10.0 (simulator) | 80 | x2.00 | 50 |" in text
    # every fold by node count (all rows on 2 nodes): f1's 40 rows and f2's 25, signed medians of
    # (+5 x20, -20 x10, -10 x10) and (0 x5, -5 x20)
    assert [(c["fold"], c["group"], c["rows"]) for c in report.by_fold_and_nodes()] == [
        ("f1", "2 nodes", 40), ("f2", "2 nodes", 25)]
    assert "| s | f1 | 2 nodes | 40 | 10.0 | -2.5 | 95 | x2.00 |" in text
    assert "| s | f2 | 2 nodes | 25 | 4.0 | -5.0 | 76 | x2.00 |" in text

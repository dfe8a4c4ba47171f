"""DDP with a different batch on each rank: trains a tiny MLP with and without
``srifty.weight_gradients_by_batch`` and writes each variant's final parameters.

Run one process per rank with the usual torch.distributed environment (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT; torchrun sets them) and this rank's batch in SRIFTY_BATCH_SIZE:

    python tests/scripts/mixed_batch.py OUT_DIR [--steps N]

Rank r writes OUT_DIR/rank<r>.json: {"host": $SRIFTY_EMU_HOST, "batches": [...], "variants":
{name: {"params": [...], "hooked": bool}}, "equal_batch": {...}}. Every step draws a fresh
global batch of B = sum of the ranks' batches from a seeded generator; rank r trains on its
slice of it (the ranks' slices in rank order are the whole batch), so :func:`train_single` on
the same B samples is the reference. The data, the model and the step are shared with the
tests, which import this file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import srifty

IN, HIDDEN = 8, 32
LR = 0.1
STEPS = 8
# ~2 KB buckets: the 32x32 layer gets its own bucket, so the hook sees several buckets a step
BUCKET_CAP_MB = 0.002


def build_model(dtype: torch.dtype) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
                         nn.Linear(HIDDEN, 1)).to(dtype)


def global_batch(step: int, size: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch of one step (the same on every rank and in the reference)."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(size, IN, generator=g, dtype=torch.float64)
    y = torch.sin(x.sum(dim=1, keepdim=True)) + 0.1 * torch.randn(size, 1, generator=g, dtype=torch.float64)
    return x.to(dtype), y.to(dtype)


def sgd_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)  # reduction="mean": the mean over this rank's samples
    loss.backward()
    opt.step()


def flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def train_single(batch: int, steps: int = STEPS, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """One process on the whole batch of every step: what DDP over the ranks should reproduce."""
    model = build_model(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(steps):
        sgd_step(model, opt, *global_batch(step, batch, dtype))
    return flat_params(model)


def train_ddp(batches: list[int], rank: int, steps: int, dtype: torch.dtype, weighted: bool) -> tuple[torch.Tensor, bool]:
    model = DDP(build_model(dtype), bucket_cap_mb=BUCKET_CAP_MB)
    hooked = srifty.weight_gradients_by_batch(model, batches[rank]).hooked if weighted else False
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    lo = sum(batches[:rank])
    hi = lo + batches[rank]
    for step in range(steps):
        x, y = global_batch(step, sum(batches), dtype)
        sgd_step(model, opt, x[lo:hi], y[lo:hi])
    return flat_params(model.module), hooked


def equal_batch_check() -> dict[str, object]:
    """Same batch on every rank: nothing registered, DDP's hook slot left free."""
    model = DDP(build_model(torch.float32))
    info = srifty.weight_gradients_by_batch(model, 8)
    return {"hooked": info.hooked, "comm_hooks": len(getattr(model, "_comm_hooks", [])),
            "batches": list(info.batches)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--steps", type=int, default=STEPS)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    mine = torch.tensor([srifty.local_batch_size(8)])
    gathered = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, mine)
    batches = [int(t) for t in gathered]
    variants = {}
    for name, dtype, weighted in (("weighted", torch.float32, True), ("plain", torch.float32, False),
                                  ("weighted64", torch.float64, True)):
        params, hooked = train_ddp(batches, rank, args.steps, dtype, weighted)
        variants[name] = {"params": params.tolist(), "hooked": hooked}
    result = {"rank": rank, "host": os.environ.get("SRIFTY_EMU_HOST"), "batches": batches, "steps": args.steps,
              "variants": variants, "equal_batch": equal_batch_check()}
    Path(args.out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Rank 0 hosts the TCPStore here (no torchrun agent). Once in a clean-clone test run a rank died
    # with "terminate called without an active exception": a C++ thread still joinable when its
    # object was destroyed, most likely at interpreter teardown, as nothing before it reported an
    # error. Leave without that teardown: the results are on disk and the output flushed.
    sys.stdout.flush()
    os._exit(0)

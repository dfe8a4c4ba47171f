"""Assembling a training profile from the workers' records: the job's precision (which picks the
FLOPS figure compute transfers by), the job, cluster, environment and measurement blocks, the
summary and the warnings (:func:`training_doc`). The backend runs the job; this turns what it
measured into the document ``profile.save`` writes.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from pathlib import Path
from typing import Any, Callable

from srifty import profile, simulate
from srifty.profiling.request import ProfileRequest
from srifty.profiling.supervisor import RunOutcome


def _matmul_tf32(model: dict[str, Any]) -> bool:
    """Whether float32 matmuls may use TF32 ("highest", PyTorch's default, keeps them IEEE)."""
    return model.get("float32_matmul_precision") in ("high", "medium")


def tf32_flop_share(model: dict[str, Any]) -> float | None:
    """The share of a float32 model's FLOPs that PyTorch lets run on TF32 tensor cores where the
    GPU has them: convolutions when cuDNN may use TF32 (PyTorch's default), matmuls and attention
    when the float32 matmul precision is "high" or "medium" (the default "highest" keeps them
    IEEE float32). None when the forward's FLOPs were not counted."""
    conv = model.get("conv_flop_share")
    if conv is None:
        return None
    return conv * bool(model.get("cudnn_allow_tf32")) + (1.0 - conv) * _matmul_tf32(model)


def job_precision(model: dict[str, Any]) -> str | None:
    """The profile's ``precision``, which picks the FLOPS figure that transfers compute across GPUs
    (srifty.features.Hardware.flops_kind): "amp" under autocast to float16/bfloat16 (the
    parameters and gradients stay float32); "tf32" for float32 parameters when most of the
    forward's FLOPs may run in TF32 (:func:`tf32_flop_share`: a CNN under PyTorch's defaults, a
    transformer with ``torch.set_float32_matmul_precision("high")``); else the parameters' dtype."""
    if model.get("autocast_dtype") in ("float16", "bfloat16"):
        return "amp"
    if model.get("grad_dtype") == "float32":
        share = tf32_flop_share(model)
        if share is None:  # FLOPs not counted: the matmul switch alone decides
            share = float(_matmul_tf32(model))
        if share >= 0.5:
            return "tf32"
    return model.get("grad_dtype")


def _sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def most_common(values: list[Any]) -> Any:
    """The value most of ``values`` hold (the first such one where several tie); None where empty."""
    return max(set(values), key=values.count) if values else None


def accumulation(ranks: list[dict[str, Any]]) -> int:
    """The forward-backward passes per optimizer step where the script accumulates gradients
    (profile.step_passes, more than one), most iterations' count; 1 where it does not."""
    passes = [int(it.get("backwards") or 0) for r in ranks for it in r.get("iterations", [])
              if profile.step_passes(it.get("forwards") or 0, it.get("backwards") or 0, it.get("steps") or 0)]
    return most_common(passes) or 1


def most_iterations(ranks: list[dict[str, Any]], key: str) -> int | None:
    """An iteration record's figure ``key`` in most iterations past the first (whose buckets DDP
    rebuilds), of those where it is positive; None where it is in none. ``synced_backwards``: the
    backwards a step allreduces in (an accumulating step's passes not under no_sync(), a GAN's two
    networks' steps); ``allreduced_bytes``: what a step hands DDP's communication hooks (none seen
    where the hook is builtin)."""
    values = [int(it.get(key) or 0) for r in ranks for it in r.get("iterations", [])[1:]]
    return most_common([v for v in values if v > 0])


def torch_version() -> str | None:
    """The installed torch's version, read off its package metadata: importing torch in the command's
    own process (it runs in the workers) would cost it a second or more."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def nccl_version() -> str:
    import torch  # a GPU run's: NCCL's version is torch's to say

    return ".".join(map(str, torch.cuda.nccl.version()))


def training_doc(request: ProfileRequest, ranks: list[dict[str, Any]], outcome: RunOutcome,
                 cluster_block: Callable[[ProfileRequest, int, str], dict[str, Any]]) -> dict[str, Any]:
    """The profile of a training run from its ranks' records; ``cluster_block`` is the backend's
    (:meth:`ProfilingBackend.cluster_block`), which describes where the workers ran."""
    world = max((r.get("world_size", 1) for r in ranks), default=request.nproc) or request.nproc
    device = "cuda" if any((r.get("device") or {}).get("type") == "cuda" for r in ranks) else "cpu"
    model = next((r["model"] for r in ranks if r.get("model")), {})
    layout = next((r["bucket_layout"] for r in ranks if r.get("bucket_layout")), [])
    batch_sizes = [it.get("batch_size") for r in ranks for it in r.get("iterations", []) if it.get("batch_size")]
    detected = most_common(batch_sizes)
    local_bs = detected or request.batch_size
    passes = max(1, accumulation(ranks))  # forward-backward passes per optimizer step: detected is their sum
    summary, warmup, achieved = profile.summarise_training(ranks, world, local_bs)
    warnings = []
    synced = most_iterations(ranks, "synced_backwards") or 1
    if passes > 1 and detected:
        warnings.append(
            f"the script accumulates gradients: {passes} forward-backward passes of about {detected // passes} "
            f"samples per optimizer step, so the profile's per-worker batch is the step's {detected} samples; "
            "predictions at another batch keep the passes per step and scale each pass's batch, and a plan's "
            "SRIFTY_BATCH_SIZE is one pass's batch"
            + (f". {synced} of the {passes} passes allreduced their gradients, and srifty predicts the steps "
               "across workers with as many allreduces; wrapping all but the last pass in DDP's no_sync() leaves "
               "one." if synced > 1 else "."))
    if request.batch_size and detected and detected // passes != request.batch_size:
        warnings.append(
            f"--batch-size {request.batch_size} was requested but the model saw batches of {detected // passes}: "
            + (f"the script does not train at the batch its {request.batch_arg} option was given"
               if request.batch_arg else
               "the script does not read SRIFTY_BATCH_SIZE (give the script's own option for its batch with "
               "--batch-arg, as --batch-arg=--per_device_train_batch_size for a HuggingFace script)")
            + "; the profile records the batch it saw (the first dimension of the model's first input, the second "
            "where a recurrent or attention layer inside takes its input sequence first, or the length of a list "
            "of images)."
        )
    ddp_models = max((int(r.get("ddp_models") or 0) for r in ranks), default=0)
    allreduced = most_iterations(ranks, "allreduced_bytes")
    if ddp_models > 1:
        # each model's buckets are numbered from 0, and one backward may allreduce several models'
        layout = []
        if summary:
            summary["buckets"] = []
        volume = (f"the {allreduced / 1e6:,.3g} MB a step handed to DDP's communication hooks (job.allreduced_bytes; "
                  "a GAN's critic allreduces its gradients in both networks' steps)" if allreduced else
                  "each model's gradients allreduced once (no communication hook was seen to count what a step "
                  "sends)")
        warnings.append(
            f"the script wraps {ddp_models} models in DistributedDataParallel (a GAN's two networks, say): "
            f"job.param_count and grad_bytes are theirs summed, and srifty predicts steps across workers with {volume}, "
            f"shared by the {synced} backward(s) a step allreduces in (job.synced_passes), each allreducing as its "
            "gradients become ready evenly through it (the models' buckets are not recorded)."
            + ("" if any(r.get("explicit_api") for r in ranks) else
               " An iteration is one step of each optimizer that steps as often as the most frequent; "
               "srifty.step() marks iterations where that is not the script's training step.")
        )
    hook = model.get("comm_hook")
    if compression := model.get("powersgd"):
        # whether the measured steps ran the compression (past the hook's plain first steps): their
        # exposed time is then mostly the hook's own compute
        steps = [bool(it.get("compressed")) for r in ranks for it in r.get("iterations", [])[1:]]
        compression = model["powersgd"] = compression | {"profiled": bool(steps) and sum(steps) * 2 >= len(steps)}
    if hook and hook.startswith("builtin:"):
        warnings.append(
            f"the script registers DDP's builtin communication hook {hook.removeprefix('builtin:')}, which srifty "
            "cannot time: the profile has no gradient buckets or ready times, and with several workers its backward "
            "includes the wait for the allreduce. Register the same hook in Python to profile it (for FP16_COMPRESS "
            "model.register_comm_hook(None, default_hooks.fp16_compress_hook), from "
            "torch.distributed.algorithms.ddp_comm_hooks).")
    elif compression and all(b.get("sent") for b in layout):
        sent, grads = sum(sum(b["sent"]) for b in layout), sum(b["bytes"] for b in layout)
        warnings.append(
            f"the script's DDP communication hook compresses its gradients with PowerSGD (rank "
            f"{compression['rank']}): srifty predicts steps across workers with the allreduces it sends for each "
            f"bucket, {sent / 1e6:,.3g} MB of the {grads / 1e6:,.3g} MB of gradients a step, in turn where the "
            "bucket becomes ready. "
            + ("The measured steps ran the compression, and its own compute (most of the time backward waited, "
               "which cannot be told apart from the wait for the allreduces) stays in the predicted steps. "
               if compression["profiled"] else
               f"The measured steps ran the hook's first {compression['start_iter']} plain steps, so the "
               "compression's own compute is not in the predictions: start_powerSGD_iter=2 while profiling "
               "measures it. ")
            + "Its plain first steps are left out of the predictions.")
    elif not simulate.knows_hook(hook):
        warnings.append(
            f"the script's DDP communication hook {hook} is not one srifty knows: steps across workers are "
            "predicted with the gradients allreduced as they are, as DDP's default hook sends them; a hook that "
            "compresses them (PowerSGD) sends less, and those steps may take less time than predicted.")
    if layers := model.get("sync_batchnorm"):
        warnings.append(
            f"the model has {len(layers)} SyncBatchNorm layer(s): in every step each gathers its batch statistics "
            "across the workers in forward and allreduces their gradients in backward, and the layers after it "
            "wait. srifty predicts steps across workers with those collectives exposed"
            + ("; on this CPU it ran them as plain batch norm (PyTorch's SyncBatchNorm runs on GPUs only)."
               if device == "cpu" else
               f"; on the profile's {world} workers they are inside the measured compute as well, so predictions "
               "count them twice there (a one-worker profile has none)." if world > 1 else "."))
    if sharded := model.get("sharded_optimizer"):
        warnings.append(
            f"the optimizer is a {sharded}: each worker updates its shard of the parameters, then sends it to the "
            "others. srifty predicts steps across workers with that all-gather (half an allreduce of the "
            "parameters) after the gradients' allreduce, and with the optimizer's own step as timed here on "
            f"{world} worker(s), each updating 1/{world} of the parameters, scaled to each worker's shard.")
    if model.get("operators_not_counted"):
        warnings.append(model["operators_not_counted"])
    if summary and achieved is not None and achieved > request.target_rel_ci:
        warnings.append(
            f"the median iteration time is known to +/-{achieved:.1%} (95% CI), looser than the "
            f"{request.target_rel_ci:.0%} target: raise --max-seconds for a tighter figure."
        )
    rank0 = next((r for r in ranks if r.get("rank") == 0), ranks[0] if ranks else {})
    stop_reason = outcome.reason or rank0.get("stop_reason") or "worker_failed"
    if stop_reason not in ("converged", "time_cap", "iteration_cap", "script_finished", "interrupted", "worker_failed", "hung", "terminated"):
        stop_reason = "terminated"
    cluster = cluster_block(request, world, device)
    for h in cluster["hosts"]:
        devs = [r.get("device") for r in ranks if r.get("device")]
        if devs:
            h["spec"]["device"] = devs[0]
    return {
        "schema_version": profile.SCHEMA_VERSION,
        "kind": "training",
        "status": "complete",
        "partial_reason": None,
        "stop_reason": stop_reason,
        "created_at": profile.utc_now(),
        "srifty_version": profile.__version__,
        "job": {
            "model": request.model,
            "script": os.path.relpath(request.script) if request.script else None,
            "module": request.module,  # run as `python -m MODULE` (script: its file), else None
            "script_sha256": _sha256(request.script) if request.script else None,
            "args": list(request.script_args),
            "batch_arg": request.batch_arg,  # the script's option for its batch, appended with it to args
            "local_batch_size": local_bs,
            "requested_batch_size": request.batch_size,
            "param_count": model.get("param_count"),
            "grad_bytes": model.get("grad_bytes"),
            "grad_dtype": model.get("grad_dtype"),
            "precision": job_precision(model),
            "autocast_dtype": model.get("autocast_dtype"),
            "forward_flops": model["forward_flops"] * passes if model.get("forward_flops") else None,
            "tf32_flop_share": tf32_flop_share(model),
            "conv_flop_share": model.get("conv_flop_share"),
            "operators": model.get("operators"),
            "memory": model.get("memory"),
            "bucket_cap_mb": model.get("bucket_cap_mb"),
            "comm_hook": model.get("comm_hook"),
            "powersgd": model.get("powersgd"),
            "buckets": layout,
            "ddp_models": ddp_models,  # the gradient figures above are all of theirs
            "accumulation": passes,
            "synced_passes": synced,
            "allreduced_bytes": allreduced,
            "sharded_optimizer": model.get("sharded_optimizer"),
            "sync_batchnorm": model.get("sync_batchnorm") or None,
        },
        "cluster": cluster,
        "environment": profile.environment_info(torch_version(), nccl_version() if device == "cuda" else None),
        "measurement": {
            "target_rel_ci": request.target_rel_ci,
            "achieved_rel_ci": achieved,
            "decision_rel_ci": rank0.get("current_rel_ci"),
            "min_iterations": request.min_iterations,
            "max_iterations": request.max_iterations,
            "max_seconds": request.max_seconds,
            "warmup_iterations": warmup,
            "iterations_recorded": len(profile.merge_iterations(ranks)),
            "iterations_used": summary["iteration_ms"]["n"] if summary else 0,
            "wall_seconds": round(outcome.wall_seconds, 3),
        },
        "summary": summary,
        "ranks": [
            {"rank": r.get("rank", i), "host": r.get("host_label") or r.get("hostname", ""), "iterations": r.get("iterations", []), "error": r.get("error")}
            for i, r in enumerate(ranks)
        ],
        "warnings": warnings,
    }

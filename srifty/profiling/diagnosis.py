"""Why a profiling run failed, in words a user can act on: interrupted, hung at start-up or
mid-run (and where each rank waited), past the time cap, a rank's exception (out of memory, a GPU
or NCCL the machine lacks, workers sharing a GPU, a script that launches itself where torchrun has,
a command line the script's argparse refused, a Lightning Trainer set for other workers, or the
first error that is not a peer's dropped connection, with where it was raised when it has no
message), a worker killed by the kernel, or a script that never completed an iteration (no forward
through DDP, no backward, no optimizer step).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

from srifty.errors import ProfilingFailed, sentence
from srifty.profiling import stacks
from srifty.profiling.otherparallel import KEY as OTHER_KEY
from srifty.profiling.otherparallel import KINDS
from srifty.profiling.request import ProfileRequest
from srifty.profiling.supervisor import RunOutcome


def diagnose_failure(
    request: ProfileRequest, ranks: list[dict[str, Any]], outcome: RunOutcome, doc: dict[str, Any]
) -> ProfilingFailed | None:
    script = request.script or "the job"
    measured = doc["measurement"]["iterations_recorded"]
    if outcome.reason == "interrupted":
        failure = ProfilingFailed(f"Profiling of {script} was interrupted (Ctrl-C or SIGTERM) after {measured} iterations; all workers were stopped.")
        failure.exit_code = 128 + outcome.signum
        return failure
    if outcome.reason == "hung":
        waiting = f" ({outcome.hung_at})" if outcome.hung_at else ""
        if measured == 0:
            return ProfilingFailed(
                f"{script} made no training iteration within {request.startup_timeout:.0f} s of starting{waiting}; "
                "the workers were stopped.",
                "A worker may be stuck (waiting for a peer, a dead data loader, a deadlock) or start-up is slow: "
                "check the script with `torchrun` directly, or raise --startup-timeout.",
            )
        return ProfilingFailed(
            f"{script} stopped making progress after {measured} iterations: no iteration finished for "
            f"{request.hang_timeout:.0f} s{waiting}, so srifty took the workers to be hung and stopped them.",
            powersgd_on_gloo(doc) or "A worker may be stuck in a collective that another rank never joined; raise "
            "--hang-timeout if iterations are really that slow.",
        )
    if outcome.reason == "time_cap":
        return ProfilingFailed(
            f"{script} ran past the hard time limit of {request.startup_timeout + request.max_seconds + request.hang_timeout:.0f} s and was stopped.",
            "Raise --max-seconds, or check why iterations are so slow.",
        )
    errors = [(r.get("rank", i), r["error"]) for i, r in enumerate(ranks) if r.get("error")]
    bad_codes = [c for c in outcome.returncodes if c not in (0, None)]
    if errors or bad_codes:
        return worker_error(request, errors, outcome, other_parallelism_built(ranks))
    if not measured:
        reason = "the script finished without completing a training iteration"
        r0 = next((r for r in ranks if r.get("rank") == 0), None)
        if r0:
            if r0.get("forward_calls") and not r0.get("backward_calls"):
                reason = f"the script ran {r0['forward_calls']} forward passes but never called backward()"
            elif not r0.get("forward_calls") and not r0.get("explicit_api"):
                reason = "the script never ran a forward pass through a DistributedDataParallel model"
                if other := other_parallelism_built(ranks) or other_parallelism(request.script, request.script_args):
                    return ProfilingFailed(
                        f"Nothing to measure in {script}: it trains with {other}, not DistributedDataParallel.",
                        NOT_DDP_ADVICE)
            elif r0.get("forward_calls") and r0.get("backward_calls") and not r0.get("step_calls"):
                reason = "the script ran forward and backward but never an optimizer step()"
        return ProfilingFailed(
            f"Nothing to measure in {script}: {reason}.",
            "srifty measures training iterations (DDP forward, loss.backward(), optimizer.step()); make sure the "
            "script trains for more than a few steps, or mark iterations with srifty.step().",
        )
    return None


NOT_DDP_ADVICE = ("srifty profiles and predicts data parallelism with DDP (every worker holds the whole model and "
                  "allreduces its gradients); sharded or model-parallel training communicates otherwise and is not "
                  "predicted. Wrap the model in torch.nn.parallel.DistributedDataParallel to profile it as DDP "
                  "training (with Lightning, strategy=\"ddp\"; with HuggingFace's Trainer, no --fsdp or --deepspeed).")


def other_parallelism_built(ranks: list[dict[str, Any]]) -> str | None:
    """The training that is not DDP a worker noted building (srifty.profiling.otherparallel), if any."""
    return next((KINDS.get(k) for r in ranks if (k := (r.get("model") or {}).get(OTHER_KEY))), None)


# what a script that trains without DDP calls or asks for instead (in its source or its arguments:
# a Lightning strategy, HuggingFace Trainer's options), and its name in an error
OTHER_PARALLELISM = ((r"FullyShardedDataParallel", KINDS["fsdp"]), (r"fully_shard", KINDS["fully_shard"]),
                     (r"strategy\s*=\s*[\"']fsdp|FSDPStrategy", "FSDP (Lightning's fsdp strategy)"),
                     (r"(^|\s)--fsdp\b", "FSDP (HuggingFace Trainer's --fsdp)"),
                     (r"deepspeed|DeepSpeed", KINDS["deepspeed"]), (r"nn\.DataParallel", KINDS["data_parallel"]))


def other_parallelism(script: str | None, script_args: Sequence[str] = ()) -> str | None:
    """The other kind of parallel training ``script``'s source or its arguments name, where they
    name one."""
    try:
        source = Path(script).read_text(errors="replace") if script else ""
    except OSError:
        source = ""
    text = f"{source}\n{' '.join(script_args)}"
    return next((name for pattern, name in OTHER_PARALLELISM if re.search(pattern, text)), None)


# what PyTorch Lightning says where its Trainer's devices and nodes are not torchrun's workers, and
# the Trainer's arguments that take them from torchrun
LIGHTNING_WORLD = "in Lightning, but the product"
LIGHTNING_FROM_TORCHRUN = ('L.Trainer(devices=int(os.environ.get("LOCAL_WORLD_SIZE", 1)), '
                           'num_nodes=int(os.environ.get("WORLD_SIZE", 1)) // int(os.environ.get("LOCAL_WORLD_SIZE", '
                           '1)), strategy="ddp", ...)')


# what a rank's error is called where the script launches itself as torchrun has
# (srifty.profiling.selflaunch), and what to change
UNDER_TORCHRUN = "Where torchrun started the script (\"LOCAL_RANK\" in os.environ)"
TORCHRUN_RENDEZVOUS = ("give init_process_group no rendezvous of its own (MASTER_ADDR, MASTER_PORT, a tcp:// "
                       "init_method) and no rank or world size but torchrun's: dist.init_process_group(backend) "
                       "reads them all from torchrun (docs/profiling.md, *A script that starts its own workers*)")
SPAWNED_AGAIN = ("torchrun has started the workers already (spawned again, they would set up a process group of "
                 "their own and hang)")
SELF_LAUNCH = {  # the error's name: what the script did, and what would follow under torchrun
    "ScriptStartsItsOwnWorkers": ("starts its own workers with {message}, as PyTorch's DDP tutorial does", SPAWNED_AGAIN),
    "LightningStartsItsOwnWorkers": (
        "starts its own workers with {message}, through Lightning's spawning strategy (ddp_spawn)", SPAWNED_AGAIN),
    "ScriptSetsItsOwnRendezvous": (
        "sets a rendezvous of its own ({message})", "its workers would wait for a rendezvous server nobody runs there"),
    "ScriptSetsItsOwnWorld": (
        "sets up a process group of its own: {message}",
        "each worker would train alone, and the profile would time allreduces that never left it"),
}


def self_launch(script: str, err: dict[str, Any]) -> ProfilingFailed:
    """The error for a script that launches itself where torchrun has (``err``: the rank's)."""
    did, follows = SELF_LAUNCH[err["type"]]
    what = (f"{script} {did.format(message=err['message'])}; srifty runs it under torchrun, as a recommended plan "
            "does across nodes")
    if err["type"] == "LightningStartsItsOwnWorkers":
        return ProfilingFailed(f"{what}, and {follows}.",
                               f"Give the Trainer strategy=\"ddp\", which takes the workers torchrun started, and "
                               f"devices and num_nodes from torchrun: {LIGHTNING_FROM_TORCHRUN} (docs/profiling.md, "
                               "*Trainers*).")
    if err["type"] == "ScriptStartsItsOwnWorkers":
        worker = (re.findall(r"\((\w+)", err["message"]) or ["the worker function"])[0]
        return ProfilingFailed(
            f"{what}, and {follows}.",
            f"{UNDER_TORCHRUN}, call {worker} once in place of the spawn, with int(os.environ[\"RANK\"]) and "
            f"int(os.environ[\"WORLD_SIZE\"]), and {TORCHRUN_RENDEZVOUS}.",
        )
    return ProfilingFailed(f"{what}, where {follows}.", f"{UNDER_TORCHRUN}, {TORCHRUN_RENDEZVOUS}.")


# what torch says when a script asks for CUDA or NCCL on a machine (or a build) without them
NO_GPU_WORDS = ("not compiled with cuda", "no nvidia driver", "no cuda gpus are available", "nccl built in",
                "processgroupnccl is only supported with gpus", "cuda driver initialization failed")


def worker_error(request: ProfileRequest, errors: list[tuple[int, dict[str, Any]]], outcome: RunOutcome,
                 other: str | None = None) -> ProfilingFailed:
    """The error for workers that raised or exited badly; ``other``: the training that is not DDP a
    worker built (FSDP needs an accelerator, and fails on a CPU in its own words)."""
    script = request.script or "the job"
    peer_words = ("connection closed", "connection reset", "broken pipe", "peer", "timed out", "gloo", "nccl", "socket")
    primary = next((e for e in errors if not any(w in e[1]["message"].lower() for w in peer_words)), errors[0] if errors else None)
    oom_words = ("out of memory", "can't allocate memory", "cannot allocate memory", "outofmemoryerror", "defaultcpuallocator")
    killed = [c for c in outcome.returncodes if c is not None and c in (-9, 137)]
    if primary is not None and primary[1]["type"] in SELF_LAUNCH:
        return self_launch(script, primary[1])
    if primary is not None and primary[1]["type"] == "SystemExit" and ": error: " in primary[1]["message"]:
        refused = primary[1]["message"].splitlines()[0][:400]
        launch = ("; torchrun gives each worker its rank in the LOCAL_RANK environment variable, not as a "
                  "--local_rank argument (torch.distributed.launch's), so let the script read "
                  "os.environ[\"LOCAL_RANK\"]" if "local_rank" in refused.replace("-", "_") else "")
        return ProfilingFailed(
            f"The workers of {script} stopped at its command line: {sentence(refused)}",
            f"Give the script's own arguments after `--`: srifty profile SCRIPT [OPTIONS] -- SCRIPT_ARGS{launch}.",
        )
    if primary is not None:
        rank, err = primary
        text = f"{err['type']}: {err['message']}".strip()
        first_line = text.splitlines()[0][:400] if text else err["type"]
        if not str(err.get("message") or "").strip():  # a bare `raise AssertionError`: say where it was
            first_line = f"{err['type']} (no message), {raised_at(err.get('traceback'), request.script)}".rstrip(", ")
        if other:
            return ProfilingFailed(f"{script} trains with {other}, not DistributedDataParallel, and its rank {rank} "
                                   f"failed with {sentence(first_line)}", NOT_DDP_ADVICE)
        if any(w in text.lower() for w in oom_words):
            bs = request.batch_size
            return ProfilingFailed(
                f"Rank {rank} of {script} ran out of memory{f' at --batch-size {bs}' if bs else ''}: {first_line}",
                "The per-worker batch does not fit: try a smaller --batch-size (srifty passes it as SRIFTY_BATCH_SIZE), "
                "or fewer workers per machine with --nproc.",
            )
        shared = next((line.strip() for line in text.splitlines() if "duplicate gpu detected" in line.lower()), None)
        if shared:
            return ProfilingFailed(
                f"Workers of {script} share a GPU, which NCCL refuses: {sentence(shared[:300])}",
                "Let each worker take the GPU of its LOCAL_RANK, which torchrun sets, e.g. `local_rank = "
                "int(os.environ['LOCAL_RANK'])`, `torch.cuda.set_device(local_rank)` and DDP(model, "
                "device_ids=[local_rank]); a script written for torch.distributed.launch that reads a --local_rank "
                "argument gets its default in every worker, as torchrun passes no such argument.",
            )
        if LIGHTNING_WORLD in text:
            return ProfilingFailed(
                f"Rank {rank} of {script} stopped where Lightning's Trainer was set for another number of workers "
                f"than torchrun started: {sentence(first_line)}",
                "srifty starts --nproc workers on each host under torchrun, as a recommended plan does on each "
                f"node of its size; let the Trainer take both from torchrun: {LIGHTNING_FROM_TORCHRUN} "
                "(docs/profiling.md, *Trainers*).",
            )
        if any(w in text.lower() for w in NO_GPU_WORDS):
            return ProfilingFailed(
                f"Rank {rank} of {script} asked for a GPU that its machine does not have: {sentence(first_line)}",
                "srifty profiles on CPUs too and carries a CPU profile to every GPU: let the script take its "
                "device and its process group's backend from what the machine has, e.g. `device = "
                "torch.device('cuda' if torch.cuda.is_available() else 'cpu')` and "
                "`dist.init_process_group('nccl' if torch.cuda.is_available() else 'gloo')` (docs/profiling.md, "
                "*A GPU script on a CPU*).",
            )
        return ProfilingFailed(
            f"Rank {rank} of {script} failed with {sentence(first_line)}",
            "Fix the script (its full traceback is in the workers' output, or run it under `torchrun`), "
            "then profile again.",
        )
    if killed:
        return ProfilingFailed(
            f"A worker of {script} was killed (SIGKILL), most likely by the kernel's out-of-memory killer.",
            "Try a smaller --batch-size or fewer workers with --nproc.",
        )
    tail = "\n".join(outcome.log_tail.strip().splitlines()[-5:])
    return ProfilingFailed(
        f"The workers of {script} exited with status {', '.join(map(str, outcome.returncodes))} before srifty got "
        f"their records. Last lines of their output: {tail}",
        "Run the script under `torchrun` directly to see what fails.",
    )


def raised_at(traceback: str | None, script: str | None) -> str:
    """Where an exception was raised, read off its ``traceback``: the innermost frame, and the line
    of ``script`` that led there where that is another frame ('' where it names no frame)."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', traceback or "")
    return f"raised in {stacks.place(frames[::-1], script)}" if frames else ""


def powersgd_on_gloo(doc: dict[str, Any]) -> str | None:
    """What to do where the hung job (its profile ``doc``) runs PyTorch's PowerSGD hook over gloo
    (CPU workers) with several gradient buckets: the hook waits for its allreduces inside gloo's
    callbacks, and two buckets in flight can hold both of gloo's threads, a deadlock that needs no
    srifty (a two-bucket MLP on one 0.5-core emulated host stopped at its 31st step under plain
    torchrun, and ran 300 steps with one bucket). None where that is not the case."""
    job = doc.get("job") or {}
    layout = job.get("buckets") or []
    if not (job.get("powersgd") and (doc.get("cluster") or {}).get("device") == "cpu" and len(layout) > 1):
        return None
    grads = sum(int(b.get("bytes") or 0) for b in layout) / 2 ** 20
    return (f"The script's PowerSGD hook waits for its allreduces inside gloo's callbacks, and with its "
            f"{len(layout)} gradient buckets in flight those waits can hold every gloo thread: the job deadlocks "
            "on CPU workers without srifty too (PowerSGD is made for NCCL). Profile it on a GPU, or give DDP a "
            f"bucket_cap_mb above its {grads:,.1f} MiB of gradients so that one bucket holds them all.")

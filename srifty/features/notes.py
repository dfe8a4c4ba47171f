"""What a prediction row is told: the notes :class:`srifty.features.FeatureBuilder` attaches to
an estimate where an assumption moves it (an unknown gradient size or gradient timeline, a
network or intra-node link nobody measured, a loose profile), each with what would measure it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

from srifty.features.hardware import DEFAULT_INTRA_GBYTES_PER_S, Hardware

if TYPE_CHECKING:  # pragma: no cover
    from srifty.features.job import JobProfile, PowerSgd
    from srifty.features.overlap import OverlapFit

# said of a multi-worker estimate for a job whose gradient size srifty cannot know
GRADIENT_UNKNOWN_NOTE = ("gradient size unknown: communication not simulated, so the figure is compute alone and "
                         "the interval spans the slowdowns the training corpus's multi-worker runs showed; give "
                         "param_count or grad_bytes when importing (srifty profile records them)")

READY_UNKNOWN_NOTE = (
    "the profile does not record when its gradients become ready during backward (an imported trace): the "
    "prediction lets backward hide the allreduce as DDP's buckets usually allow, and the interval reaches the "
    "step with none of it hidden; `srifty profile` of the training script records it")

# said of a multi-worker estimate on GPUs for a job whose ready times were recorded on a CPU
READY_ON_CPU_NOTE = (
    "the profile recorded when its gradients become ready on a CPU, and a GPU runs backward's layers at other "
    "relative speeds (the same model's buckets ready two to three times earlier or later on an H200 than on a CPU): "
    "the prediction lets backward hide the allreduce as DDP's buckets usually allow, and the interval reaches the "
    "step with none of it hidden; a profile on one GPU records it")


def _derived_runs(fit: "OverlapFit") -> str:
    """How many of an overlap read's runs had a sync time derived from their steps, for its note."""
    return f", {fit.derived} of them a run's step less the single-worker step at its batch" if fit.derived else ""


def overlap_checked_note(job: "JobProfile") -> str:
    """The note of a job whose sync times were read and kept DDP's usual overlap (srifty.features.overlap)."""
    fit = job.overlap_check
    assert fit is not None
    return (f"the profile does not record when {job.model}'s gradients become ready (an imported trace), and its "
            f"measured sync times ({fit.runs} runs{_derived_runs(fit)}) do not overturn DDP's usual overlap, which "
            f"misses them by x{math.exp(fit.default_error):.2f} ({fit.default_kept_because}): the prediction lets "
            "backward hide the allreduce as DDP's buckets usually allow, with the interval of a model whose overlap "
            "was read; `srifty profile` of the training script records it")


def overlap_fitted_note(job: "JobProfile") -> str:
    """The note of a job whose overlap window was read off its sync times (srifty.features.overlap)."""
    fit = job.overlap_fit
    assert fit is not None
    return (f"the profile does not record when {job.model}'s gradients become ready (an imported trace), and its "
            f"measured sync times show that backward hides little of its allreduce: the prediction lets the buckets "
            f"become ready in the last {fit.window:.0%} of its compute (fitted on {fit.runs} runs' sync "
            f"times{_derived_runs(fit)}, which DDP's usual overlap misses by x{math.exp(fit.default_error):.1f}), "
            "and the interval reaches down to the step at that usual overlap; `srifty profile` of the training "
            "script records it")


def gradient_estimated_note(grad_bytes: float) -> str:
    """Said of a multi-worker estimate for a job whose gradient size srifty inferred from its
    single-node sync times (srifty.features.overlap.estimate_gradient_size) instead of reading it."""
    return (f"gradient size estimated from the profile's single-node sync times ({grad_bytes / 1e6:.3g} MB), not "
            "stated: communication is simulated on that estimate, which those times fix only where backward hides "
            "little of the allreduce (Pollux models held out so: deepspeech2, whose allreduce shows, to 9% MAPE, "
            "the other three 15-25% too fast; docs/latency-model.md, section 4); give param_count or grad_bytes "
            "when importing (srifty profile records them)")

def several_models_note(model: str, ddp_models: int) -> str:
    """Said of a multi-worker estimate for a job whose script trains several DDP models."""
    return (f"{model}'s script trains {ddp_models} DDP models (a GAN's networks, say): what a step handed DDP's "
            "communication hooks (or, where none was seen, each model's gradients once) is simulated shared by "
            "the backwards that allreduce, each as its gradients become ready evenly through it, since the "
            "models' buckets are not recorded (docs/profiling.md, *Marking iterations*)")


def unknown_hook_note(model: str, hook: str) -> str:
    """Said of a multi-worker estimate for a job whose script registers a DDP communication hook
    srifty does not know (simulate.HOOK_ELEMENT_BYTES)."""
    return (f"{model}'s script registers the DDP communication hook {hook}, which srifty does not know: the "
            "allreduce is simulated with the gradients as they are, and a hook that compresses them (PowerSGD) "
            "makes the step across workers shorter than predicted")


def powersgd_note(model: str, powersgd: "PowerSgd", sent_bytes: float, grad_bytes: float) -> str:
    """Said of a multi-worker estimate for a job whose script compresses its gradients with PowerSGD."""
    return (f"{model}'s script compresses its gradients with PowerSGD (rank {powersgd.rank}): a step allreduces "
            f"{sent_bytes / 1e6:,.3g} MB of its {grad_bytes / 1e6:,.3g} MB of gradients, each bucket's uncompressed "
            "gradients and then its two factors in turn, "
            + ("with the compression's own compute as the profile measured it in the step (the time its backward "
               "waited, with any wait for the allreduces)" if powersgd.profiled else
               "without the compression's own compute, which the profile's plain first steps did not run "
               "(start_powerSGD_iter=2 while profiling measures it)")
            + f". Its first {powersgd.start_iter:,} steps run DDP's plain allreduce instead")


def sharded_optimizer_note(model: str, optimizer: str, gather_ms: float) -> str:
    """Said of a multi-worker estimate for a job whose optimizer shards its state (ZeRO)."""
    return (f"{model}'s optimizer is a {optimizer}: the all-gather of the updated parameters after each step "
            f"adds {readable_ms(gather_ms)} ms (half an allreduce of them); its own step, where the profile timed "
            "it, is scaled to each worker's shard of the parameters")


def sync_batchnorm_note(model: str, layers: int, sync_ms: float) -> str:
    """Said of a multi-worker estimate for a job with SyncBatchNorm layers: what their collectives add."""
    return (f"{model} has {layers} SyncBatchNorm layer(s): their statistics' collectives (two small allreduces "
            f"per layer and pass, which the layers after them wait for) add {readable_ms(sync_ms)} ms to the step, "
            "priced as NCCL's tree or ring, whichever is faster; the interval reaches from none of that time to "
            "the ring's (not measured: a profile on one node of several GPUs measures them there)")


def default_batch_note(batch: int, measured: Sequence[int], option: str) -> str | None:
    """Said where no per-worker batch was given and the profiles hold several: which one is taken
    (:func:`srifty.features.rows.default_batch`) and how to choose. None where they hold one."""
    batches = sorted(set(int(b) for b in measured))
    if len(batches) < 2:
        return None
    held = (", ".join(f"{b:,}" for b in batches) if len(batches) <= 6 else
            f"{len(batches)} batches from {batches[0]:,} to {batches[-1]:,}")
    return (f"per-worker batch {batch:,}: the profiles were measured at {held}, and without {option} srifty takes "
            f"the one the most runs measured (the smallest of those tied); give {option} for the batch you will "
            "train with")


def accumulation_note(model: str, passes: int) -> str | None:
    """Said of every prediction of a job whose script accumulates gradients: what its batch means."""
    return (f"{model}'s script accumulates gradients over {passes} forward-backward passes a step: a per-worker "
            f"batch here is a step's samples, {passes} passes of 1/{passes} of it each (a plan hands the script "
            "one pass's batch)") if passes > 1 else None


def readable_ms(ms: float) -> str:
    """A time in a note: whole milliseconds from 100 up, three significant figures below; never in
    exponent form (1,166, not 1.17e+03)."""
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.3g}"


def prior_network_note(prior: Sequence[Hardware], low: float, high: float) -> str:
    """What a row across nodes of ``prior`` (types whose network nobody measured) is told: where
    each network's figure comes from, and how far the interval spans for it (``low``..``high`` of
    the step)."""
    names = ", ".join(dict.fromkeys(h.name for h in prior))
    kinds = {h.inter_kind for h in prior}
    source = " and ".join(k for k in ("the instance's rate and AWS's per-flow limit" if "tcp" in kinds else "",
                                      "the catalog's EFA rate" if "efa" in kinds else "") if k)
    sweep = "`srifty profile --collectives --backend ec2 --nodes 2 --instance-types TYPE`"
    return (f"the network between {names} nodes was never measured: its bandwidth is a prior from {source} "
            f"(latency-model.md, section 3), and the interval spans x{low:.2f} to x{high:.2f} of the step for it"
            + (" (down to TCP, which NCCL runs over without the EFA plugin)" if "efa" in kinds else "")
            + (f"; {sweep} measures it, for a model fitted with that profile in its corpus (`srifty fit`)"
               if "tcp" in kinds else "")
            + (f"; srifty's EC2 backend attaches no EFA interface, so its sweep ({sweep}) measures only that TCP "
               "fallback, the interval's slow end, while nccl-tests' all_reduce_perf across two of its nodes, read "
               "with `srifty import-nccl`, measures the EFA network, for a model fitted with that profile in its "
               "corpus (`srifty fit`)" if "efa" in kinds else ""))


def intra_unstated_note(unstated: Sequence[Hardware], low: float, high: float) -> str:
    """What a row is told whose step depends on the intra-node link of ``unstated`` (types whose
    link no source states and nobody measured): how far the interval spans for it (``low``..``high``
    of the step)."""
    names = ", ".join(dict.fromkeys(h.name for h in unstated))
    return (f"{names}: no source srifty ships states the intra-node link (latency-model.md, section 3), so it "
            f"is taken as PCIe at {DEFAULT_INTRA_GBYTES_PER_S:g} GB/s, and the interval spans x{low:.2f} to "
            f"x{high:.2f} of the step for it (from half that rate to a link that never holds the ring back); "
            "`srifty profile --collectives --backend ec2 --nodes 2 --instance-types TYPE` measures it, for a model "
            "fitted with that profile in its corpus (`srifty fit`)")


def node_share_note(instance_type: str, nodes: int, share: float) -> str:
    """What a row across ``nodes`` nodes of ``instance_type`` is told where its network is taken
    at ``share`` of the type's figure (LinkScale.tcp_node_shares)."""
    return (f"{instance_type}'s network across {nodes} nodes is taken at x{share:.2f} of its fitted figure, as its "
            f"measured runs across {nodes} nodes showed (latency-model.md, section 3, 'The network at each node count')")


def loose_profile_note(model: str, instance_type: str, rel_ci: float) -> str:
    """The warning for a prediction built on a profile looser than LOOSE_PROFILE_CI."""
    return (f"{model}'s profile on {instance_type} knows its step time to ±{rel_ci:.0%} only (95% CI): "
            "intervals built on it are widened by that; re-profile with a longer --max-seconds")

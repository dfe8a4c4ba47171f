"""`srifty profile` end to end: real torchrun subprocesses running real DDP (gloo) jobs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from srifty import profile as profile_mod
from srifty import stats
from conftest import EXAMPLES, PROFILES, ROOT, SCRIPTS, run_srifty

if TYPE_CHECKING:  # pragma: no cover
    import torch

pytestmark = pytest.mark.slow

QUICK = ["--nproc", "2", "--max-seconds", "6", "--min-iterations", "8"]
FAST = ["--nproc", "2", "--max-seconds", "3", "--min-iterations", "8"]  # a small model's many quick steps


@pytest.fixture(scope="module")
def cnn_profile(tmp_path_factory: pytest.TempPathFactory) -> profile_mod.Profile:
    out = tmp_path_factory.mktemp("cnn") / "cnn.json"
    t0 = time.monotonic()
    res = run_srifty("profile", str(EXAMPLES / "cnn_resnet.py"), "--nproc", "2", "--out", str(out), "--json")
    wall = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["status"] == "complete"
    print(f"cnn_resnet --nproc 2 profiled in {wall:.1f} s wall")
    return profile_mod.load(out)


def test_cnn_profile_records_what_the_issue_asks(cnn_profile: profile_mod.Profile) -> None:
    doc = cnn_profile.doc
    assert doc["kind"] == "training" and doc["status"] == "complete"
    assert doc["stop_reason"] in ("converged", "time_cap", "iteration_cap")
    job = doc["job"]
    assert job["local_batch_size"] == 32  # the example's default, seen in the forward input
    assert job["grad_dtype"] == "float32"
    # gradient bytes are the parameters' bytes; the bucket layout covers all of them
    assert job["grad_bytes"] == job["param_count"] * 4
    assert sum(b["bytes"] for b in job["buckets"]) == job["grad_bytes"]
    assert len(job["buckets"]) >= 2  # 4.9 MB of gradients at DDP's default first-bucket cap of 1 MiB
    cl = doc["cluster"]
    assert cl["world_size"] == 2 and cl["backend"] == "gloo" and cl["nodes"] == 1
    assert cl["hosts"][0]["spec"]["logical_cpus"] >= 1
    assert doc["environment"]["torch"]
    meas = doc["measurement"]
    assert meas["warmup_iterations"] >= 1
    assert meas["iterations_used"] >= 8
    if doc["stop_reason"] == "converged":
        # the stopping rule saw the target met; the profile keeps a few more iterations
        # (the ranks stop together a few iterations later), judged again on their own
        assert meas["decision_rel_ci"] <= meas["target_rel_ci"]
        assert meas["achieved_rel_ci"] <= 1.5 * meas["target_rel_ci"]


def _expected_forward_flops(model: "torch.nn.Module", x: "torch.Tensor") -> tuple[int, int]:
    """(conv FLOPs, all FLOPs) of one forward, computed from the layers' shapes: 2 multiply-adds
    per output element and input element of a convolution's window, 2 per weight of a linear
    layer per sample."""
    import torch

    conv, dense = [], []

    def on_conv(m: torch.nn.Conv2d, args: tuple, out: torch.Tensor) -> None:
        conv.append(2 * out.numel() * (m.in_channels // m.groups) * m.kernel_size[0] * m.kernel_size[1])

    def on_linear(m: torch.nn.Linear, args: tuple, out: torch.Tensor) -> None:
        dense.append(2 * args[0].shape[0] * m.in_features * m.out_features)

    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            m.register_forward_hook(on_conv)
        elif isinstance(m, torch.nn.Linear):
            m.register_forward_hook(on_linear)
    with torch.no_grad():
        model(x)
    return sum(conv), sum(conv) + sum(dense)


def test_cnn_profile_counts_flops_and_picks_tf32(cnn_profile: profile_mod.Profile) -> None:
    # PyTorch lets cuDNN run float32 convolutions in TF32 by default: a float32 CNN is a TF32 job
    import torch

    sys.path.insert(0, str(EXAMPLES))
    try:
        from cnn_resnet import ResNet
    finally:
        sys.path.remove(str(EXAMPLES))
    conv, total = _expected_forward_flops(ResNet(), torch.randn(32, 3, 32, 32))
    job = cnn_profile.doc["job"]
    assert job["forward_flops"] == total
    assert job["tf32_flop_share"] == pytest.approx(conv / total)
    assert job["conv_flop_share"] == pytest.approx(conv / total)  # picks the GPU speed factors of convolutions
    assert job["precision"] == "tf32"


def test_compute_plus_exposed_comm_explains_iteration_time(cnn_profile: profile_mod.Profile) -> None:
    """Forward + backward compute + exposed communication + optimizer is within 10% of the iteration."""
    doc = cnn_profile.doc
    s = doc["summary"]
    parts = sum(s[k]["median"] for k in ("forward_ms", "backward_compute_ms", "exposed_comm_ms", "optimizer_ms"))
    it = s["iteration_ms"]["median"]
    assert abs(parts - it) / it < 0.10, (parts, it)
    # and iteration by iteration, on every rank, after warm-up
    warm = doc["measurement"]["warmup_iterations"]
    for rank in doc["ranks"]:
        ratios = []
        for rec in rank["iterations"][warm:]:
            total = rec["forward_ms"] + rec["backward_compute_ms"] + rec["exposed_comm_ms"] + rec["optimizer_ms"]
            ratios.append(abs(total - rec["wall_ms"]) / rec["wall_ms"])
        assert stats.median(ratios) < 0.10


def test_buckets_become_ready_during_backward(cnn_profile: profile_mod.Profile) -> None:
    s = cnn_profile.doc["summary"]
    buckets = s["buckets"]
    assert len(buckets) >= 2
    ready = [b["ready_ms"] for b in buckets]
    # DDP fills bucket 0 with the last layers, whose gradients are ready first
    assert ready == sorted(ready)
    bwd_compute = s["backward_compute_ms"]["median"]
    assert 0 < ready[0] < bwd_compute
    # the last bucket is ready when backward compute ends (same clock, same event)
    assert abs(ready[-1] - bwd_compute) / bwd_compute < 0.15
    for b in buckets:
        assert b["allreduce_ms"] is not None and b["allreduce_ms"] > 0
        assert b["end_ms"] >= b["ready_ms"]


def test_throughput_is_world_times_batch_over_iteration(cnn_profile: profile_mod.Profile) -> None:
    s = cnn_profile.doc["summary"]
    expected = 2 * 32 / (s["iteration_ms"]["median"] / 1e3)
    assert s["throughput_samples_per_s"] == pytest.approx(expected)


def test_batch_size_reaches_the_script(tmp_path: Path) -> None:
    out = tmp_path / "mlp"
    quick = ["--nproc", "1", "--max-seconds", "3", "--min-iterations", "8"]
    res = run_srifty("profile", str(EXAMPLES / "mlp_recsys.py"), *quick, "--batch-size", "16,64", "--out", str(out),
                     "--json")
    assert res.returncode == 0, res.stderr
    # several batch sizes: one profile each, in the directory, named by type and batch
    assert sorted(p.name for p in out.iterdir()) == ["local-b16.json", "local-b64.json"]
    assert [p["local_batch_size"] for p in json.loads(res.stdout)["profiles"]] == [16, 64]
    for b in (16, 64):
        doc = json.loads((out / f"local-b{b}.json").read_text())
        assert doc["job"]["local_batch_size"] == b and doc["job"]["requested_batch_size"] == b
        assert not doc["warnings"] or "looser" in doc["warnings"][0]
    # the directory is one model's compute curve: a batch between them is interpolated, one beyond is flagged
    inside = run_srifty("predict", "--profile", str(out), "--config", "1xlocal:1", "-b", "32", "--json")
    beyond = run_srifty("predict", "--profile", str(out), "--config", "1xlocal:1", "-b", "256", "--json")
    assert inside.returncode == 0 and beyond.returncode == 0, inside.stderr + beyond.stderr
    assert "is outside the" not in inside.stderr
    assert "per-worker batch 256 is outside the batches 16-64 profiled on local" in beyond.stderr


def test_the_compute_heavy_example_has_a_small_gradient(tmp_path: Path) -> None:
    """examples/conv_heavy.py, the evaluation's job for which scaling out pays: 35,642 parameters
    (its docstring), trained by two workers at the batch srifty gives it."""
    out = tmp_path / "conv.json"
    res = run_srifty("profile", str(EXAMPLES / "conv_heavy.py"), "--nproc", "2", "--batch-size", "4",
                     "--max-seconds", "3", "--min-iterations", "8", "--out", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["status"] == "complete" and doc["job"]["local_batch_size"] == 4 and doc["cluster"]["world_size"] == 2
    assert doc["job"]["param_count"] == 35_642 and "35,642 parameters" in (EXAMPLES / "conv_heavy.py").read_text()


def test_explicit_api_marks_iterations(tmp_path: Path) -> None:
    out = tmp_path / "explicit.json"
    res = run_srifty("profile", str(SCRIPTS / "explicit_api.py"), *QUICK, "--out", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    rec = doc["ranks"][0]["iterations"][-1]
    # two micro-batches per iteration: two forwards, two backwards, one step
    assert (rec["forwards"], rec["backwards"], rec["steps"]) == (2, 2, 1)
    # gradient accumulation over the two micro-batches of 32: the step's batch is 64 per worker;
    # an MLP under the default float32 matmul precision: no TF32, float32 math
    job = doc["job"]
    one_pass = 2 * 32 * (64 * 256 + 256 * 256 + 256 * 10)
    assert (job["local_batch_size"], job["accumulation"], job["forward_flops"]) == (64, 2, 2 * one_pass)
    assert (job["tf32_flop_share"], job["conv_flop_share"], job["precision"]) == (0.0, 0.0, "float32")
    # one whole iteration's operators, both micro-batches; the backward computes weight gradients
    # of the three layers and input gradients of the last two
    ops = job["operators"]
    assert ops["batch_size"] == 64 and ops["param_tensors"] == 6
    assert ops["phases"]["forward"]["flops"] == job["forward_flops"]
    assert ops["phases"]["backward"]["flops"] == 2 * (2 * one_pass - 2 * 32 * 64 * 256)
    assert ops["phases"]["optimizer"]["kernels"] >= 6 and ops["phases"]["optimizer"]["flops"] == 0
    # that iteration's tensor memory: plain SGD keeps no state, so a worker holds its parameters,
    # their gradients and DDP's buckets (another copy of the gradients) between iterations; the
    # peak holds at least the two hidden activations ReLU keeps for backward
    mem = job["memory"]
    assert mem["batch_size"] == 64 and mem["end_bytes"] == mem["held_bytes"] == 3 * job["grad_bytes"]
    assert 2 * job["grad_bytes"] <= mem["start_bytes"] <= 3 * job["grad_bytes"]
    assert mem["peak_bytes"] >= mem["end_bytes"] + 2 * 32 * 256 * 4
    # the counted iteration ran slowed by the count: never among the timed ones
    assert doc["measurement"]["warmup_iterations"] >= 2
    assert doc["schema_version"] == 2 and "input_ms" in doc["summary"]


def test_autocast_makes_the_profile_mixed_precision(tmp_path: Path) -> None:
    out = tmp_path / "amp.json"
    res = run_srifty("profile", str(SCRIPTS / "autocast.py"), *QUICK, "--out", str(out))
    assert res.returncode == 0, res.stderr
    job = json.loads(out.read_text())["job"]
    # the parameters (and gradients) stay float32; the math runs in bfloat16 tensor-core territory
    assert (job["grad_dtype"], job["autocast_dtype"], job["precision"]) == ("float32", "bfloat16", "amp")


def test_a_sequence_first_model_s_batch_is_its_tokens_second_dimension(tmp_path: Path) -> None:
    """An RNN language model fed (sequence 12, batch 6) tokens: the profile records batch 6 (its
    throughput and operator counts per sample with it), not 12, and does not blame the script; and
    the kernels its GRU launched step by step apart from the rest."""
    out = tmp_path / "lm.json"
    res = run_srifty("profile", str(SCRIPTS / "sequence_first.py"), *QUICK, "--batch-size", "6", "--out", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["job"]["local_batch_size"] == 6 and doc["job"]["operators"]["batch_size"] == 6
    assert not any("was requested" in w for w in doc["warnings"])
    assert {it["batch_size"] for r in doc["ranks"] for it in r["iterations"]} == {6}
    # its GRU ran step by step on the CPU: those kernels are kept apart, a GPU runs the layer fused
    for phase in ("forward", "backward"):
        counted = doc["job"]["operators"]["phases"][phase]
        assert counted["recurrent_units"] == 1 and counted["kernels"] > counted["recurrent_kernels"] > 12
    summary = doc["summary"]
    world = doc["cluster"]["world_size"]
    assert summary["throughput_samples_per_s"] == pytest.approx(world * 6 / (summary["iteration_ms"]["median"] / 1e3))


def test_a_compiled_model_is_profiled_and_says_its_operators_were_not_counted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.compile around the DDP module: counting its operators would break the compiled
    backward (an internal assert inside the user's step), so the profile is timed without the count
    and says so, and a GPU is not predicted from it; under TORCHDYNAMO_DISABLE=1, as the warning
    advises, the script runs eagerly and its operators are counted."""
    compiled = tmp_path / "compiled.json"
    res = run_srifty("profile", str(SCRIPTS / "compiled.py"), *QUICK, "--out", str(compiled))
    assert res.returncode == 0, res.stderr
    doc = json.loads(compiled.read_text())
    assert doc["status"] == "complete" and doc["job"]["operators"] is None
    assert doc["job"]["forward_flops"] > 0 and any("torch.compile" in w for w in doc["warnings"])
    res = run_srifty("predict", "--profile", str(compiled), "--config", "1xg5.xlarge:1")
    assert res.returncode != 0 and "TORCHDYNAMO_DISABLE=1" in res.stderr
    monkeypatch.setenv("TORCHDYNAMO_DISABLE", "1")
    eager = tmp_path / "eager.json"
    res = run_srifty("profile", str(SCRIPTS / "compiled.py"), *QUICK, "--out", str(eager))
    assert res.returncode == 0, res.stderr
    doc = json.loads(eager.read_text())
    assert doc["job"]["operators"]["phases"]["backward"]["kernels"] > 0
    assert not any("torch.compile" in w for w in doc["warnings"])


@pytest.mark.parametrize("hook, named, warned", [
    ("builtin-fp16", "builtin:FP16_COMPRESS", "cannot time"),
    ("powersgd", "torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.powerSGD_hook", "with PowerSGD (rank 1)"),
])
def test_a_script_s_communication_hook_is_named_and_kept(
        tmp_path: Path, hook: str, named: str, warned: str) -> None:
    """The script's own DDP communication hook stays the one that runs: srifty wraps a Python hook
    to time its buckets, and leaves a builtin (C++) one alone, which it used to replace, failing
    the script; the profile names the hook and says what srifty cannot see of it."""
    out = tmp_path / f"{hook}.json"
    res = run_srifty("profile", str(SCRIPTS / "comm_hook.py"), *QUICK, "--out", str(out), "--", hook)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["job"]["comm_hook"] == named
    assert any(warned in w for w in doc["warnings"] if "communication hook" in w)
    # a builtin hook's buckets go untimed; a Python one's are timed as DDP's own allreduce is
    assert bool(doc["job"]["buckets"]) == (hook != "builtin-fp16")
    if hook == "powersgd":
        # the tiny MLP's one bucket: its three weights compress (rank 1), its three biases (256 + 256
        # + 10 floats) do not; P holds 256 + 256 + 10 rows, Q 64 + 256 + 256 columns
        assert [b["sent"] for b in doc["job"]["buckets"]] == [[522 * 4, 522 * 4, 576 * 4]]
        # past its two plain steps the measured steps ran the compression
        assert doc["job"]["powersgd"] == {"rank": 1, "min_compression_rate": 2.0, "start_iter": 2, "batched": False,
                                          "profiled": True}
        assert all(it.get("compressed") for r in doc["ranks"] for it in r["iterations"][2:])
        res = run_srifty("predict", "--profile", str(out), "--config", "2xg5.xlarge")
        assert res.returncode == 0 and "allreduces 0.00648 MB of its 0.34 MB of gradients" in res.stderr


def test_a_sharded_optimizer_is_named_and_its_parameter_gather_simulated(tmp_path: Path) -> None:
    """ZeroRedundancyOptimizer steps its inner optimizer (one step an iteration, timed), then
    broadcasts each worker's shard of the parameters: the profile names it, and a step across
    nodes is predicted with that all-gather, half an allreduce of the parameters, on top."""
    out = tmp_path / "zero.json"
    res = run_srifty("profile", str(SCRIPTS / "sharded_optimizer.py"), *QUICK, "--out", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["job"]["sharded_optimizer"] == "ZeroRedundancyOptimizer"
    assert {it["steps"] for r in doc["ranks"] for it in r["iterations"]} == {1}
    assert any("the optimizer is a ZeroRedundancyOptimizer" in w for w in doc["warnings"])


def test_sync_batchnorm_runs_on_a_cpu_and_its_collectives_are_simulated(tmp_path: Path) -> None:
    """PyTorch's SyncBatchNorm raises on a CPU; under srifty it runs there as plain batch norm, the
    profile lists its layers' features, and a step across nodes is predicted with their
    statistics' collectives (two small allreduces per layer) on top."""
    out = tmp_path / "syncbn.json"
    res = run_srifty("profile", str(SCRIPTS / "sync_batchnorm.py"), *QUICK, "--out", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["job"]["sync_batchnorm"] == [8, 16]
    assert any("2 SyncBatchNorm layer(s)" in w and "plain batch norm" in w for w in doc["warnings"])


def test_two_ddp_models_are_profiled_as_one_training_step(tmp_path: Path) -> None:
    """A GAN wraps two models in DDP, each with its own optimizer: an iteration is the training
    step, one step of each optimizer (not one per optimizer step, which halved its time), the
    gradients are both models', and a step allreduces what the hooks were handed; the profile
    says what it cannot see (their buckets)."""
    out = tmp_path / "gan.json"
    res = run_srifty("profile", str(SCRIPTS / "two_models.py"), *QUICK, "--out", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    generator, critic = 8 * 32 + 32 + 32 * 16 + 16, 16 * 64 + 64 + 64 * 1 + 1
    assert (doc["job"]["param_count"], doc["job"]["grad_bytes"]) == (generator + critic, 4 * (generator + critic))
    # past the first iteration (the critic's step alone: the generator's optimizer had not stepped
    # yet), each holds the five forwards, two backwards and two steps of the loop, at its batch of 16
    shapes = {(it["forwards"], it["backwards"], it["steps"], it["batch_size"])
              for r in doc["ranks"] for it in r["iterations"][1:]}
    assert shapes == {(5, 2, 2, 16)}
    assert doc["job"]["buckets"] == [] and doc["summary"]["buckets"] == []
    # a step hands DDP's hooks the critic's gradients twice (in its step and in the generator's,
    # whose loss backpropagates through it) and the generator's once
    assert doc["job"]["allreduced_bytes"] == 4 * (2 * critic + generator)
    assert doc["job"]["synced_passes"] == 2  # in both networks' steps' backwards
    warning = next(w for w in doc["warnings"] if "DistributedDataParallel" in w)
    assert "wraps 2 models" in warning and "a step handed to DDP's communication hooks" in warning
    assert doc["job"]["ddp_models"] == 2
    # predict says so of a step across workers, where the allreduce counts, and not of one worker alone
    res = run_srifty("predict", "--profile", str(out), "--config", "2xc5.2xlarge", "--config", "1xc5.2xlarge:1")
    assert res.returncode == 0, res.stderr
    said = [line for line in res.stderr.splitlines() if "trains 2 DDP models" in line]
    assert said and all(line.startswith("warning: 2xc5.2xlarge") for line in said)
    # and recommend, whose configurations of several workers all carry it, says it once
    res = run_srifty("recommend", "--profile", str(out), "--instance-types", "g5.*", "--json")
    assert res.returncode == 0, res.stderr
    notes = json.loads(res.stdout)["notes"]
    assert sum("trains 2 DDP models" in n for n in notes) == 1


def test_a_script_s_own_batch_option_is_given_the_batch_and_so_is_its_plan(tmp_path: Path) -> None:
    """A script that takes its batch as an option (HuggingFace's --per_device_train_batch_size) is
    given it by `--batch-arg`: each worker appends the option and the batch to the script's
    arguments; the profile records the script's own arguments and the option apart, and a plan's
    node script gives the option the node's batch, which the script then trains at."""
    out = tmp_path / "opt.json"
    res = run_srifty("profile", str(SCRIPTS / "batch_option.py"), *QUICK, "--batch-size", "12",
                     "--batch-arg", "--per_device_train_batch_size", "--out", str(out), "--", "--steps", "100000")
    assert res.returncode == 0, res.stderr
    job = profile_mod.load(out).doc["job"]
    assert (job["local_batch_size"], job["args"], job["batch_arg"]) == (12, ["--steps", "100000"],
                                                                       "--per_device_train_batch_size")
    res = run_srifty("recommend", "--profile", str(out), "--instance-types", "g5.xlarge", "--max-nodes", "1",
                     "--batch-size", "20", "--plan", str(tmp_path / "plan"))
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "plan" / "plan.json").read_text())["batch_arg"] == "--per_device_train_batch_size"
    [node] = (tmp_path / "plan").glob("node-*.sh")
    text = node.read_text()
    assert "export SRIFTY_BATCH_SIZE=20\n" in text
    assert ' --steps 100000 --per_device_train_batch_size "$SRIFTY_BATCH_SIZE" "$@"' in text
    # the node script run as a user would, on one node: the script trains at the plan's batch
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    ran = subprocess.run(["bash", str(node), "--steps", "3"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert "trained at a per-worker batch of 20" in ran.stdout
    # without --batch-arg the script trains at its own option's batch, and the warning says how to give it ours
    res = run_srifty("profile", str(SCRIPTS / "batch_option.py"), *QUICK, "--batch-size", "12",
                     "--out", str(tmp_path / "ignored.json"), "--", "--per_device_train_batch_size", "8", "--steps", "30")
    assert res.returncode == 0, res.stderr
    doc = profile_mod.load(tmp_path / "ignored.json").doc
    assert doc["job"]["local_batch_size"] == 8
    assert any(w.startswith("--batch-size 12 was requested but the model saw batches of 8: the script does not read "
                            "SRIFTY_BATCH_SIZE (give the script's own option for its batch with --batch-arg")
               for w in doc["warnings"]), doc["warnings"]
    for bad, said in ((["--batch-size", "12", "--batch-arg", "per_device_train_batch_size"],
                       "--batch-arg takes the script's option for its per-worker batch"),
                      (["--batch-arg=--per_device_train_batch_size"], "and no --batch-size was given")):
        res = run_srifty("profile", str(SCRIPTS / "batch_option.py"), *QUICK, *bad, "--dry-run")
        _assert_clean_error(res, said)


def test_a_step_through_a_closure_times_its_forward_and_backward_as_such(tmp_path: Path) -> None:
    """``opt.step(closure)``, as PyTorch Lightning steps, runs the forward and the backward inside
    the optimizer step: they are timed and counted as forward and backward, not as the optimizer's
    (which made the phases of each iteration add up to more than the iteration)."""
    ops, iterations = {}, {}
    for form in ("closure", "plain"):
        out = tmp_path / f"{form}.json"
        args = ["--", "--plain"] if form == "plain" else []
        res = run_srifty("profile", str(SCRIPTS / "closure_step.py"), *FAST, "--out", str(out), *args)
        assert res.returncode == 0, res.stderr
        doc = json.loads(out.read_text())
        ops[form] = {k: v for k, v in doc["job"]["operators"]["phases"].items() if k in ("forward", "backward", "optimizer")}
        iterations[form] = [it for r in doc["ranks"] for it in r["iterations"][doc["measurement"]["warmup_iterations"]:]]
        assert doc["job"]["forward_flops"] == 2 * 32 * (64 * 512 + 512 * 512 + 512 * 10)
    assert ops["closure"] == ops["plain"] and ops["closure"]["optimizer"]["flops"] == 0
    assert ops["closure"]["forward"]["flops"] == 2 * 32 * (64 * 512 + 512 * 512 + 512 * 10)
    for form, its in iterations.items():
        parts = [it["forward_ms"] + it["backward_ms"] + it["optimizer_ms"] + it["input_ms"] for it in its]
        within = sum(p <= it["wall_ms"] * 1.01 for p, it in zip(parts, its))
        assert within >= 0.9 * len(its), (form, within, len(its))


def test_gradient_accumulation_counts_every_pass_s_samples(tmp_path: Path) -> None:
    """Four forward-backward passes of 6 samples, then one optimizer step: the profile's batch is
    the step's 24 samples per worker (its throughput, arithmetic and operator count with them),
    not one pass's; the batch asked for is one pass's, and a plan hands the script one pass's."""
    out = tmp_path / "acc.json"
    res = run_srifty("profile", str(SCRIPTS / "accumulates.py"), *QUICK, "--batch-size", "6", "--out", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    job, summary = doc["job"], doc["summary"]
    assert (job["local_batch_size"], job["requested_batch_size"], job["accumulation"]) == (24, 6, 4)
    assert job["operators"]["batch_size"] == 24 and job["forward_flops"] == 4 * 6 * 2 * (64 * 128 + 128 * 10)
    assert not any("was requested" in w for w in doc["warnings"])
    [said] = [w for w in doc["warnings"] if "accumulates gradients: 4 forward-backward passes" in w]
    assert said.endswith("SRIFTY_BATCH_SIZE is one pass's batch.") and job["synced_passes"] == 1
    world = doc["cluster"]["world_size"]
    assert summary["throughput_samples_per_s"] == pytest.approx(world * 24 / (summary["iteration_ms"]["median"] / 1e3))
    res = run_srifty("recommend", "--profile", str(out), "--instance-types", "g5.xlarge", "--max-nodes", "1",
                     "--plan", str(tmp_path / "plan"))
    assert res.returncode == 0, res.stderr
    said = "note: accumulates's script accumulates gradients over 4 forward-backward passes a step"
    assert said in res.stderr
    res = run_srifty("predict", "--profile", str(out), "--config", "1xg5.xlarge")
    assert res.returncode == 0 and said in res.stderr and " 24 " in res.stdout
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert plan["passes"] == 4 and [n["local_batch_size"] for n in plan["nodes"]] == [24]
    [script] = (tmp_path / "plan").glob("node-*.sh")
    assert "export SRIFTY_BATCH_SIZE=6\n" in script.read_text()
    from srifty.launch import request_for

    assert request_for(plan, "emulated", 5.0).batch_size == 6
    # without no_sync every pass allreduces, and a step across nodes is predicted with four allreduces
    synced = tmp_path / "synced.json"
    res = run_srifty("profile", str(SCRIPTS / "accumulates.py"), *QUICK, "--batch-size", "6", "--out", str(synced),
                     "--", "--sync-every-pass")
    assert res.returncode == 0, res.stderr
    doc = json.loads(synced.read_text())
    assert doc["job"]["synced_passes"] == 4
    assert any("4 of the 4 passes allreduced their gradients, and srifty predicts" in w for w in doc["warnings"])
    parts = {}
    for path in (out, synced):
        res = run_srifty("predict", "--profile", str(path), "--config", "2xg5.xlarge", "--json")
        assert res.returncode == 0, res.stderr
        parts[path] = json.loads(res.stdout)["parts"]
    assert parts[synced]["communication_ms"] > 2 * parts[out]["communication_ms"] > 0


def test_precision_of_a_job() -> None:
    from srifty.profiling.launcher import job_precision, tf32_flop_share

    assert job_precision({"grad_dtype": "float32", "autocast_dtype": None, "float32_matmul_precision": "highest"}) \
        == "float32"
    assert job_precision({"grad_dtype": "float32", "autocast_dtype": "float16"}) == "amp"
    assert job_precision({"grad_dtype": "float32", "float32_matmul_precision": "high"}) == "tf32"
    assert job_precision({"grad_dtype": "bfloat16", "float32_matmul_precision": "high"}) == "bfloat16"
    assert job_precision({}) is None
    # with the forward's FLOPs counted, what runs in TF32 decides: cuDNN convolutions (on by
    # default) and matmuls (only at "high"/"medium")
    cnn = {"grad_dtype": "float32", "conv_flop_share": 0.97, "float32_matmul_precision": "highest"}
    assert job_precision({**cnn, "cudnn_allow_tf32": True}) == "tf32"
    assert job_precision({**cnn, "cudnn_allow_tf32": False}) == "float32"
    assert job_precision({**cnn, "conv_flop_share": 0.1, "cudnn_allow_tf32": True}) == "float32"
    assert job_precision({**cnn, "conv_flop_share": 0.1, "float32_matmul_precision": "high"}) == "tf32"
    assert tf32_flop_share({**cnn, "cudnn_allow_tf32": True, "float32_matmul_precision": "high"}) == 1.0
    assert tf32_flop_share({**cnn, "cudnn_allow_tf32": False}) == 0.0


def test_more_workers_than_gpus_is_refused_before_launch() -> None:
    from srifty.errors import SriftyError
    from srifty.profiling.launcher import ProfileRequest, check_gpu_count, worker_env

    one_gpu = 1
    with pytest.raises(SriftyError, match=r"--nproc asks for 2 workers.*1 CUDA GPU;") as err:
        check_gpu_count(ProfileRequest(script="train.py", nproc=2), one_gpu)
    assert "--nproc 1 or fewer" in (err.value.hint or "") and "add --device cpu" in (err.value.hint or "")
    with pytest.raises(SriftyError, match=r"--world-sizes asks for 4 workers.*2 CUDA GPUs") as err:
        check_gpu_count(ProfileRequest(script=None, collectives=True, world_sizes=[2, 4]), 2)
    assert "--world-sizes 2 or fewer" in (err.value.hint or "")
    with pytest.raises(SriftyError, match=r"--world-sizes asks for 2 workers.*1 CUDA GPU;") as err:
        check_gpu_count(ProfileRequest(script=None, collectives=True, world_sizes=[2]), 1)
    assert "needs two GPUs or more" in (err.value.hint or "")  # not "--world-sizes 1": an allreduce needs 2
    check_gpu_count(ProfileRequest(script="train.py", nproc=2), 2)  # one worker per GPU: fine
    check_gpu_count(ProfileRequest(script="train.py", nproc=8), 0)  # CPU workers: any number
    # --device cpu hides the GPUs from the script too, not only from srifty's timers
    assert worker_env(ProfileRequest(script="t.py", device="cpu"), "/r")["CUDA_VISIBLE_DEVICES"] == ""
    assert "CUDA_VISIBLE_DEVICES" not in worker_env(ProfileRequest(script="t.py"), "/r")


def test_dry_run_prints_the_command_and_runs_nothing(tmp_path: Path) -> None:
    out = tmp_path / "never.json"
    res = run_srifty("profile", str(EXAMPLES / "cnn_resnet.py"), "--nproc", "2", "--dry-run", "--out", str(out))
    assert res.returncode == 0
    assert "torch.distributed.run" in res.stdout and "--nproc-per-node 2" in res.stdout
    assert "srifty.profiling.worker" in res.stdout
    assert not out.exists()


def _assert_clean_error(res: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    assert res.stderr.startswith("Error: ")
    for n in needles:
        assert n in res.stderr, res.stderr


def test_missing_script(tmp_path: Path) -> None:
    res = run_srifty("profile", str(tmp_path / "nope.py"), "--nproc", "2")
    _assert_clean_error(res, "does not exist")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the machine has the GPU the script asks for")
def test_a_gpu_script_on_a_cpu_is_told_how_to_run_on_either(tmp_path: Path, no_orphans) -> None:
    res = run_srifty("profile", str(SCRIPTS / "asks_for_cuda.py"), "--nproc", "1", "--out", str(tmp_path / "p.json"))
    _assert_clean_error(res, "asked for a GPU that its machine does not have",
                        "torch.cuda.is_available() else 'gloo'", "*A GPU script on a CPU*")
    # torch's own words, quoted: a CPU build's, or a CUDA build's on a machine without a driver
    assert "not compiled with CUDA enabled. " in res.stderr or "Found no NVIDIA driver on your system. " in res.stderr
    no_orphans("asks_for_cuda.py")


def test_script_that_raises_keeps_partial_profile(tmp_path: Path, no_orphans) -> None:
    out = tmp_path / "raises.json"
    res = run_srifty("profile", str(SCRIPTS / "raises.py"), *QUICK, "--out", str(out))
    _assert_clean_error(res, "ValueError", "bad learning-rate schedule")
    doc = profile_mod.load(out).doc  # partial, and still valid
    assert doc["status"] == "partial" and "ValueError" in doc["partial_reason"]
    assert len(doc["ranks"][0]["iterations"]) >= 1
    no_orphans(str(SCRIPTS / "raises.py"))


def test_script_that_never_calls_backward(tmp_path: Path, no_orphans) -> None:
    res = run_srifty("profile", str(SCRIPTS / "no_backward.py"), *QUICK, "--out", str(tmp_path / "nb.json"))
    _assert_clean_error(res, "never called backward()")
    assert not (tmp_path / "nb.json").exists()  # nothing was measured, so nothing to keep
    no_orphans(str(SCRIPTS / "no_backward.py"))


@pytest.mark.parametrize("script, args, other", [
    ("data_parallel.py", (), "torch.nn.DataParallel"),
    ("fsdp_elsewhere.py", (), "FSDP2 (fully_shard)"),
    ("fsdp_elsewhere.py", ("--", "fsdp1"), "FSDP (FullyShardedDataParallel)"),
])
def test_script_that_trains_without_ddp_is_told_what_srifty_predicts(
        tmp_path: Path, no_orphans, script: str, args: tuple[str, ...], other: str) -> None:
    """A script that trains with another kind of parallelism (nn.DataParallel; FSDP2 or FSDP, set up
    in a module of its own that the script's source does not show; DeepSpeed alike) never runs a
    DDP forward: the error names what it uses, as the workers saw it built, and what to do. FSDP
    fails on a CPU with torch's own words, which the error keeps beside the same advice."""
    res = run_srifty("profile", str(SCRIPTS / script), *QUICK, "--out", str(tmp_path / "other.json"), *args)
    _assert_clean_error(res, f" trains with {other}", "not DistributedDataParallel", "Wrap the model in torch.nn.parallel.")
    import torch  # whether this machine could build FSDP at all

    if args and not torch.cuda.is_available():
        assert "its rank 0 failed with RuntimeError: FSDP needs a non-CPU accelerator device" in res.stderr
    no_orphans(str(SCRIPTS / script))


@pytest.mark.parametrize("mode, did", [
    ("spawn", "starts its own workers with torch.multiprocessing.spawn(demo_basic, nprocs=2)"),
    ("own-port", "sets a rendezvous of its own (MASTER_PORT=12355, where torchrun's is "),
    ("alone", "sets up a process group of its own: rank 0 of 1, where torchrun started this worker as rank "),
])
def test_a_script_that_launches_itself_is_told_the_change_that_runs_it(
        tmp_path: Path, no_orphans, mode: str, did: str) -> None:
    """PyTorch's DDP tutorial starts its workers with torch.multiprocessing.spawn and sets their
    rendezvous itself: under torchrun the workers would hang until the start-up timeout, or, given a
    world of one, each train alone while the profile timed allreduces that never left it. Each
    fails at once instead, and the error names what to change; the script so changed profiles."""
    script = str(SCRIPTS / "spawns_workers.py")
    res = run_srifty("profile", script, *QUICK, "--out", str(tmp_path / "spawn.json"), "--", mode)
    _assert_clean_error(res, did, "no rendezvous of its own (MASTER_ADDR, MASTER_PORT, a tcp:// init_method)",
                        *(["call demo_basic once in place of the spawn"] if mode == "spawn" else []))
    no_orphans(script)
    if mode == "spawn":
        out = tmp_path / "torchrun.json"
        res = run_srifty("profile", script, *QUICK, "--out", str(out), "--", "torchrun")
        assert res.returncode == 0, res.stderr
        assert profile_mod.load(out).doc["job"]["param_count"] == 10 * 10 + 10 + 10 * 5 + 5


def test_a_module_is_profiled_as_torchrun_m_runs_it_and_its_plan_runs_it_so(tmp_path: Path) -> None:
    """Training code in a package, with a relative import, runs as `torchrun -m mypkg.train` does:
    `srifty profile -m mypkg.train` profiles it from the directory it runs in, its arguments after
    `--`; the profile names the module, and a plan's torchrun runs `-m mypkg.train` too. A module
    that is not there is told at once."""
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text("import torch.nn as nn\n\ndef build(width):\n"
                                  "    return nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, 4))\n")
    (pkg / "train.py").write_text(
        "import sys\nimport torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import "
        "DistributedDataParallel as DDP\nfrom .model import build\n\n"
        "dist.init_process_group('gloo')\nmodel = DDP(build(int(sys.argv[sys.argv.index('--width') + 1])))\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.01)\nfor _ in range(100000):\n"
        "    opt.zero_grad()\n    model(torch.randn(8, 16)).sum().backward()\n    opt.step()\n")
    out = tmp_path / "pkg.json"
    res = run_srifty("profile", "-m", "mypkg.train", *QUICK, "--out", str(out), "--", "--width", "32", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    job = profile_mod.load(out).doc["job"]
    assert (job["model"], job["module"], job["script"], job["args"]) == ("train", "mypkg.train", "mypkg/train.py",
                                                                           ["--width", "32"])
    assert job["param_count"] == 16 * 32 + 32 + 32 * 4 + 4
    res = run_srifty("recommend", "--profile", str(out), "--instance-types", "g5.xlarge", "--max-nodes", "2",
                     "--plan", str(tmp_path / "plan"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    [node] = sorted((tmp_path / "plan").glob("node-*.sh"))[:1]
    assert " -m mypkg.train --width 32" in node.read_text()
    assert json.loads((tmp_path / "plan" / "plan.json").read_text())["module"] == "mypkg.train"
    res = run_srifty("profile", "-m", "mypkg.nothere", *QUICK, cwd=tmp_path)
    _assert_clean_error(res, "No module 'mypkg.nothere' to run from", "where `python -m MODULE` runs your training")


def test_a_script_s_refused_arguments_are_shown_with_where_they_go(tmp_path: Path) -> None:
    """A script whose argparse refuses its command line exits with status 2, which alone says
    nothing: the error shows what argparse refused, how to pass the script's arguments, and,
    where it asks for --local_rank, that torchrun gives the rank in the environment; a script
    that exits with a status of its own is shown the last lines it printed."""
    script = str(SCRIPTS / "needs_args.py")
    res = run_srifty("profile", script, *QUICK, "--out", str(tmp_path / "args.json"))
    _assert_clean_error(res, "stopped at its command line: needs_args.py: error: the following arguments are "
                        "required: --data, --local_rank.", "after `--`", "LOCAL_RANK environment variable")
    res = run_srifty("profile", script, *QUICK, "--out", str(tmp_path / "args.json"), "--", "--local_rank", "0")
    _assert_clean_error(res, "are required: --data.", "after `--`")
    assert "LOCAL_RANK" not in res.stderr
    # a status of its own: what the script printed last says why
    res = run_srifty("profile", script, *QUICK, "--out", str(tmp_path / "args.json"), "--", "--local_rank", "0",
                     "--data", str(tmp_path / "nowhere"))
    _assert_clean_error(res, f"failed with SystemExit: exit status 3 after printing: starting rank 0 / "
                        f"{tmp_path / 'nowhere'}: no such data set.")


def test_worker_crash_keeps_partial_profile_beside_a_complete_one(tmp_path: Path, no_orphans) -> None:
    """The crashed run's records are kept, marked partial; the complete profile already at --out
    (an earlier good run) is not replaced by them but kept, the partial one beside it."""
    out = tmp_path / "crash.json"
    shutil.copy(PROFILES / "local" / "cnn_resnet.json", out)
    before = out.read_bytes()
    res = run_srifty("profile", str(SCRIPTS / "crash_rank1.py"), "--nproc", "2", "--max-seconds", "60",
                     "--min-iterations", "1000", "--out", str(out))
    assert res.returncode != 0 and "Traceback" not in res.stderr
    partial = tmp_path / "crash.partial.json"
    assert f"kept in {partial}" in res.stderr
    assert out.read_bytes() == before
    doc = profile_mod.load(partial).doc
    assert doc["status"] == "partial"
    assert len(doc["ranks"][0]["iterations"]) >= 20
    no_orphans(str(SCRIPTS / "crash_rank1.py"))


def test_hung_worker_is_stopped(tmp_path: Path, no_orphans) -> None:
    """A rank that stops training hangs the other in its allreduce: the run is stopped, what was
    measured is kept, and the error says where each rank was waiting."""
    out = tmp_path / "hang.json"
    res = run_srifty("profile", str(SCRIPTS / "hang_rank1.py"), "--nproc", "2", "--max-seconds", "60",
                     "--min-iterations", "1000", "--hang-timeout", "4", "--out", str(out))
    # where each rank waited: rank 1 asleep in the script, rank 0 in backward, for the allreduce
    _assert_clean_error(res, "hung", "(rank 0 was waiting in _engine_run_backward (torch/autograd/graph.py:",
                        "), from line 7 of hang_rank1.py; rank 1 was waiting in <module> (hang_rank1.py:10))")
    doc = profile_mod.load(out).doc
    assert doc["status"] == "partial" and doc["stop_reason"] == "hung"
    assert len(doc["ranks"][0]["iterations"]) >= 20
    no_orphans(str(SCRIPTS / "hang_rank1.py"))


def test_batch_that_does_not_fit_in_memory(tmp_path: Path, no_orphans) -> None:
    # the example's synthetic data set holds 4 batches per worker: 2e7 images of 3x32x32
    # float32 are 2 TB, far above this machine's memory
    # after a batch that fits: that profile is kept, and the error says where
    res = run_srifty("profile", str(EXAMPLES / "cnn_resnet.py"), *QUICK, "--batch-size", "8,20000000",
                     "--max-seconds", "3", "--out", str(tmp_path / "cnn"))
    kept = tmp_path / "cnn" / "local-b8.json"
    progress, _, error = res.stderr.partition("Error: ")  # one line per batch size started, then the error
    assert progress.splitlines()[0].startswith("batch size 8 (1 of 2) -> ")
    _assert_clean_error(subprocess.CompletedProcess(res.args, res.returncode, res.stdout, "Error: " + error),
                        "out of memory", "smaller --batch-size", f"already measured are kept: {kept}")
    assert json.loads(kept.read_text())["status"] == "complete"
    no_orphans(str(EXAMPLES / "cnn_resnet.py"))


def test_ctrl_c_stops_everything_and_keeps_partial(tmp_path: Path, no_orphans) -> None:
    out = tmp_path / "int.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "srifty", "profile", str(SCRIPTS / "slow.py"), "--nproc", "2", "--max-seconds", "120",
         "--min-iterations", "1000", "--out", str(out)],
        cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    # wait until iterations are being recorded, then press Ctrl-C
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and _recorded(proc.pid) < 5:
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    doc = profile_mod.load(out).doc
    assert doc["status"] == "partial" and doc["stop_reason"] == "interrupted"
    no_orphans(str(SCRIPTS / "slow.py"))


def _recorded(pid: int) -> int:
    """Iterations rank 0 has flushed so far, found through the run directory in the workers' env."""
    import psutil

    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return 0
    for k in kids:
        try:
            run_dir = k.environ().get("SRIFTY_PROFILE_DIR")
        except psutil.Error:
            continue
        if run_dir and (Path(run_dir) / "rank0.json").exists():
            try:
                return len(json.loads((Path(run_dir) / "rank0.json").read_text())["iterations"])
            except (OSError, ValueError):
                return 0
    return 0


def test_collectives_sweep(tmp_path: Path) -> None:
    out = tmp_path / "coll.json"
    res = run_srifty("profile", "--collectives", "--world-sizes", "2", "--max-bytes", str(256 * 1024),
                     "--repeats", "3", "--out", str(out), "--json")
    assert res.returncode == 0, res.stderr
    doc = profile_mod.load(out).doc
    rows = doc["collectives"]
    assert [r["bytes"] for r in rows] == [4096 * 2**i for i in range(7)]  # 4 KiB .. 256 KiB
    for r in rows:
        assert r["world_size"] == 2 and len(r["times_ms"]) == 3
        assert r["median_ms"] == pytest.approx(stats.median(r["times_ms"]))
        algbw = r["bytes"] / (r["median_ms"] / 1e3) * 8 / 1e9
        assert r["algbw_gbps"] == pytest.approx(algbw)
        assert r["busbw_gbps"] == pytest.approx(algbw * 2 * (2 - 1) / 2)

"""The in-worker recorder: its progress file, written by a flusher thread and by the main thread
(at a stop, on failure, on SIGTERM), which must never trip over each other; and what its hooks
read off each forward (the batch)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from srifty.profiling.instrument import Recorder, WorkerSettings


def test_final_flush_never_races_the_flusher_thread(tmp_path: Path) -> None:
    rec = Recorder(WorkerSettings(out_dir=str(tmp_path)))
    rec.start_flusher(interval_s=0.0)  # flush as fast as it can, on its own thread
    try:
        for _ in range(500):  # the main thread's flushes (stop rule, errors) at the same time
            rec._dirty = True  # as the training loop does: the flusher always has something to write
            rec.flush()
    finally:
        rec.stop_flusher()
    assert rec._flusher is not None and not rec._flusher.is_alive()  # stop_flusher waits for it
    doc = json.loads((tmp_path / "rank0.json").read_text())
    assert doc["rank"] == 0 and doc["world_size"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["rank0.json"]  # no temporary file left behind


def _transformer(batch_first: bool) -> nn.Module:
    layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=batch_first)
    return nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)


@pytest.mark.parametrize("layers, shape, batch", [
    ("gru", (12, 6), 6),               # (sequence, batch) tokens into a sequence-first GRU
    ("gru-batch-first", (6, 12), 6),   # (batch, sequence) into one that takes the batch first
    ("transformer", (12, 6, 16), 6),   # nn.TransformerEncoder's default layout is sequence first
    ("transformer-batch-first", (6, 12, 16), 6),
    ("gru", (6, 6), 6),                # as long as it is wide: either reading is the batch
    ("mlp", (6, 16), 6),               # no layer that says: the first dimension
    ("detector", (3, 20, 24), 5),      # a list of 5 images of 3 x 20 x 24, as torchvision's detection models take
    ("two-inputs", (3, 6, 16), 3),     # a tuple of inputs is not a list of samples: the first one's first dimension
])
def test_the_batch_is_read_off_the_forward_s_inputs_and_its_layers(
        tmp_path: Path, layers: str, shape: tuple[int, ...], batch: int) -> None:
    class Lm(nn.Module):
        def __init__(self, batch_first: bool) -> None:
            super().__init__()
            self.embed, self.rnn = nn.Embedding(50, 16), nn.GRU(16, 8, batch_first=batch_first)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.rnn(self.embed(tokens))[0]

    class Detector(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)

        def forward(self, images: list[torch.Tensor] | tuple[torch.Tensor, ...]) -> torch.Tensor:
            return self.conv(torch.stack(list(images))).sum((1, 2, 3))

    model = {"gru": lambda: Lm(False), "gru-batch-first": lambda: Lm(True), "mlp": lambda: nn.Linear(16, 4),
             "transformer": lambda: _transformer(False), "transformer-batch-first": lambda: _transformer(True),
             "detector": Detector, "two-inputs": lambda: Detector()}[layers]()
    model._srifty_hook_registered = True  # a stand-in for the DDP module: no communication hook to place
    rec = Recorder(WorkerSettings(out_dir=str(tmp_path)))
    if layers == "detector":
        x = [torch.randn(*shape) for _ in range(batch)]
    elif layers == "two-inputs":
        x = (torch.randn(3, 20, 24), torch.randn(3, 20, 24))
    else:
        x = torch.randint(0, 50, shape) if len(shape) == 2 and layers != "mlp" else torch.randn(*shape)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    for _ in range(3):  # the first forward reads the layout; the later ones take the batch from it
        rec.hooks.on_forward_pre(model, (x,), {})
        model(x)
        rec.hooks.on_forward_post(model, (x,), None)
        seen.append(rec._open.batch_size)
        rec.hooks.on_step_pre(opt, (), {})
        rec.hooks.on_step_post(opt, (), {})
    assert seen == [batch] * 3
    assert rec.hooks._layout is None  # the global hook on every layer is gone


def test_an_iteration_is_one_step_of_every_optimizer_that_steps_as_often(tmp_path: Path) -> None:
    """Two optimizers stepped in turn (a GAN's) make one iteration; one that steps once (a
    warm-up's) or every tenth step joins the iteration it steps in and never holds one open."""
    model = nn.Linear(4, 2)
    model._srifty_hook_registered = True  # a stand-in for the DDP module: no communication hook to place
    rec = Recorder(WorkerSettings(out_dir=str(tmp_path)))
    gen, critic, warmup, slow = (torch.optim.SGD(model.parameters(), lr=0.1) for _ in range(4))
    x = torch.randn(3, 4)

    def forward_and_step(*opts: torch.optim.Optimizer) -> None:
        rec.hooks.on_forward_pre(model, (x,), {})
        rec.hooks.on_forward_post(model, (x,), None)
        for opt in opts:
            rec.hooks.on_step_pre(opt, (), {})
            rec.hooks.on_step_post(opt, (), {})

    for _ in range(6):
        forward_and_step(critic)
        forward_and_step(gen)
    # the first iteration closed on the critic's step alone: the generator's had not stepped yet
    assert [it["steps"] for it in rec.iterations] == [1] + [2] * 5
    closed = len(rec.iterations)
    forward_and_step(warmup)
    for _ in range(20):
        forward_and_step(critic)
        forward_and_step(gen)
    # the warm-up's step joins the open iteration (the generator's, the warm-up's, the critic's)
    assert [it["steps"] for it in rec.iterations[closed:]] == [3] + [2] * 19  # the last one still open
    # one optimizer every step, another every tenth: an iteration per step of the first
    alone = Recorder(WorkerSettings(out_dir=str(tmp_path / "alone")))
    rec = alone
    for i in range(40):
        forward_and_step(critic, slow) if i % 10 == 9 else forward_and_step(critic)
    assert [it["steps"] for it in rec.iterations] == [2 if i % 10 == 9 else 1 for i in range(39)]


@pytest.mark.parametrize("rank, min_rate", [(1, 2.0), (4, 2.0), (2, 0.5), (32, 2.0)])
def test_powersgd_messages_follow_torch_s_own_rule(rank: int, min_rate: float) -> None:
    """A bucket's PowerSGD messages: the gradients torch's hook leaves uncompressed (by its own
    _should_compress), then the P and Q factors at min(rows, cols, rank); the batched hook's two
    factors of the bucket as a zero-padded square."""
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress

    from srifty.profiling.powersgd import bucket_messages

    shapes = [(256, 64), (256,), (512, 256, 3, 3), (10, 256), (3, 3), (1000, 4)]
    plain = ps = qs = 0
    for s in shapes:
        rows = s[0]
        cols = math.prod(s) // rows
        r = min(rows, cols, rank)
        if _should_compress(rows, cols, r, min_rate)[0]:
            ps, qs = ps + rows * r, qs + cols * r
        else:
            plain += math.prod(s)
    settings = {"rank": rank, "min_compression_rate": min_rate, "start_iter": 10, "batched": False}
    assert bucket_messages(settings, shapes, 4) == (plain * 4, ps * 4, qs * 4)
    assert ps > 0 and (plain > 0) == (min_rate > 1)  # at a rate below 1 even a bias compresses
    side = math.ceil(math.sqrt(sum(math.prod(s) for s in shapes)))
    assert bucket_messages(settings | {"batched": True}, shapes, 2) == (side * rank * 2,) * 2


def test_a_powersgd_state_is_read_and_any_other_is_not() -> None:
    """PowerSGD's state gives the profile's settings; the hook is batched where it, or the hook it
    wraps (DDP's fp16/bf16 compress wrappers, register_ddp_comm_hook's partial), is torch's batched
    one, and a closure of the script's own is not looked into."""
    import functools

    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState

    from srifty.profiling.ddp_hooks import comm_hook_name, wrapped_hooks
    from srifty.profiling.powersgd import settings

    def names(hook: object) -> list[str]:
        return [comm_hook_name(h) for h in wrapped_hooks(hook)]

    def scripts_own(inner: object) -> object:
        def hook(state: object, bucket: object) -> object:
            return inner(state, bucket)  # type: ignore[operator]
        return hook

    state = PowerSGDState(process_group=None, matrix_approximation_rank=4, start_powerSGD_iter=500)
    assert settings(state, names(psgd.batched_powerSGD_hook)) == {
        "rank": 4, "min_compression_rate": 2.0, "start_iter": 500, "batched": True}
    fp16_batched = default_hooks.fp16_compress_wrapper(psgd.batched_powerSGD_hook)
    assert comm_hook_name(fp16_batched).endswith("default_hooks.fp16_compress_wrapper.<locals>.fp16_compress_wrapper_hook")
    assert settings(state, names(fp16_batched))["batched"] is True
    assert settings(state, names(functools.partial(fp16_batched)))["batched"] is True
    assert settings(state, names(default_hooks.bf16_compress_wrapper(psgd.powerSGD_hook)))["batched"] is False
    assert names(scripts_own(psgd.batched_powerSGD_hook)) == [comm_hook_name(scripts_own(None))]
    assert settings(state, names(psgd.powerSGD_hook))["batched"] is False
    assert settings(None, names(psgd.powerSGD_hook)) is None


def test_a_hung_powersgd_job_on_cpu_workers_is_told_of_gloo_s_deadlock() -> None:
    """A job that hangs under PowerSGD on CPU workers (gloo) with several buckets is told that
    the hook's waits inside gloo's callbacks deadlock, and how to avoid it; with one bucket, or on
    a GPU, the usual advice stands."""
    from srifty.profiling.diagnosis import diagnose_failure
    from srifty.profiling.request import ProfileRequest
    from srifty.profiling.supervisor import RunOutcome

    def advice(layout: list[dict], device: str = "cpu") -> str:
        # the hung run's profile as training_doc writes it
        doc = {"measurement": {"iterations_recorded": 7}, "cluster": {"device": device},
               "job": {"buckets": layout, "powersgd": {"rank": 1, "min_compression_rate": 2.0, "start_iter": 2,
                                                       "batched": False, "profiled": True}}}
        failure = diagnose_failure(ProfileRequest(script="wide.py"), [{"rank": 0}],
                                   RunOutcome([None], "hung", 130.0, ""), doc)
        return str(failure)

    two = [{"index": 0, "bytes": 16_867_368}, {"index": 1, "bytes": 532_480}]
    assert "2 gradient buckets in flight" in advice(two) and "above its 16.6 MiB of gradients" in advice(two)
    for other in (advice(two[:1]), advice(two, "cuda")):
        assert "gloo" not in other and "another rank never joined" in other


def test_an_exception_without_a_message_is_told_where_it_was_raised(tmp_path: Path) -> None:
    """A rank that fails on a bare ``raise AssertionError`` (inside torch, reached from the script) is
    told where: the innermost frame, from the installed package on, and the script's line that led
    there; an exception with a message keeps its message alone."""
    from srifty.profiling.diagnosis import worker_error
    from srifty.profiling.request import ProfileRequest
    from srifty.profiling.supervisor import RunOutcome

    script = tmp_path / "train.py"
    script.write_text("")
    torch_file = "/venv/lib/python3.11/site-packages/torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py"
    traceback = (
        'Traceback (most recent call last):\n'
        '  File "/work/srifty/profiling/worker.py", line 47, in main\n    runpy.run_path(script)\n'
        f'  File "{script}", line 24, in <module>\n    loss.backward()\n'
        f'  File "{torch_file}", line 808, in batched_powerSGD_hook\n    _orthogonalize(q)\n'
        f'  File "{torch_file}", line 26, in _orthogonalize\n    raise AssertionError\nAssertionError\n')
    outcome = RunOutcome([1, 1], None, 3.0, "")

    def said(message: str) -> str:
        error = {"type": "AssertionError", "message": message, "traceback": traceback}
        return str(worker_error(ProfileRequest(script=str(script)), [(0, error)], outcome))

    assert said("").startswith(
        f"Rank 0 of {script} failed with AssertionError (no message), raised in _orthogonalize "
        "(torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py:26), from line 24 of train.py.")
    assert "failed with AssertionError: shapes differ. Fix the script" in said("shapes differ")


def test_a_refused_command_line_is_quoted_only_for_the_exit_it_raised(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What argparse refused is quoted for the exit it raised; a script that catches that exit (to
    fall back on defaults) and later exits for another reason is told what it printed then."""
    import argparse

    from srifty.profiling.instrument import watch_usage_errors

    monkeypatch.setattr(argparse.ArgumentParser, "error", argparse.ArgumentParser.error)  # restored after
    rec = Recorder(WorkerSettings(out_dir=str(tmp_path)))
    watch_usage_errors(rec)
    parser = argparse.ArgumentParser(prog="train.py")
    parser.add_argument("--data", required=True)
    with pytest.raises(SystemExit) as refused:
        parser.parse_args([])
    rec.record_error(refused.value)
    assert rec.error["message"] == "train.py: error: the following arguments are required: --data"
    rec.record_error(SystemExit(3), printed="loading /data\n/data: no such data set\n")
    assert rec.error["message"] == "exit status 3 after printing: loading /data / /data: no such data set"


def test_a_lightning_trainer_set_for_other_workers_is_told_to_take_torchrun_s() -> None:
    """PyTorch Lightning refuses to train where its Trainer's devices times nodes is not torchrun's
    world size (its message below, as Lightning 2.6 raised it under `srifty profile --nproc 2`): the
    error says so, and gives the Trainer's arguments that take both from torchrun, on any plan."""
    from srifty.profiling.diagnosis import worker_error
    from srifty.profiling.request import ProfileRequest
    from srifty.profiling.supervisor import RunOutcome

    message = ("You set `devices=1` and `num_nodes=1` in Lightning, but the product (1 * 1) does not match the "
               "world size (2).")
    failure = worker_error(ProfileRequest(script="pl_train.py"), [(0, {"type": "ValueError", "message": message})],
                           RunOutcome([1, 1], None, 3.0, ""))
    assert str(failure).startswith("Rank 0 of pl_train.py stopped where Lightning's Trainer was set for another "
                                   f"number of workers than torchrun started: ValueError: {message}")
    assert 'L.Trainer(devices=int(os.environ.get("LOCAL_WORLD_SIZE", 1)), num_nodes=int(os.environ.get(' \
           '"WORLD_SIZE", 1)) // int(os.environ.get("LOCAL_WORLD_SIZE", 1)), strategy="ddp", ...)' in str(failure)


def test_only_this_run_s_workers_on_this_machine_are_asked_where_they_wait(tmp_path: Path) -> None:
    """A hung run's workers are asked for their stacks (SIGUSR1, which ends a process that did not
    arm it): never a process the run did not start, a record of another machine, or a worker whose
    script took the signal for itself; a worker that armed it writes every thread's stack, and the
    thread running the script says where it waits."""
    import os
    import socket
    import subprocess
    import sys

    from srifty.profiling import stacks

    here = socket.gethostname()
    bystander = subprocess.Popen(["sleep", "30"])
    # a stand-in worker: armed as srifty's worker arms it, then waiting in a function of its script
    script = tmp_path / "train.py"
    script.write_text("import time\n\ndef wait_for_peer():\n    time.sleep(30)\n\nwait_for_peer()\n")
    worker_frame = tmp_path / "srifty" / "profiling" / "worker.py"
    worker_frame.parent.mkdir(parents=True)
    worker_frame.write_text(f"import runpy, sys\nfrom srifty.profiling import stacks\nstacks.arm(sys.argv[1], 0)\n"
                            f"runpy.run_path({str(script)!r}, run_name='__main__')\n")
    worker = subprocess.Popen([sys.executable, str(worker_frame), str(tmp_path)],
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    try:
        import time

        deadline = time.monotonic() + 20
        while not stacks.stack_path(tmp_path, 0).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        records = [{"rank": 0, "pid": worker.pid, "hostname": here, "stack_signal": True},
                   {"rank": 1, "pid": bystander.pid, "hostname": here, "stack_signal": True},  # not the run's
                   {"rank": 2, "pid": bystander.pid, "hostname": "elsewhere", "stack_signal": True},
                   {"rank": 3, "pid": bystander.pid, "hostname": here, "stack_signal": False}]
        said = stacks.where_waiting(str(tmp_path), records, {worker.pid}, str(script), wait_s=1.0)
        assert said == "rank 0 was waiting in wait_for_peer (train.py:4)"
        assert bystander.poll() is None and worker.poll() is None  # both still alive
        # another machine's record, whatever its pid, and a worker whose script took the signal for itself
        assert stacks.where_waiting(str(tmp_path), records[2:], {bystander.pid}, str(script), wait_s=0) == ""
        time.sleep(0.5)
        assert bystander.poll() is None
    finally:
        for p in (bystander, worker):
            p.kill()
            p.wait()


def test_a_run_that_hangs_at_start_up_says_where_it_waits() -> None:
    from srifty.profiling.diagnosis import diagnose_failure
    from srifty.profiling.request import ProfileRequest
    from srifty.profiling.supervisor import RunOutcome

    doc = {"measurement": {"iterations_recorded": 0}, "cluster": {"device": "cpu"}, "job": {}}
    where = "rank 0 was waiting in _create_c10d_store (torch/distributed/rendezvous.py:190), from line 11 of t.py"
    failure = diagnose_failure(ProfileRequest(script="t.py"), [{"rank": 0}],
                               RunOutcome([None], "hung", 181.0, "", hung_at=where), doc)
    assert str(failure).startswith(f"t.py made no training iteration within 180 s of starting ({where}); ")


def test_lightning_s_spawning_strategy_is_told_to_take_torchrun_s_workers() -> None:
    """Lightning's ddp_spawn strategy starts its workers with torch.multiprocessing.start_processes,
    which in a profiled worker raises at once: the error names the strategy and the one that takes
    torchrun's workers, where a script's own spawn is told to call its worker function instead."""
    import torch.multiprocessing as torch_mp

    from srifty.profiling.diagnosis import worker_error
    from srifty.profiling.request import ProfileRequest
    from srifty.profiling.selflaunch import LightningStartsItsOwnWorkers, ScriptStartsItsOwnWorkers, \
        refuse_own_workers
    from srifty.profiling.supervisor import RunOutcome

    def _wrapping_function(rank: int) -> None:  # as Lightning's launcher names what it spawns
        pass

    def demo_basic(rank: int) -> None:
        pass

    _wrapping_function.__module__ = "lightning.pytorch.strategies.launchers.multiprocessing"
    refuse = refuse_own_workers(torch_mp.start_processes)
    said = {}
    for fn, kind in ((_wrapping_function, LightningStartsItsOwnWorkers), (demo_basic, ScriptStartsItsOwnWorkers)):
        with pytest.raises(kind) as raised:
            refuse(fn, nprocs=2)
        error = {"type": type(raised.value).__name__, "message": str(raised.value)}
        said[fn.__name__] = str(worker_error(ProfileRequest(script="pl.py"), [(0, error)],
                                             RunOutcome([1, 1], None, 3.0, "")))
    assert said["_wrapping_function"].startswith(
        "pl.py starts its own workers with torch.multiprocessing.start_processes(_wrapping_function, nprocs=2), "
        "through Lightning's spawning strategy (ddp_spawn); ")
    assert 'Give the Trainer strategy="ddp", which takes the workers torchrun started' in said["_wrapping_function"]
    assert "call demo_basic once in place of the spawn" in said["demo_basic"]
    assert "Lightning" not in said["demo_basic"]


def test_other_parallelism_is_named_from_the_script_or_its_trainer_s_options(tmp_path: Path) -> None:
    """Where a script runs no DDP forward, the error names what it trains with instead: read off its
    source (its own FSDP, a Lightning strategy) or its arguments (HuggingFace Trainer's --fsdp and
    --deepspeed); a DDP script's names are none of them."""
    from srifty.profiling.diagnosis import other_parallelism

    def named(source: str, *args: str) -> str | None:
        script = tmp_path / "train.py"
        script.write_text(source)
        return other_parallelism(str(script), args)

    assert named("model = fully_shard(model)") == "FSDP2 (fully_shard)"
    assert named("trainer = L.Trainer(devices=2, strategy='fsdp')") == "FSDP (Lightning's fsdp strategy)"
    assert named("trainer = L.Trainer(strategy=\"deepspeed_stage_2\")") == "DeepSpeed"
    assert named("Trainer(model=model, args=args).train()", "--output_dir", "out", "--fsdp", "full_shard") == \
        "FSDP (HuggingFace Trainer's --fsdp)"
    assert named("Trainer(model=model, args=args).train()", "--deepspeed", "ds.json") == "DeepSpeed"
    assert named("from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(model)",
                 "--fsdp_min_num_params", "0") is None
    assert other_parallelism(str(tmp_path / "gone.py"), ("--fsdp", "full_shard")) == "FSDP (HuggingFace Trainer's --fsdp)"


def test_a_rendezvous_of_the_script_s_own_is_told_apart_from_torchrun_s() -> None:
    """Under torchrun (its workers join its store) a MASTER_PORT or a tcp:// init_method at another
    port than torchrun's is the script's own; torchrun's port, env://, or a run not under torchrun's
    store is not."""
    from srifty.profiling.selflaunch import own_rendezvous

    env = {"TORCHELASTIC_USE_AGENT_STORE": "True", "MASTER_PORT": "29500"}
    assert own_rendezvous("29500", None, env) is None
    assert own_rendezvous("29500", "env://", env) is None
    assert own_rendezvous("29500", "tcp://127.0.0.1:29500", env) is None
    assert own_rendezvous("29500", "tcp://10.0.0.1:23456", env) == \
        "init_method='tcp://10.0.0.1:23456', where torchrun's port is 29500"
    assert own_rendezvous("29500", None, {**env, "MASTER_PORT": "12355"}) == "MASTER_PORT=12355, where torchrun's is 29500"
    assert own_rendezvous("29500", "tcp://10.0.0.1:23456", {"MASTER_PORT": "12355"}) is None
    assert own_rendezvous(None, None, {**env, "MASTER_PORT": "12355"}) is None


def test_workers_that_share_a_gpu_are_told_to_take_their_local_rank_s() -> None:
    """NCCL refuses two ranks on one GPU (a script that reads a --local_rank argument torchrun never
    passes puts every worker on GPU 0): the error quotes NCCL's line and says which GPU each takes."""
    from srifty.profiling.diagnosis import worker_error
    from srifty.profiling.request import ProfileRequest
    from srifty.profiling.supervisor import RunOutcome

    # a message of the form ProcessGroupNCCL gives for it, as a rank records it
    message = ("NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, invalid usage "
               "(run with NCCL_DEBUG=WARN for details), NCCL version 2.27.3\nncclInvalidUsage: This usually reflects "
               "invalid usage of NCCL library.\nLast error:\nDuplicate GPU detected : rank 1 and rank 0 both on "
               "CUDA device 1b000")
    errors = [(1, {"type": "DistBackendError", "message": message, "traceback": ""})]
    said = str(worker_error(ProfileRequest(script="train.py"), errors, RunOutcome([1, 1], None, 4.0, "")))
    assert said.startswith("Workers of train.py share a GPU, which NCCL refuses: Duplicate GPU detected : rank 1 "
                           "and rank 0 both on CUDA device 1b000. Let each worker take the GPU of its LOCAL_RANK")

"""The operator count (srifty.profiling.opcount) and the step model built on it (srifty.opmodel)."""
from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn as nn

from srifty.opmodel import FIXED, GpuStepModel, OperatorCounts, PhaseCount, StepTerms, fit, step_terms
from srifty.profiling.opcount import OperatorCounter

from conftest import PROFILES, run_srifty


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))


def test_counter_counts_kernels_flops_and_bytes_per_phase() -> None:
    model, batch = _mlp(), 32
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    x, y = torch.randn(batch, 64), torch.randint(0, 10, (batch,))
    phase = ["forward"]
    numels = [p.numel() for p in model.parameters()]
    with OperatorCounter(lambda: phase[0], numels) as counter:
        out = model(x)
        phase[0] = "other"
        loss = nn.functional.cross_entropy(out, y)
        phase[0] = "backward"
        loss.backward()
        phase[0] = "optimizer"
        opt.step()
    got = counter.result(batch, len(numels))["phases"]
    linear = [(64, 256), (256, 10)]
    fwd = sum(2 * batch * i * o for i, o in linear)
    assert got["forward"]["flops"] == fwd
    assert got["forward"]["flop_kernels"] == 2  # the two addmm; relu and views are not arithmetic
    # backward: weight gradients of both layers, the input gradient of the second only
    assert got["backward"]["flops"] == fwd + 2 * batch * 256 * 10
    # the weights' bytes are parameter traffic; the forward reads each weight once
    assert got["forward"]["param_bytes"] >= 4 * sum(numels)
    assert got["forward"]["bytes"] > got["forward"]["param_bytes"]
    # SGD without foreach: one add_ per parameter tensor (no momentum, no weight decay)
    assert got["optimizer"]["kernels"] == len(numels)
    assert got["optimizer"]["flops"] == 0
    assert got["optimizer"]["param_bytes"] == got["optimizer"]["bytes"]
    assert got["other"]["kernels"] >= 1  # the loss
    assert got["input"] == dict.fromkeys(got["input"], 0)


def test_views_and_allocations_launch_no_kernel() -> None:
    x = torch.randn(8, 8)
    with OperatorCounter(lambda: "forward") as counter:
        x.view(64).t() if False else x.t().reshape(64)  # a transpose then a copy: one kernel
        torch.empty(10)
    assert counter.counts["forward"]["kernels"] == 1


@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")  # torch's, on switching oneDNN
def test_a_fused_recurrent_layer_s_arithmetic_is_counted() -> None:
    """A CPU runs an LSTM as one oneDNN operator per layer and direction, which
    torch.utils.flop_counter does not price: its forward counts the arithmetic of the same LSTM run
    step by step as matmuls (oneDNN off), 2 x rows x (4H x I + 4H x H) per layer and direction; its
    backward twice that, a little more than step by step, where the gradient of the initial hidden
    state (which needs none) is not taken. A GPU's fused operators (cuDNN, MIOpen) are priced from
    the same weights: the whole stack's matrices, biases left out."""
    from srifty.profiling.opcount import UNPRICED_FLOPS, recurrent_flops

    torch.manual_seed(0)
    lstm = nn.LSTM(16, 8, num_layers=2, bidirectional=True)
    steps, batch, hidden = 5, 3, 8
    got = {}
    for fused in (True, False):
        x = torch.randn(steps, batch, 16, requires_grad=True)
        phase = ["forward"]
        with torch.backends.mkldnn.flags(enabled=fused), OperatorCounter(lambda: phase[0]) as counter:
            out = lstm(x)[0].sum()
            phase[0] = "backward"
            out.backward()
        got[fused] = {ph: counter.counts[ph] for ph in ("forward", "backward")}
    # both layers see 16 features an input row (the second, both directions' 8): four layer-directions
    forward = 4 * (2 * steps * batch * (4 * hidden * 16 + 4 * hidden * hidden))
    assert got[True]["forward"]["flops"] == got[False]["forward"]["flops"] == forward
    assert got[True]["forward"]["flop_kernels"] == 4  # one operator per layer and direction
    assert got[True]["backward"]["flops"] == 2 * forward
    initial_state = 4 * 2 * batch * 4 * hidden * hidden  # per layer and direction, step by step
    assert got[False]["backward"]["flops"] == 2 * forward - initial_state
    # cuDNN's operator takes the stack's weights as one list (w_ih, w_hh, b_ih, b_hh per layer and
    # direction), a batch-first input as (batch, steps, features)
    weights = [w for layer in lstm.all_weights for w in layer]
    x = torch.randn(batch, steps, 16)
    assert recurrent_flops(x, weights) == forward
    mask = [True, True, True, True]
    assert UNPRICED_FLOPS["_cudnn_rnn"]([x, weights], None) == forward
    assert UNPRICED_FLOPS["_cudnn_rnn_backward"]([x, weights] + [None] * 19 + [mask], None) == 2 * forward
    assert UNPRICED_FLOPS["miopen_rnn_backward"]([x, weights] + [None] * 18 + [mask[:3] + [False]], None) == forward


def test_a_recurrent_layer_run_step_by_step_launches_as_a_fused_one_on_a_gpu() -> None:
    """A CPU runs a GRU (and an LSTM with oneDNN off) step by step, a dozen operators a step and
    direction, which cuDNN runs as one fused operator. The count keeps those kernels apart, forward
    by the layer's hooks and backward by the autograd nodes its forward created, and the GPU's
    kernels count one per layer and direction instead, as the fused LSTM's do: a GRU, or the LSTM
    run step by step, launches about as many kernels on a GPU as the fused LSTM, whatever the
    sequence's length, while its arithmetic stays counted."""
    from srifty.opmodel import OperatorCounts

    class Tagger(nn.Module):  # a layer before and after the recurrent one: not the recurrent layer's kernels
        def __init__(self, rnn: nn.Module) -> None:
            super().__init__()
            self.inp, self.rnn, self.out = nn.Linear(16, 16), rnn, nn.Linear(16, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(self.rnn(torch.relu(self.inp(x)))[0]).sum()

    def gpu_kernels(kind: str, steps: int, fused: bool = True) -> tuple[dict[str, float], dict[str, dict]]:
        torch.manual_seed(0)
        model = Tagger(getattr(nn, kind)(16, 8, num_layers=2, bidirectional=True))
        phase = ["forward"]
        counter = OperatorCounter(lambda: phase[0])
        counter.watch_recurrent(model.modules())
        with torch.backends.mkldnn.flags(enabled=fused), counter:
            loss = model(torch.randn(steps, 3, 16))
            phase[0] = "backward"
            loss.backward()
        counts = OperatorCounts.from_json(counter.result(3, 0))
        return {ph: counts.gpu_kernels(ph) for ph in ("forward", "backward")}, counter.counts

    fused_lstm, lstm_counts = gpu_kernels("LSTM", 5)
    assert all(lstm_counts[ph]["recurrent_kernels"] == lstm_counts[ph]["recurrent_units"] == 0
               for ph in ("forward", "backward"))  # oneDNN's LSTM is fused already: counted as it ran
    for kind, fused in (("GRU", True), ("LSTM", False), ("RNN", True)):
        by_steps = {}
        for steps in (5, 20):
            by_steps[steps], counts = gpu_kernels(kind, steps, fused)
            for ph in ("forward", "backward"):
                assert counts[ph]["recurrent_units"] == 4  # two layers, two directions
                assert counts[ph]["recurrent_kernels"] > 3 * steps  # step by step
                assert counts[ph]["kernels"] - counts[ph]["recurrent_kernels"] >= 2  # the linear layers' own
        assert by_steps[5] == by_steps[20]  # as a fused layer's: not per step
        assert all(abs(by_steps[5][ph] - fused_lstm[ph]) <= 6 for ph in ("forward", "backward")), (kind, by_steps)
    # the hooks go with the count
    model = nn.GRU(4, 4)
    counter = OperatorCounter(lambda: "forward")
    counter.watch_recurrent(model.modules())
    with counter:
        model(torch.randn(2, 1, 4))
    assert not model._forward_hooks and not model._forward_pre_hooks


def test_a_cpu_s_fused_attention_is_counted_as_its_matmuls() -> None:
    """On a CPU, F.scaled_dot_product_attention (and nn.MultiheadAttention through it) runs as one
    fused operator that torch.utils.flop_counter does not price. Its forward counts the arithmetic
    of the same attention written as matmuls: q k^T and its product with v, 2 x 2 x (batch x heads)
    x L_q x L_k x d (the softmax and the scale are not arithmetic to it). Its backward is priced as
    torch prices a GPU's fused attention: the four matmuls of the gradients and q k^T again, which a
    fused kernel recomputes rather than keep."""
    torch.manual_seed(0)
    batch, heads, length, dim = 2, 4, 64, 32
    q, k, v = (torch.randn(batch, heads, length, dim, requires_grad=True) for _ in range(3))
    got = {}
    for fused in (True, False):
        phase = ["forward"]
        with OperatorCounter(lambda: phase[0]) as counter:
            if fused:
                out = nn.functional.scaled_dot_product_attention(q, k, v)
            else:
                out = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dim), dim=-1) @ v
            phase[0] = "backward"
            out.sum().backward()
        got[fused] = {ph: counter.counts[ph]["flops"] for ph in ("forward", "backward")}
    forward = 2 * 2 * batch * heads * length * length * dim
    assert got[True]["forward"] == got[False]["forward"] == forward
    assert got[False]["backward"] == 2 * forward and got[True]["backward"] == 2.5 * forward


def test_a_grouped_matmul_is_counted_as_its_groups_matmuls() -> None:
    """torch._grouped_mm (a mixture-of-experts layer's experts in one operator), which
    torch.utils.flop_counter does not price, counts what its groups' matmuls would: tokens routed
    to two experts, a batch of per-group matrices, and groups sliced along the inner dimension."""
    torch.manual_seed(0)
    tokens, experts = torch.randn(24, 16), torch.randn(2, 16, 32)
    cases = [
        (tokens, experts, [8, 24], 2 * 24 * 16 * 32),  # rows 0-7 by expert 0, rows 8-23 by expert 1
        (torch.randn(2, 8, 16), experts, None, 2 * 2 * 8 * 16 * 32),
        (torch.randn(8, 32), torch.randn(32, 16), [16, 32], 2 * 8 * 32 * 16),  # inner slices 0-15, 16-31
    ]
    for a, b, offs, flops in cases:
        with OperatorCounter(lambda: "forward") as counter:
            torch._grouped_mm(a, b, offs=None if offs is None else torch.tensor(offs, dtype=torch.int32))
        assert counter.counts["forward"]["flops"] == flops, (a.shape, b.shape)
    # the first case as two matmuls, priced by torch's own counter
    with OperatorCounter(lambda: "forward") as counter:
        tokens[:8] @ experts[0], tokens[8:] @ experts[1]
    assert counter.counts["forward"]["flops"] == cases[0][3]


def _counts(kernels: float = 100, flops: float = 1e9, nbytes: float = 1e8, param: float = 2e7) -> OperatorCounts:
    phase = PhaseCount(kernels, 10, flops, nbytes / 2, nbytes, param)
    return OperatorCounts(32, 40, {"forward": phase, "backward": phase, "optimizer": PhaseCount(160, 0, 0, 8e7, 8e7, 8e7),
                                   "input": PhaseCount(3, 0, 0, 1e6, 1e6, 0), "other": PhaseCount(4, 0, 0, 1e6, 1e6, 0)})


def test_counts_scale_with_the_batch_but_parameters_and_kernels_do_not() -> None:
    c = _counts()
    at = c.at(128)  # 4x the counted batch
    f = at["forward"]
    assert (f.kernels, f.flops) == (100, 4e9)
    assert f.bytes == pytest.approx(2e7 + 4 * 8e7) and f.param_bytes == 2e7
    assert f.flop_bytes / f.bytes == pytest.approx(0.5)
    assert at["optimizer"] == c.phases["optimizer"]
    # 160 per-parameter optimizer operators over 40 tensors: 4 foreach kernels on a GPU
    assert c.gpu_kernels("optimizer") == 4 and c.gpu_kernels("forward") == 100


def test_step_terms_are_a_roofline_of_the_counts() -> None:
    c = _counts()
    t = step_terms(c, 32, peak_tflops=100.0, mem_gbytes_per_s=1000.0, host_input_ms=1.5)
    # per phase: max(1e9 / 1e14, 5e7 / 1e12) s of arithmetic + 5e7 / 1e12 s of other bytes
    phase_ms = (max(1e9 / 1e14, 5e7 / 1e12) + 5e7 / 1e12) * 1e3
    other_ms = 1e6 / 1e12 * 1e3
    assert t.compute_device_ms == pytest.approx(2 * phase_ms + other_ms)
    assert t.compute_kernels == 204 and t.post_kernels == 4
    assert t.post_device_ms == pytest.approx(8e7 / 1e12 * 1e3)
    assert t.host_input_ms == 1.5


def test_fit_recovers_the_parameters_that_made_the_steps() -> None:
    rows = [StepTerms(k, d, 4, 0.1, h) for k, d, h in [(100, 1, 0.5), (300, 2, 1), (200, 8, 3), (600, 0.5, 0.2)]]
    truth = GpuStepModel(2.0, 30.0, FIXED["device_factor"], FIXED["host_factor"], 0, 0, 0, 0, ())
    got = fit(rows, [truth.step_ms(r) for r in rows])
    assert got == pytest.approx((2.0, 30.0, 1.0, 1.0), rel=1e-6)


def test_fit_weighs_each_row_by_its_weight() -> None:
    # two sets of steps made by different parameters: a row weighed twice counts as that row twice
    rows = [StepTerms(k, d, 4, 0.1, h) for k, d, h in [(100, 1, 0.5), (300, 2, 1), (200, 8, 3), (600, 0.5, 0.2)]]
    a = GpuStepModel(2.0, 30.0, 1.0, 1.0, 0, 0, 0, 0, ())
    b = GpuStepModel(5.0, 10.0, 1.0, 1.0, 0, 0, 0, 0, ())
    y = [a.step_ms(r) for r in rows[:2]] + [b.step_ms(r) for r in rows[2:]]
    assert fit(rows, y, [2, 2, 1, 1]) == pytest.approx(fit(rows + rows[:2], y + y[:2]), rel=1e-9)
    assert fit(rows, y, [1, 1, 1e-9, 1e-9])[:2] == pytest.approx((2.0, 30.0), rel=1e-3)


def test_interval_widens_in_quadrature_on_a_gpu_never_fitted() -> None:
    m = GpuStepModel(2.0, 30.0, 1.0, 1.0, -0.3, 0.4, -0.4, 0.3, ("cnn@32:H200",))
    assert m.log_bounds("H200") == (-0.3, 0.4)
    assert m.log_bounds("A10G") == pytest.approx((-0.5, 0.5))
    compute, post = m.split_ms(StepTerms(100, 1.0, 10, 0.5, 2.0))
    assert compute == pytest.approx(2.0 + 3.0 + 1.0) and post == pytest.approx(0.3 + 0.5 + 2.0)


def test_model_file_round_trips(tmp_path) -> None:
    m = GpuStepModel(2.5, 24.0, 1.0, 1.0, -0.31, 0.44, -0.4, 0.38, ("a@1:H200", "b@2:H200"))
    (tmp_path / "m.json").write_text(m.to_json())
    back = GpuStepModel.read(tmp_path / "m.json")
    assert back == m and back.gpus == {"H200"}
    assert GpuStepModel.read(tmp_path / "none.json") is None
    assert math.isfinite(back.host_ms)


# ---------------------------------------------------------------- through srifty's prediction path

CPU_CNN = PROFILES / "cpu" / "cnn_resnet" / "b32.json"


def _expected_step(path, itype: str, batch: int) -> tuple[float, tuple[float, float]]:
    """The step and interval the shipped operator model gives, computed from the profile's own
    fields: the interval reaches the step with the host's input window as measured (not per sample)."""
    from dataclasses import replace

    from srifty.catalog import Catalog
    from srifty.cpu_to_gpu import terms_on
    from srifty.opmodel import shipped_step_model
    from srifty.profile import load

    cat = Catalog.default()
    gpu = cat.get(itype).gpu_name
    model = shipped_step_model()
    profile = load(path)
    terms = terms_on(profile, batch, gpu, cat)
    ms = model.step_ms(terms)
    window = model.step_ms(replace(terms, host_input_ms=profile.doc["summary"]["input_ms"]["median"])) / ms
    lo, hi = model.log_bounds(gpu)
    return ms, (ms * math.exp(lo) * min(window, 1), ms * math.exp(hi) * max(window, 1))


@pytest.mark.parametrize("itype, batch", [("p5en.48xlarge", 32), ("g5.xlarge", 32), ("g5.xlarge", 512)])
def test_a_cpu_profile_goes_to_a_gpu_through_the_operator_model(itype: str, batch: int) -> None:
    res = run_srifty("predict", "--profile", str(CPU_CNN), "--config", f"1x{itype}:1", "-b", str(batch), "--json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    ms, (lo, hi) = _expected_step(CPU_CNN, itype, batch)
    assert got["iteration_ms"] == pytest.approx(ms, rel=1e-3)
    assert got["interval_ms"] == pytest.approx([lo, hi], rel=1e-3)
    assert got["source"] == "transferred" and got["parts"]["compute_source"] == "transferred"
    assert "predicted from the operators the CPU profile counted" in res.stderr
    assert "is outside the" not in res.stderr  # the model covers any batch: no extrapolation warning
    if itype == "g5.xlarge":  # a GPU the model was not fitted on: a wider interval
        assert "none on A10G" in res.stderr and hi / ms > math.exp(shipped_q95())
    # away from the profiled batch the interval also reaches the input window as profiled
    assert ("reaching the step with the host's input window as profiled" in res.stderr) == (batch != 32)
    assert ("srifty profile examples/cnn_resnet.py --out DIR/ --batch-size 32,512`" in res.stderr) == (batch == 512)
    if batch != 32:
        assert lo / ms < _expected_step(CPU_CNN, itype, 32)[1][0] / _expected_step(CPU_CNN, itype, 32)[0]


def shipped_q95() -> float:
    from srifty.opmodel import shipped_step_model

    return shipped_step_model().q95


def test_a_profile_without_an_operator_count_is_not_carried_to_a_gpu(tmp_path) -> None:
    """A CPU profile without its operators (recorded before srifty counted them, or of a script that
    runs torch.compile) has nothing that carries it to a GPU: the spec-sheet ratio between a CPU and
    a GPU puts steps tens to hundreds of times under what the GPUs measured (docs/ACCURACY.md,
    `spec ratio`). predict refuses and says what to do; recommend says why once for every GPU type;
    another CPU host is still carried by the spec ratio."""
    doc = json.loads(CPU_CNN.read_text())
    doc["job"]["operators"] = None
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    res = run_srifty("predict", "--profile", str(old), "--config", "1xp5en.48xlarge:1", "--json")
    assert res.returncode != 0 and "from the CPU it was profiled on to p5en.48xlarge's GPU" in res.stderr
    assert "the profile has no operator count" in res.stderr and "TORCHDYNAMO_DISABLE=1" in res.stderr
    assert "Traceback" not in res.stderr
    res = run_srifty("recommend", "--profile", str(old), "--instance-types", "p5*", "--budget", "400")
    assert res.returncode != 0 and "instance types that pass the filters, for one reason" in res.stderr
    assert res.stderr.count("the profile has no operator count") == 1
    res = run_srifty("predict", "--profile", str(old), "--config", "1xc5.2xlarge:1", "--json")
    assert res.returncode == 0 and "by GPU/CPU spec ratio" in res.stderr, res.stderr


def test_recommend_says_what_would_measure_the_chosen_compute() -> None:
    res = run_srifty("recommend", "--profile", str(CPU_CNN), "--budget", "5", "--top", "5", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    chosen, advice = doc["recommendations"][0], doc["measure_next"]
    assert chosen["source"] == "transferred"
    itype = advice["instance_type"]
    assert itype in chosen["config"]
    assert advice["command"].startswith(f"srifty profile examples/cnn_resnet.py --backend ec2 --instance-types {itype}")
    # several GPUs whose overlap the CPU profile's ready times could not give: the GPU profile records them too
    assert chosen["parts"]["overlap_source"] == "recorded-on-cpu" and advice["records_ready_times"]
    assert "records when the gradients become ready on that GPU" in advice["sentence"]
    from srifty.catalog import Catalog
    from srifty.profiling.ec2 import billed_hours
    from srifty.profiling.launcher import ProfileRequest

    hours = billed_hours(ProfileRequest(script="examples/cnn_resnet.py"))
    assert advice["hours"] == pytest.approx(hours, abs=1e-3)
    assert advice["usd"] == pytest.approx(Catalog.default().ondemand_price(itype) * hours, abs=0.01)
    lo, hi = chosen["interval_ms"]
    assert advice["interval_ratio"] == pytest.approx([lo / chosen["iteration_ms"], hi / chosen["iteration_ms"]], rel=1e-2)
    # the overlapping rows are exactly those whose throughput interval meets the chosen one's
    def span(r):
        return r["throughput_samples_per_s"] * r["iteration_ms"] / r["interval_ms"][1], \
            r["throughput_samples_per_s"] * r["iteration_ms"] / r["interval_ms"][0]
    c0, c1 = span(chosen)
    expected = [r["config"] for r in doc["recommendations"][1:]
                if span(r)[1] >= c0 and span(r)[0] <= c1]
    assert advice["overlapping"] == expected


def test_the_measurement_command_runs_the_job_as_it_was_profiled() -> None:
    """The command that would measure the chosen row's compute runs the job as it was profiled: its
    module, its own arguments and its option for the batch, at one pass's batch where the script
    accumulates gradients (SRIFTY_BATCH_SIZE is one pass's: 96 samples a step over 4 passes is 24),
    a whole number of samples."""
    import dataclasses

    from srifty.features.job import load_job, profile_command

    job = load_job(CPU_CNN)
    ec2 = "--backend ec2 --instance-types g5.xlarge"
    assert profile_command(job, ec2, 32.0) == f"srifty profile examples/cnn_resnet.py {ec2} --batch-size 32"
    hf = dataclasses.replace(job, module="mypkg.train", script_args=("--output_dir", "out dir"), accumulation=4,
                             batch_arg="--per_device_train_batch_size")
    assert profile_command(hf, ec2, 96.0) == (f"srifty profile -m mypkg.train {ec2} --batch-size 24 "
                                              "--batch-arg=--per_device_train_batch_size -- --output_dir 'out dir'")
    # two batches, as the note on the host's input window suggests: whole ones, each one pass's
    assert profile_command(hf, "--out DIR/", 128.0, 42.6667) == (
        "srifty profile -m mypkg.train --out DIR/ --batch-size 11,32 --batch-arg=--per_device_train_batch_size "
        "-- --output_dir 'out dir'")


def test_another_gpu_takes_the_spread_of_the_spec_ratio() -> None:
    # the operator model puts another GPU at its spec figures, no measured speed factors: its step
    # there misses as the spec ratio's transfers did (srifty/data/gpu_transfer_error.json)
    from srifty.catalog import DATA_DIR, TRANSFER_ERROR_JSON
    from srifty.gpuspeed import read_transfer_error
    from srifty.opmodel import shipped_step_model

    spread, model = read_transfer_error(DATA_DIR / TRANSFER_ERROR_JSON), shipped_step_model()
    assert (model.other_gpu_q05, model.other_gpu_q95) == pytest.approx(spread.bounds(by_spec=True), abs=1e-4)
    assert spread.spec_q95 > spread.q95  # the spec ratio alone misses further than with measured factors


def test_a_trace_s_one_gpu_runs_pair_with_the_cpu_profile_at_the_nearest_batch() -> None:
    """profiles/pollux's one-GPU runs (a T4) pair with profiles/cpu's profile of the same model at
    the nearest batch, carried to the run's batch; multi-worker runs and models without a CPU
    profile give no pair; each model weighs the same in the fit, however many batches it has."""
    from dataclasses import replace

    from srifty.catalog import Catalog
    from srifty.cpu_to_gpu import fit_model, pairs, terms_on
    from srifty.features import load_corpus
    from srifty.profile import load

    cat = Catalog.default()
    jobs = load_corpus([str(PROFILES / "pollux")])
    found = pairs(PROFILES / "cpu", PROFILES / "h200", cat, jobs)
    trace = [p for p in found if p.gpu == "T4"]
    cpu_batches = {m: int(next((PROFILES / "cpu" / m).glob("b*.json")).stem[1:])
                   for m in ("cifar10", "imagenet", "ncf")}
    for job in jobs:
        singles = sorted(r.local_batch_size for r in job.runs if r.world_size == 1)
        got = sorted(p.batch for p in trace if p.model == job.model)
        assert got == (singles if job.model in cpu_batches else [])
    for p in trace:
        assert p.cpu_batch == cpu_batches[p.model] and p.gpu_instance_type == "g4dn.12xlarge"
        assert p.terms == terms_on(load(p.cpu_profile), p.batch, "T4", cat)
    assert {p.model for p in found if p.gpu == "H200"} == {"cnn_resnet", "mlp_recsys", "transformer_lm"}
    # the CPU profiles are of the trace's architectures: the same parameter counts
    for job in jobs:
        if job.model in cpu_batches:
            cpu_profile = load(next((PROFILES / "cpu" / job.model).glob("b*.json")))
            assert cpu_profile.doc["job"]["param_count"] == job.param_count
    # a trace of another architecture under the same name pairs with nothing
    other = [replace(j, param_count=j.param_count + 1) for j in jobs]
    assert [p for p in pairs(PROFILES / "cpu", PROFILES / "h200", cat, other) if p.gpu == "T4"] == []

    # ncf's 21 batches weigh what cnn_resnet's 3 do: repeating every pair of a model moves nothing
    def fitted(some: list) -> tuple[float, float]:
        m = fit_model(some)
        return m.host_ms, m.launch_us

    assert fitted(found + [p for p in found if p.model == "ncf"]) == pytest.approx(fitted(found), rel=1e-9)


def test_a_gpu_held_out_is_predicted_by_a_fit_that_never_saw_it() -> None:
    """leave_one_gpu_out: the T4 steps come from the operator model fitted on the H200 pairs alone,
    with the interval of a GPU that fit never saw (reaching, away from the CPU profile's batch, the
    step with the input window as profiled), and the other way round."""
    from dataclasses import replace

    from srifty import model as m
    from srifty.catalog import Catalog
    from srifty.cpu_to_gpu import fit_model, held_out_log_errors, interval_logs, leave_one_gpu_out, pairs
    from srifty.features import load_corpus
    from srifty.profile import load

    cat = Catalog.default()
    found = [p for p in pairs(PROFILES / "cpu", PROFILES / "h200", cat, load_corpus([str(PROFILES / "pollux")]))
             if p.batch in (32, 128, 256, 1024)]  # a few of each GPU's steps
    other_gpu = (-0.4, 0.5)
    checks = leave_one_gpu_out(found, cat, m.load(m.shipped_model()), other_gpu)
    assert {c.pair.gpu for c in checks} == {"H200", "T4"} and len(checks) == len(found)
    for c in checks:
        train = [p for p in found if p.gpu != c.pair.gpu]
        expected = fit_model(train, interval_logs(held_out_log_errors(train)), other_gpu)
        assert c.pair.gpu not in expected.gpus
        assert c.predicted_ms == pytest.approx(expected.step_ms(c.pair.terms), rel=1e-6)
        lo, hi = expected.log_bounds(c.pair.gpu)
        measured_window = load(c.pair.cpu_profile).doc["summary"]["input_ms"]["median"]
        window = expected.step_ms(replace(c.pair.terms, host_input_ms=measured_window)) / c.predicted_ms
        assert (window == pytest.approx(1.0)) == (c.pair.batch == c.pair.cpu_batch)
        assert c.interval_ms[0] == pytest.approx(c.predicted_ms * math.exp(lo) * min(window, 1), rel=1e-6)
        assert c.interval_ms[1] == pytest.approx(c.predicted_ms * math.exp(hi) * max(window, 1), rel=1e-6)


def test_profiles_at_several_batches_measure_the_input_window_s_fixed_part() -> None:
    """profiles/cpu/cnn_resnet holds one CPU profile at each of three batches: the host's input
    window is read as a line over the batch (least squares, non-negative) instead of per sample,
    the operator model's terms take it, and the interval no longer needs to reach another reading."""
    import numpy as np

    from srifty import model as m
    from srifty.features import FeatureBuilder, load_job
    from srifty.profile import load

    docs = [load(p).doc for p in sorted((PROFILES / "cpu" / "cnn_resnet").glob("b*.json"))]
    batches = np.array([d["job"]["local_batch_size"] for d in docs], dtype=float)
    windows = np.array([d["summary"]["input_ms"]["median"] for d in docs])
    job = load_job(PROFILES / "cpu" / "cnn_resnet")
    fixed, per_sample = job.host_input_fixed_ms, job.host_input_ms_per_sample
    assert fixed is not None and fixed >= 0 and per_sample >= 0
    # the least-squares line: its residuals are orthogonal to both columns
    residual = windows - (fixed + per_sample * batches)
    assert abs(residual.sum()) < 1e-6 and abs((residual * batches).sum()) < 1e-3
    assert job.operator_terms(512, 100, 1000).host_input_ms == pytest.approx(fixed + 512 * per_sample)
    builder = FeatureBuilder(job, m.catalog_for_jobs([job]))
    assert builder.input_window_ratio("g5.xlarge", 2048) == 1.0
    # one profile alone: the window per sample, and the interval reaches it as profiled
    one = load_job(PROFILES / "cpu" / "cnn_resnet" / "b32.json")
    assert one.host_input_fixed_ms is None
    assert one.host_input_ms_per_sample == pytest.approx(windows[list(batches).index(32)] / 32)
    assert FeatureBuilder(one, m.catalog_for_jobs([one])).input_window_ratio("g5.xlarge", 2048) < 1

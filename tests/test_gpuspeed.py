"""Measured speed factors on the spec ratio that transfers compute across GPUs (srifty.gpuspeed)."""
from __future__ import annotations

import math

import pytest

from srifty.catalog import DATA_DIR, SPEED_CORRECTIONS_CSV, TRANSFER_ERROR_JSON, Catalog, read_corrections
from srifty.features import CONV_FLOPS_WEIGHT, hardware_of, transfer_speeds
from srifty.gpuspeed import (SingleGpuRate, fit_speed_corrections, read_lambda_single_gpu, read_transfer_error,
                             spec_hardware)
from srifty.validate import TransferCheck, catalog_without_gpu_of, transfer_spread, validate_gpu_transfer

from conftest import ROOT

LAMBDA = ROOT / "data" / "traces" / "lambda_compiled_single_gpu.csv"


def _spec_speed(cat: Catalog, gpu: str, precision: str, conv_share: float = 0.0) -> float:
    return spec_hardware(cat.gpu_spec(gpu)).speed_for(precision, conv_share)


def test_fit_recovers_the_factors_behind_synthetic_rates() -> None:
    cat = Catalog.default()
    truth = {"V100": 1.3, "A100": 1.0, "H100": 0.8}
    rates = []
    for net, scale in (("a", 1.0), ("b", 7.0), ("c", 0.05)):  # each network its own unit and size
        for gpu, f in truth.items():
            rates.append(SingleGpuRate("lambda", ("v1", net, "amp", "x/s"), gpu, "amp",
                                       scale * _spec_speed(cat, gpu, "amp") * f, conv_share=0.0))
    # a GPU alone in its group says nothing of ratios; a GPU without specs (P100) is skipped
    rates.append(SingleGpuRate("lambda", ("v1", "d", "amp", "x/s"), "B200", "amp", 123.0))
    rates.append(SingleGpuRate("lambda", ("v1", "a", "amp", "x/s"), "P100", "amp", 5.0))
    fit = {c.gpu_name: c for c in fit_speed_corrections(rates, cat, ridge=1e-9)}
    assert set(fit) == set(truth) and all(c.flops == "fp16" and c.rates == 3 and c.networks == 3
                                          for c in fit.values())
    # ratios are identified exactly; the ridge centres the log factors (geometric mean 1)
    assert fit["V100"].factor / fit["H100"].factor == pytest.approx(1.3 / 0.8, rel=1e-3)
    assert fit["A100"].factor / fit["H100"].factor == pytest.approx(1.0 / 0.8, rel=1e-3)
    assert math.prod(c.factor for c in fit.values()) == pytest.approx(1.0, abs=1e-3)
    # a stronger ridge pulls every factor towards 1 (a GPU with few rates keeps its spec figure)
    shrunk = {c.gpu_name: c.factor for c in fit_speed_corrections(rates, cat, ridge=10.0)}
    assert all(abs(math.log(shrunk[g])) < abs(math.log(fit[g].factor)) for g in truth)
    # no convolutional network among the rates: nothing says how convolutions differ
    assert all(c.conv_factor == pytest.approx(1.0) for c in fit.values())
    # keep= filters rates out of the fit
    assert {c.gpu_name for c in fit_speed_corrections(rates, cat, keep=lambda r: r.gpu != "V100")} == {"A100", "H100"}


def test_fit_separates_convolutional_networks() -> None:
    cat = Catalog.default()
    factor = {"V100": 1.3, "A100": 1.0, "H100": 0.8}
    conv = {"V100": 1.25, "A100": 0.8, "H100": 1.0}  # convolutions further, as share 1 networks show
    rates = []
    for net, scale, share in (("a", 1.0, 0.0), ("b", 7.0, 0.0), ("c", 0.05, 1.0), ("d", 3.0, 1.0), ("e", 2.0, 0.5)):
        for gpu in factor:
            rates.append(SingleGpuRate("lambda", ("v1", net, "amp", "x/s"), gpu, "amp",
                                       scale * _spec_speed(cat, gpu, "amp", share) * factor[gpu] * conv[gpu] ** share,
                                       conv_share=share))
    fit = {c.gpu_name: c for c in fit_speed_corrections(rates, cat, ridge=1e-9)}
    assert fit["V100"].factor / fit["H100"].factor == pytest.approx(1.3 / 0.8, rel=1e-3)
    assert fit["V100"].conv_factor / fit["A100"].conv_factor == pytest.approx(1.25 / 0.8, rel=1e-3)
    # a transfer carries a convolutional network by both factors, another by the first alone
    hw = {g: spec_hardware(cat.gpu_spec(g), fit.values()) for g in factor}
    for share in (0.0, 0.5, 1.0):
        sa, sb = transfer_speeds(hw["V100"], hw["A100"], "amp", share)
        truth = _spec_speed(cat, "A100", "amp", share) * 1.0 * 0.8 ** share / (
            _spec_speed(cat, "V100", "amp", share) * 1.3 * 1.25 ** share)
        assert sb / sa == pytest.approx(truth, rel=1e-3)


def test_shipped_factors_are_the_fit_of_the_shipped_trace() -> None:
    cat = Catalog.default()
    shipped = read_corrections(DATA_DIR / SPEED_CORRECTIONS_CSV)
    fresh = fit_speed_corrections(read_lambda_single_gpu(LAMBDA)[0], cat)
    assert [(c.gpu_name, c.flops, c.rates, c.networks) for c in shipped] == \
        [(c.gpu_name, c.flops, c.rates, c.networks) for c in fresh]
    assert [c.factor for c in shipped] == pytest.approx([c.factor for c in fresh], abs=1e-4)
    assert [c.conv_factor for c in shipped] == pytest.approx([c.conv_factor for c in fresh], abs=1e-4)
    # what the data says: B200 runs well below its spec ratio, V100 (against the others) above it
    by = {(c.gpu_name, c.flops): c.factor for c in shipped}
    assert by[("B200", "fp16")] < 0.85 and by[("V100", "fp32")] > 1.0


def test_transfer_error_is_the_spread_of_transferred_over_measured_time() -> None:
    import numpy as np

    # a transfer predicting the target 2x faster than measured puts its time at half the truth
    checks = [TransferCheck("x", ("m",), "A", "B", measured, {"srifty": 1.0})
              for measured in (0.5, 0.8, 1.0, 1.25, 2.0)]
    spread = transfer_spread(checks)
    logs = np.log([2.0, 1.25, 1.0, 0.8, 0.5])
    assert (spread.q05, spread.q95, spread.transfers) == pytest.approx(
        (np.quantile(logs, 0.05), np.quantile(logs, 0.95), 5))
    assert spread.bounds(by_spec=True) == (spread.q05, spread.q95)  # no spec ratio given: the same
    # with measured factors on some: srifty's spread over those; the spec ratio's over all
    checks = [TransferCheck("x", ("m",), "A", "B", measured, {"srifty": 1.0, "srifty-spec": spec}, factors)
              for measured, spec, factors in ((0.5, 1.0, False), (0.9, 1.0, True), (1.1, 1.0, True), (2.0, 1.0, False))]
    spread = transfer_spread(checks)
    mine, spec = np.log([1 / 0.9, 1 / 1.1]), np.log([2.0, 1 / 0.9, 1 / 1.1, 0.5])
    assert (spread.q05, spread.q95, spread.transfers) == pytest.approx((np.quantile(mine, 0.05), np.quantile(mine, 0.95), 2))
    assert (spread.spec_q05, spread.spec_q95, spread.spec_transfers) == pytest.approx(
        (np.quantile(spec, 0.05), np.quantile(spec, 0.95), 4))
    assert spread.bounds(by_spec=True) == (spread.spec_q05, spread.spec_q95)


def test_shipped_transfer_error_is_the_spread_of_the_shipped_checks() -> None:
    shipped = read_transfer_error(DATA_DIR / TRANSFER_ERROR_JSON)
    fresh = transfer_spread(validate_gpu_transfer(Catalog.default())[0])
    assert shipped.transfers == fresh.transfers > 600 and shipped.spec_transfers == fresh.spec_transfers
    assert (shipped.q05, shipped.q95) == pytest.approx((fresh.q05, fresh.q95), abs=1e-4)
    assert (shipped.spec_q05, shipped.spec_q95) == pytest.approx((fresh.spec_q05, fresh.spec_q95), abs=1e-4)
    # each pair is checked both ways, so the spread is symmetric; transfers miss by up to ~1.8x
    assert shipped.q05 == pytest.approx(-shipped.q95) and 0.3 < shipped.q95 < 1.0


def test_transfer_speeds_apply_factors_only_between_two_measured_gpus() -> None:
    cat = Catalog.default()
    by = {(c.gpu_name, c.flops): c.factor for c in cat.speed_corrections}
    conv = {(c.gpu_name, c.flops): c.conv_factor for c in cat.speed_corrections}
    p4d, p3, g4dn = (hardware_of(cat, t) for t in ("p4d.24xlarge", "p3.8xlarge", "g4dn.xlarge"))
    a100, v100 = cat.gpu_spec("A100"), cat.gpu_spec("V100")
    # speed_for is the spec figure, √(FLOPS × bandwidth) for a network without convolutions, the FLOPS
    # weighing less for a convolutional one; the factor is that of the FLOPS figure the precision runs on
    flops, bw = a100.fp16_bf16_tensor_tflops_dense, a100.memory_bandwidth_gbytes_per_s
    assert p4d.speed_for("amp", 0.0) == pytest.approx(math.sqrt(flops * bw))
    w = CONV_FLOPS_WEIGHT
    assert p4d.speed_for("amp", 1.0) == pytest.approx(flops ** w * bw ** (1 - w))
    assert p4d.speed_for("amp") == pytest.approx(flops ** ((w + 0.5) / 2) * bw ** (1 - (w + 0.5) / 2))  # unknown: ½
    assert p4d.speed_factor("amp", 0.0) == by[("A100", "fp16")] and p4d.speed_factor("tf32", 0.0) == by[("A100", "tf32")]
    assert p4d.speed_factor("fp32") is None  # no FP32 factor fitted for A100
    assert p3.flops_kind("tf32") == "fp32" and p3.speed_factor("tf32", 0.0) == by[("V100", "fp32")]  # V100: no TF32
    # a convolutional network takes the convolution factor too; one whose share is unknown, half of it in log
    assert p4d.speed_factor("amp", 1.0) == pytest.approx(by[("A100", "fp16")] * conv[("A100", "fp16")])
    assert p4d.speed_factor("amp") == pytest.approx(by[("A100", "fp16")] * math.sqrt(conv[("A100", "fp16")]))
    sa, sb = transfer_speeds(p3, p4d, "amp", 0.0)
    assert sb / sa == pytest.approx(_spec_speed(cat, "A100", "amp") * by[("A100", "fp16")]
                                    / (math.sqrt(v100.fp16_bf16_tensor_tflops_dense * v100.memory_bandwidth_gbytes_per_s)
                                       * by[("V100", "fp16")]))
    # a GPU without a factor (T4), or a precision one side has none for: the spec ratio alone
    for a, b, prec in ((g4dn, p4d, "amp"), (p4d, p3, "fp32")):
        sa, sb = transfer_speeds(a, b, prec)
        assert (sa, sb) == (a.speed_for(prec), b.speed_for(prec))
    assert g4dn.speed_factors == ()


def test_transfer_check_fits_factors_without_the_network_under_test() -> None:
    cat = Catalog.default()
    checks, _ = validate_gpu_transfer(cat)
    rates = read_lambda_single_gpu(LAMBDA)[0]
    c = next(c for c in checks if c.dataset == "lambda" and c.group[:3] == ("v2", "ResNet-50 v1.5", "amp")
             and (c.source_gpu, c.target_gpu) == ("H100", "B200"))
    # ResNet-50 is convolutional (data/traces/model_conv_share.csv): its spec speed and both factors
    fit = {(f.gpu_name, f.flops): f.factor * f.conv_factor
           for f in fit_speed_corrections(rates, cat, keep=lambda r: r.group[1] != "ResNet-50 v1.5")}
    spec = _spec_speed(cat, "B200", "amp") / _spec_speed(cat, "H100", "amp")
    conv_spec = _spec_speed(cat, "B200", "amp", 1.0) / _spec_speed(cat, "H100", "amp", 1.0)
    assert c.predicted_ratio["spec"] == pytest.approx(spec) and c.predicted_ratio["srifty-spec"] == pytest.approx(conv_spec)
    assert c.predicted_ratio["srifty"] == pytest.approx(conv_spec * fit[("B200", "fp16")] / fit[("H100", "fp16")])
    # NVIDIA's READMEs (never in the fit): a GPU's rate is the median over its README rows, and
    # both GPUs have factors, fitted on all of Lambda
    import csv
    import statistics

    with open(ROOT / "data/traces/nvidia_dle_single_gpu.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if (r["model"], r["framework"], r["precision"]) == ("resnet50v1.5", "PyTorch", "mixed")]
    rate = {g: statistics.median(float(r["throughput_value"]) for r in rows if r["gpu_model"] == g)
            for g in ("V100-SXM2-16GB", "A100-SXM4-80GB")}
    d = next(c for c in checks if c.dataset == "nvidia-dle" and c.group[:3] == ("resnet50v1.5", "PyTorch", "amp")
             and (c.source_gpu, c.target_gpu) == ("V100", "A100-80GB"))
    assert d.measured_ratio == pytest.approx(rate["A100-SXM4-80GB"] / rate["V100-SXM2-16GB"])
    every = {(f.gpu_name, f.flops): f.factor * f.conv_factor for f in fit_speed_corrections(rates, cat)}
    spec = _spec_speed(cat, "A100-80GB", "amp", 1.0) / _spec_speed(cat, "V100", "amp", 1.0)
    assert d.predicted_ratio["srifty"] == pytest.approx(spec * every[("A100-80GB", "fp16")] / every[("V100", "fp16")])
    # Gavel: K80 has no factor, so its transfers take srifty's spec speed alone
    assert all(c.predicted_ratio["srifty"] == c.predicted_ratio["srifty-spec"] and not c.measured_factors
               for c in checks if c.dataset == "gavel")


def test_leave_one_type_out_refits_the_factors_without_the_held_out_chip() -> None:
    cat = Catalog.default()
    held = catalog_without_gpu_of(cat, "p4d.24xlarge")  # A100: A100-80GB is the same chip, out as well
    names = {c.gpu_name for c in held.speed_corrections}
    assert "A100" not in names and "A100-80GB" not in names and {"V100", "H100", "B200"} <= names
    assert hardware_of(held, "p4d.24xlarge").speed_factors == ()
    refit = {(c.gpu_name, c.flops): c.factor for c in fit_speed_corrections(
        read_lambda_single_gpu(LAMBDA)[0], cat, keep=lambda r: not r.gpu.startswith("A100"))}
    assert {(c.gpu_name, c.flops): c.factor for c in held.speed_corrections} == refit
    assert cat.speed_corrections != held.speed_corrections  # the shipped catalog is untouched
    assert catalog_without_gpu_of(cat, "g4dn.12xlarge") is cat  # T4 has no factor: nothing to hold out


def test_trace_models_carry_their_convolution_share() -> None:
    from srifty.features import UNKNOWN_CONV_SHARE
    from srifty.validate import read_dle_single_gpu

    lam = {r.group[1]: r.conv_share for r in read_lambda_single_gpu(LAMBDA)[0]}
    assert lam["ResNet-50 v1.5"] == 1.0 and lam["BERT-large (SQuAD fine-tune)"] == 0.0
    assert lam["Tacotron2"] == UNKNOWN_CONV_SHARE  # convolutions beside LSTMs: not stated
    dle = {r.group[0]: r.conv_share for r in read_dle_single_gpu(ROOT / "data/traces/nvidia_dle_single_gpu.csv")[0]}
    assert dle["efficientnet: efficientnet-b0"] == 1.0 and dle["GNMT"] == 0.0


def test_convolution_flops_weight_is_the_best_on_lambda_s_spec_ratio_transfers() -> None:
    # CONV_FLOPS_WEIGHT is chosen on Lambda's transfers by the spec ratio alone (no factors), the
    # best of 0, 0.1, ..., 0.5; NVIDIA's rates, never in any fit, then check it (ACCURACY.md)
    from srifty.features import hardware as hardware_mod

    checks = [c for c in validate_gpu_transfer(Catalog.default())[0] if c.dataset == "lambda"]
    rates = {(r.group, r.gpu): r for r in read_lambda_single_gpu(LAMBDA)[0]}
    cat = Catalog.default()

    def mape(w: float) -> float:
        def speed(gpu: str, r: SingleGpuRate) -> float:
            h = spec_hardware(cat.gpu_spec(gpu))
            s = r.conv_share
            ww = w * s + 0.5 * (1 - s)
            return h.peak_tflops(r.precision) ** ww * h.mem_gbytes_per_s ** (1 - ww)
        errs = []
        for c in checks:
            src = rates[(c.group, c.source_gpu)]
            errs.append(abs(c.measured_ratio / (speed(c.target_gpu, src) / speed(c.source_gpu, src)) - 1))
        return sum(errs) / len(errs)

    grid = [i / 10 for i in range(6)]
    assert min(grid, key=mape) == hardware_mod.CONV_FLOPS_WEIGHT
    assert mape(hardware_mod.CONV_FLOPS_WEIGHT) < mape(0.5)  # better than √(FLOPS × bandwidth) for every network

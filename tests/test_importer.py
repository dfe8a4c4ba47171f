"""Trace import: round trip into profiles, bad rows reported with line numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from srifty import profile as profile_mod
from srifty.features import load_job
from srifty.importer import TraceError, import_trace, no_sync_note, read_trace

from conftest import ROOT, run_srifty

HEADER = "model,instance_type,placement,local_batch_size,step_time_s,sync_time_s,param_count\n"


def test_round_trip(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + "m1,g4dn.12xlarge,1,32,0.1,0.0005,1000\n"
                     "m1,g4dn.12xlarge,1,64,0.18,,1000\n"
                     "m1,g4dn.12xlarge,2+2,32,0.15,0.05,1000\n"
                     "m2,p3.8xlarge,4,16,0.2,,\n")
    result = import_trace(trace, tmp_path / "out")
    assert sorted(Path(p).relative_to(tmp_path / "out").as_posix() for p in result.written) == [
        "m1/g4dn.12xlarge.json", "m2/p3.8xlarge.json"]
    p = profile_mod.load(tmp_path / "out/m1/g4dn.12xlarge.json")  # schema-valid
    assert p.doc["stop_reason"] == "imported" and p.doc["job"]["param_count"] == 1000
    runs = {(tuple(r["workers_per_node"]), r["local_batch_size"]): r for r in p.doc["runs"]}
    assert runs[((2, 2), 32)]["step_time_ms"] == pytest.approx(150.0)
    assert runs[((1,), 64)]["sync_time_ms"] is None
    assert p.doc["job"]["local_batch_size"] == 64  # reference: single worker, largest batch
    job = load_job(tmp_path / "out/m1")
    assert job.measured("g4dn.12xlarge", [2, 2], 32) == pytest.approx(150.0)


def test_a_trace_s_convolution_share_picks_the_gpu_speed_factors(tmp_path: Path) -> None:
    from srifty import api
    from srifty.catalog import Catalog
    from srifty.features import hardware_of, transfer_speeds

    head = "model,instance_type,placement,local_batch_size,step_time_s,precision,conv_flop_share\n"
    for share in ("0", "1", ""):
        trace = tmp_path / f"t{share}.csv"
        trace.write_text(head + f"m,p3.2xlarge,1,64,0.2,amp,{share}\n")
        import_trace(trace, tmp_path / f"out{share}")
    assert load_job(tmp_path / "out1/m").conv_flop_share == 1.0 and load_job(tmp_path / "out/m").conv_flop_share is None
    step = {share: api.predict([str(tmp_path / f"out{share}/m")], ["1xp4d.24xlarge:1"])[0].iteration_ms
            for share in ("0", "1", "")}
    # V100 -> A100: the speeds (spec figures and measured factors) of a network with and without convolutions
    cat = Catalog.default()
    speeds = {s: transfer_speeds(hardware_of(cat, "p3.2xlarge"), hardware_of(cat, "p4d.24xlarge"), "amp", s)
              for s in (0.0, 1.0)}
    assert step["0"] / step["1"] == pytest.approx((speeds[0.0][0] / speeds[0.0][1]) / (speeds[1.0][0] / speeds[1.0][1]),
                                                  rel=1e-6)
    assert step["0"] != pytest.approx(step["1"], rel=0.01)
    assert step[""] == pytest.approx(math.sqrt(step["0"] * step["1"]), rel=1e-6)  # unknown: halfway in log
    bad = tmp_path / "bad.csv"
    bad.write_text(head + "m,p3.2xlarge,1,64,0.2,amp,1.5\n")
    with pytest.raises(TraceError, match="conv_flop_share must be a share between 0 and 1"):
        read_trace(bad)


def test_a_model_whose_gradient_size_cannot_be_known_is_flagged(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + "m1,g4dn.12xlarge,1,32,0.1,,1000\n"     # param_count stated
                     "m2,p3.8xlarge,1,16,0.1,,\n"
                     "m2,p3.8xlarge,2+2,16,0.2,0.05,\n"              # sync across nodes only: no size to read
                     "m3,g4dn.12xlarge,1,16,0.1,,\n"
                     "m3,g4dn.12xlarge,4,16,0.2,0.03,\n")           # one node, four workers: its sync gives a size
    result = import_trace(trace, tmp_path / "out")
    assert len(result.notes) == 1 and result.notes[0].startswith("m2 on p3.8xlarge:")
    for model, itype, flagged in (("m1", "g4dn.12xlarge", False), ("m2", "p3.8xlarge", True),
                                  ("m3", "g4dn.12xlarge", False)):
        doc = profile_mod.load(tmp_path / f"out/{model}/{itype}.json").doc
        assert any("no param_count" in w for w in doc["warnings"]) is flagged, model
    # m3's gradient size is inferred from its single-node sync time, so communication is simulated
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder, with_estimated_gradient_size

    cat = Catalog.default()
    config = parse_config("2xg4dn.12xlarge").resolved(cat)
    m3 = FeatureBuilder(with_estimated_gradient_size(load_job(tmp_path / "out/m3"), cat, None), cat)
    notes = m3.estimate(config, 16).notes
    assert not any("gradient size unknown" in n for n in notes)
    # ... and the estimate says that it rests on that inference, with the size it inferred
    assert m3.grad_bytes_estimated and f"single-node sync times ({m3.grad_bytes / 1e6:.3g} MB)" in " ".join(notes)
    assert not any("sync times" in n for n in m3.estimate(parse_config("1xg4dn.12xlarge:1").resolved(cat), 16).notes)
    assert not any("sync times" in n
                   for n in FeatureBuilder(load_job(tmp_path / "out/m1"), cat).estimate(config, 32).notes)
    assert any("gradient size unknown" in n
               for n in FeatureBuilder(load_job(tmp_path / "out/m2"), cat).estimate(
                   parse_config("2xp3.8xlarge").resolved(cat), 16).notes)
    res = run_srifty("import", str(trace), "--out", str(tmp_path / "o"))
    assert res.returncode == 0 and "warning: m2 on p3.8xlarge: no param_count" in res.stderr
    assert "m1 on" not in res.stderr and "m3 on" not in res.stderr
    # and a recommendation built on it says so
    res = run_srifty("recommend", "--profile", str(tmp_path / "o/m2"), "--model", "simulator",
                     "--instance-types", "p3.*", "--max-nodes", "2", "--json", timeout=120)
    assert res.returncode == 0, res.stderr
    assert any(n.startswith("gradient size unknown") for n in json.loads(res.stdout)["notes"])
    res = run_srifty("recommend", "--profile", str(tmp_path / "o/m3"), "--model", "simulator",
                     "--instance-types", "g4dn.12xlarge", "--max-nodes", "2", "--json", timeout=120)
    assert res.returncode == 0, res.stderr
    assert any(n.startswith("gradient size estimated from the profile's single-node sync times")
               for n in json.loads(res.stdout)["notes"])


def test_a_trace_s_sync_times_set_its_overlap_and_their_absence_is_flagged(tmp_path: Path) -> None:
    """deepspeech2's single-node rows, imported as a user would: the shipped model reads its
    overlap off their sync times, and off their step times less the single-GPU step at the same
    batch where the trace states no sync time, to as late a window. Its multi-GPU rows alone, with
    neither, say at import that the overlap cannot be read, and predict with the default."""
    import csv

    from srifty import model as m
    from srifty.catalog import Catalog
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder, OverlapFit
    from srifty.features.notes import READY_UNKNOWN_NOTE

    with open(ROOT / "data/traces/pollux_g4dn12xlarge.import.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["model"] == "deepspeech2" and "+" not in r["placement"]]
    fields = list(rows[0])
    variants = {"with": rows, "steps": [{**r, "sync_time_s": ""} for r in rows],
                "multi": [{**r, "sync_time_s": ""} for r in rows if r["placement"] != "1"]}
    imported = {}
    for name, written in variants.items():
        with open(tmp_path / f"{name}.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields)
            writer.writeheader()
            writer.writerows(written)
        imported[name] = import_trace(tmp_path / f"{name}.csv", tmp_path / name)
    assert imported["with"].notes == imported["steps"].notes == []
    assert imported["multi"].notes == [no_sync_note("deepspeech2", "g4dn.12xlarge")]
    cat = Catalog.default()
    pred = m.load(m.shipped_model())
    config = parse_config("2xg4dn.12xlarge").resolved(cat)
    read, from_steps, plain = (pred.builder(load_job(tmp_path / f"{name}/deepspeech2"), cat)
                               for name in ("with", "steps", "multi"))
    assert isinstance(read.job.overlap_fit, OverlapFit) and plain.job.overlap_fit is None
    assert read.job.overlap_fit.derived == 0
    derived = from_steps.job.overlap_fit
    # both put every bucket in the last tenth of the compute (0.1 read off the sync times, 0.05 off the steps)
    assert derived is not None and max(derived.window, read.job.overlap_fit.window) <= 0.1
    assert derived.derived == derived.runs == sum(1 for r in rows if r["placement"] != "1")
    sources = [pred.predict(b.job, cat, [(config, 20)])[0].parts["overlap_source"] for b in (read, from_steps, plain)]
    assert sources == ["read-from-sync", "read-from-steps", "default"]
    assert READY_UNKNOWN_NOTE in plain.estimate(config, 20).notes
    assert READY_UNKNOWN_NOTE not in read.estimate(config, 20).notes
    # imagenet's single-node sync times, read the same way, keep DDP's usual overlap: the prediction
    # says that they were read, and by how much the default misses them
    imagenet = load_job(ROOT / "profiles/pollux/imagenet").restricted(lambda r: r.nodes == 1)
    checked = pred.builder(imagenet, cat)
    fit = checked.job.overlap_check
    assert checked.job.overlap_fit is None and fit is not None and not fit.applies and fit.runs > 10
    (p,) = pred.predict(checked.job, cat, [(config, 32)])
    assert p.parts["overlap_source"] == "default-checked"
    assert (f"do not overturn DDP's usual overlap, which misses them by x{math.exp(fit.default_error):.2f} (but no "
            "other window comes 25% closer)") in " ".join(p.warnings) and READY_UNKNOWN_NOTE not in p.warnings
    ncf = pred.builder(load_job(ROOT / "profiles/pollux/ncf").restricted(lambda r: r.nodes == 1), cat).job
    assert ncf.overlap_check is not None and ncf.overlap_check.default_error < math.log(2)
    assert ncf.overlap_check.default_kept_because == "within x2, which the link's speed can explain"
    # the simulation is the unread job's; its sync times measured how much backward hides, so its overlap is
    # not unknown, and its step's bounds do not reach none of the allreduce hidden
    unread = FeatureBuilder(imagenet, cat, pred.link_scale).estimate(config, 32)
    got = checked.estimate(config, 32)
    assert (got.sim_ms, got.step_bounds[0]) == (unread.sim_ms, unread.step_bounds[0])
    assert unread.overlap_unknown and not got.overlap_unknown
    assert got.step_bounds[1] == got.batch_bounds[1] < unread.step_bounds[1] / 1.2
    # backward hides less of the allreduce: the step is longer, by at most the whole allreduce
    est_read, est_plain = read.estimate(config, 20), plain.estimate(config, 20)
    extra = est_read.sim_ms - est_plain.sim_ms
    assert 0 < extra <= math.expm1(est_plain.features["log_allreduce_ms"])


def test_bad_rows_listed_with_line_numbers(tmp_path: Path) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text(HEADER + "m1,g4dn.12xlarge,1,32,0.1,,\n"
                     "m1,g4dn.12xlarge,4+x,32,0.1,,\n"
                     "m1,g4dn.12xlarge,1,0,0.1,,\n"
                     "m1,g4dn.12xlarge,1,8,-1,,\n")
    with pytest.raises(TraceError) as err:
        read_trace(trace)
    msg = str(err.value)
    assert "3 bad row(s)" in msg and "line 3" in msg and "line 4" in msg and "line 5" in msg and "line 2" not in msg
    t = read_trace(trace, skip_bad=True)
    assert [n for n, _ in t.bad_rows] == [3, 4, 5] and len(t.rows) == 1
    res = run_srifty("import", str(trace), "--out", str(tmp_path / "o"), "--skip-bad")
    assert res.returncode == 0 and "skipped line 4" in res.stderr
    res = run_srifty("import", str(trace), "--out", str(tmp_path / "o2"))
    assert res.returncode != 0 and "line 5" in res.stderr


def test_missing_columns(tmp_path: Path) -> None:
    trace = tmp_path / "c.csv"
    trace.write_text("model,instance_type,step_time_s\nm,g4dn.xlarge,0.1\n")
    with pytest.raises(TraceError, match="placement, local_batch_size"):
        read_trace(trace)


@pytest.mark.parametrize("trace, shipped_dir", [("pollux_g4dn12xlarge.import.csv", "pollux"),
                                                ("lambda_ec2.import.csv", "lambda")])
def test_shipped_profiles_match_trace(tmp_path: Path, trace: str, shipped_dir: str) -> None:
    result = import_trace(ROOT / "data/traces" / trace, tmp_path)
    assert sorted(Path(p).relative_to(tmp_path) for p in result.written) == \
        sorted(p.relative_to(ROOT / "profiles" / shipped_dir) for p in (ROOT / "profiles" / shipped_dir).rglob("*.json"))
    for path in result.written:
        shipped = ROOT / "profiles" / shipped_dir / Path(path).relative_to(tmp_path)
        a, b = json.loads(Path(path).read_text()), json.loads(shipped.read_text())
        assert a["runs"] == b["runs"]


def test_lambda_conversion_keeps_sample_rows_and_derives_step_time() -> None:
    """convert_lambda.py: step = global batch / samples per second, local = global / GPUs."""
    import csv

    src = list(csv.DictReader((ROOT / "data/traces/lambda_ec2_throughput.csv").open()))
    out = list(csv.DictReader((ROOT / "data/traces/lambda_ec2.import.csv").open()))
    in_samples = [r for r in src if r["throughput_unit"] in ("images/s", "sequences/s", "samples/s")]
    assert len(out) == len(in_samples) and len(out) > 50
    r = next(r for r in src if r["model"] == "BERT-base (SQuAD fine-tune)" and r["precision"] == "FP16"
             and r["instance_type"] == "p3.16xlarge")
    o = next(o for o in out if o["model"] == "bert-base-squad-fp16" and o["instance_type"] == "p3.16xlarge")
    gbs = float(r["global_batch_size"])
    assert o["placement"] == "8" and int(o["local_batch_size"]) == gbs / 8
    assert float(o["step_time_s"]) == pytest.approx(gbs / float(r["throughput_samples_per_s"]), rel=1e-5)

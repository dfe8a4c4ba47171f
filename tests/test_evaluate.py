"""`srifty evaluate`: the space, the choices, regret and the report (pure parts), and a
reduced real evaluation on the emulated cluster (root)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from srifty import cluster
from srifty import evaluate as ev
from srifty.configspec import parse_config
from srifty.errors import SriftyError

from conftest import EXAMPLES, ROOT, run_srifty

SPEC = cluster.load_spec(ROOT / "configs" / "emulated.yaml")


def test_space_respects_cores_and_hosts() -> None:
    cands = ev.candidate_space(SPEC, sorted(SPEC.instance_types), max_hosts=3, cores=2.0)
    assert cands
    configs = [c.config for c in cands]
    assert len(configs) == len(set(configs))
    for c in cands:
        assert 1 <= len(c.hosts) <= 3 and len(set(c.hosts)) <= 2
        share = sum(SPEC.instance_types[t].cpu_share for t in c.hosts)
        assert c.cpu_share == pytest.approx(share) and share <= 2.0 + 1e-9
        assert c.usd_per_hour == pytest.approx(sum(SPEC.instance_types[t].price_per_hour for t in c.hosts))
    # nothing that fits is left out: 3x emu.large (3 cores) does not fit, 2x does
    assert "2xemu.large" in configs and "3xemu.large" not in configs
    assert "1xemu.large+1xemu.small" in configs


def test_case_parsing() -> None:
    c = ev.Case.parse("budget=0.4, min_throughput=50")
    assert (c.budget_per_hour, c.min_throughput, c.resolved_objective) == (0.4, 50.0, "cost")
    assert ev.Case.parse("").resolved_objective == "throughput"
    assert ev.Case.parse("objective=cost-per-sample").resolved_objective == "cost-per-sample"
    for bad in ("budget=abc", "speed=3", "objective=fast"):
        with pytest.raises(SriftyError):
            ev.Case.parse(bad)


def _cand(config: str, usd: float, pred: float | None, meas: float | None) -> ev.Candidate:
    hosts = []
    for g in config.split("+"):
        n, t = g.split("x", 1)
        hosts += [t] * int(n)
    return ev.Candidate(config, hosts, usd, 0.5, predicted_samples_per_s=pred, measured_samples_per_s=meas,
                        source="predicted")


def test_regret_against_the_oracle() -> None:
    a = _cand("1xemu.small", 0.10, pred=10, meas=9)
    b = _cand("2xemu.small", 0.20, pred=25, meas=16)
    c = _cand("1xemu.large", 0.48, pred=30, meas=40)
    cands = [a, b, c]
    case = ev.Case(budget_per_hour=0.5)
    pick, oracle = ev.best(cands, case, measured=False), ev.best(cands, case, measured=True)
    assert pick is c and oracle is c
    assert ev.regret(pick, oracle, case) == (0.0, "")
    case = ev.Case(budget_per_hour=0.3)
    pick, oracle = ev.best(cands, case, False), ev.best(cands, case, True)
    assert pick is b and oracle is b
    # cheapest meeting 15 samples/s: srifty thinks b (25 predicted), measured b does 16: fine
    case = ev.Case(min_throughput=15)
    assert ev.best(cands, case, False) is b and ev.best(cands, case, True) is b
    # a floor the pick misses once measured: no regret figure, a note instead
    case = ev.Case(min_throughput=20)
    pick, oracle = ev.best(cands, case, False), ev.best(cands, case, True)
    assert pick is b and oracle is c
    r, note = ev.regret(pick, oracle, case)
    assert r is None and "misses the throughput floor" in note
    # throughput regret is the share of throughput lost
    case = ev.Case(budget_per_hour=0.5)
    assert ev.regret(b, c, case)[0] == pytest.approx(1 - 16 / 40)
    # cost regret is the extra $/h
    assert ev.regret(c, b, ev.Case(min_throughput=15))[0] == pytest.approx(0.48 / 0.20 - 1)


def test_baselines() -> None:
    cands = [_cand("1xemu.small", 0.10, 10, 9), _cand("2xemu.small", 0.20, 20, 16), _cand("3xemu.small", 0.30, 30, 20),
             _cand("1xemu.large", 0.48, 30, 40), _cand("2xemu.large", 0.96, 50, 70),
             _cand("1xemu.large+1xemu.small", 0.58, 45, 44)]
    base = ev.baselines(cands, ev.Case(budget_per_hour=0.6), max_hosts=3)
    names = list(base)
    assert base[names[0]].config == "1xemu.small"  # cheapest per hour
    assert base[names[1]].config == "1xemu.large"  # fastest type; 2x is over budget
    assert base[names[2]].config == "1xemu.large"  # best homogeneous within budget (mix excluded)


@given(st.lists(st.tuples(st.floats(0.05, 2.0), st.floats(1, 500), st.floats(1, 500)), min_size=1, max_size=30),
       st.floats(0.05, 3.0))
@settings(max_examples=60, deadline=None)
def test_oracle_is_never_beaten_by_a_feasible_pick(rows, budget) -> None:
    cands = [_cand(f"{i + 1}xemu.small", usd, pred, meas) for i, (usd, pred, meas) in enumerate(rows)]
    case = ev.Case(budget_per_hour=budget)
    oracle = ev.best(cands, case, measured=True)
    pick = ev.best(cands, case, measured=False)
    r, _ = ev.regret(pick, oracle, case)
    if oracle is not None and pick is not None:
        assert r is not None and r >= -1e-12  # the oracle is the best measured feasible choice


def test_report_renders_every_configuration() -> None:
    cands = [_cand("1xemu.small", 0.10, 10, 9), _cand("2xemu.small", 0.20, 25, 16)]
    cands[0].predicted_interval, cands[1].predicted_interval = (8.0, 12.0), (20.0, 30.0)  # 9 inside, 16 outside
    cases = [ev.CaseResult(ev.Case(budget_per_hour=0.3), cands[1], cands[1], 0.0, "",
                           {"cheapest": {"config": "1xemu.small", "regret": 0.4375, "note": ""}})]
    e = ev.Evaluation("m", "s.py", 16, ["emu.small"], 2, cands, cases, 60.0, 0.01, 600.0, 0.1,
                      {"trained_on": ["x"], "rows": 10, "excluded_model": "m"})
    text = ev.render_markdown(e, "srifty evaluate s.py")
    assert "1xemu.small" in text and "2xemu.small" in text and "43.8%" in text
    assert e.summary()["profiling_share_of_oracle"] == pytest.approx(0.1)
    assert e.summary()["prediction_mape"] == pytest.approx((1 / 9 + 9 / 16) / 2)
    assert (e.summary()["interval_hits"], e.summary()["interval_checked"]) == (1, 2)
    assert "inside the predicted 5–95% interval for 1 of 2" in text
    assert e.summary()["oracle_median_rel_ci"] is None and "The oracle's own figures" not in text  # no CI recorded
    # measured 9 samples/s ± 20%: 7.5..11.25 holds the prediction 10; 16 ± 10%: 14.5..17.8 misses 25
    cands[0].measured_rel_ci, cands[1].measured_rel_ci = 0.2, 0.1
    assert [c.within_measurement_ci for c in cands] == [True, False]
    s = e.summary()
    assert s["oracle_median_rel_ci"] == pytest.approx(0.15)
    assert (s["within_measurement_ci"], s["measurement_ci_checked"]) == (1, 2)
    assert "whose 95% CI is ±15.0%" in ev.render_markdown(e, "srifty evaluate s.py")


def _entry(c: ev.Candidate | None, regret: float | None, note: str = "") -> dict:
    """A CaseResult.baselines entry, as Evaluator.run writes it."""
    return {"config": c.config if c else None, "regret": regret, "note": note,
            "measured_samples_per_s": c.measured_samples_per_s if c else None,
            "usd_per_hour": c.usd_per_hour if c else None}


def test_savings_against_a_baseline() -> None:
    pick = _cand("2xemu.small", 0.20, 25, 16.0)  # $0.20/h at 16 samples/s
    cheap = _cand("1xemu.small", 0.10, 10, 9.0)  # $0.10/h at 9 samples/s
    dear = _cand("2xemu.large", 0.96, 50, 40.0)  # $0.024 per sample against the pick's $0.0125
    # throughput objective: the pick loses 0.2 of the oracle's throughput, the baseline 0.55
    x = ev.against_baseline(pick, 0.2, _entry(cheap, 0.55), profiling_usd=0.01)
    assert x.verdict is ev.Verdict.BETTER
    per_sample_pick, per_sample_cheap = 0.20 / 16, 0.10 / 9
    assert x.job_cost_change == pytest.approx(per_sample_pick / per_sample_cheap - 1)  # +12.5%: dearer
    assert x.job_time_change == pytest.approx(9 / 16 - 1)  # 44% faster
    assert x.payback_hours is None  # the pick costs more per sample: nothing repays the profiling
    # against a baseline that costs more per sample: the saving per hour of training on the pick
    # is what the baseline would charge for the pick's hour of samples, less the pick's price
    y = ev.against_baseline(pick, 0.1, _entry(dear, 0.1), profiling_usd=0.01)
    assert y.verdict is ev.Verdict.SAME  # equal regret
    saved_per_hour = 0.96 * 16 / 40 - 0.20
    assert y.payback_hours == pytest.approx(0.01 / saved_per_hour)  # 3.3 minutes
    assert y.job_cost_change == pytest.approx((0.20 / 16) / (0.96 / 40) - 1)
    assert ev.against_baseline(pick, 0.3, _entry(dear, 0.1), 0.01).verdict is ev.Verdict.WORSE
    # the same configuration: nothing changes; a baseline that breaks the constraints loses to a pick that keeps them
    assert ev.against_baseline(pick, 0.0, _entry(pick, 0.0), 0.01) == ev.Savings(ev.Verdict.SAME, 0.0, 0.0, None)
    broken = ev.against_baseline(pick, 0.0, _entry(cheap, None, "misses the throughput floor"), 0.01)
    assert broken == ev.Savings(ev.Verdict.BETTER)
    assert ev.against_baseline(pick, None, _entry(None, None), 0.01).verdict is ev.Verdict.SAME  # neither meets them
    assert ev.against_baseline(None, None, _entry(cheap, 0.4), 0.01).verdict is ev.Verdict.WORSE
    cell = ev.savings_cell(x, _entry(cheap, 0.55))
    assert cell == "better: job 12% dearer, 0.56× the time"
    assert ev.savings_cell(y, _entry(dear, 0.1)) == "same: job 48% cheaper, 2.50× the time; profiling repaid after 3 min of training"
    assert ev.savings_cell(broken, _entry(cheap, None, "misses the throughput floor")) == \
        "better: 1xemu.small misses the throughput floor"


def test_report_counts_the_verdicts_against_the_baselines() -> None:
    a, b, c = _cand("1xemu.small", 0.10, 10, 9.0), _cand("2xemu.small", 0.20, 25, 16.0), _cand("1xemu.large", 0.48, 30, 40.0)
    cases = [ev.CaseResult(ev.Case(budget_per_hour=0.3), b, b, 0.0, "",
                           {"cheapest": _entry(a, 1 - 9 / 16), "homogeneous": _entry(b, 0.0)}),
             ev.CaseResult(ev.Case(budget_per_hour=0.5), b, c, 0.6, "",
                           {"cheapest": _entry(a, 1 - 9 / 40), "homogeneous": _entry(c, 0.0)})]
    e = ev.Evaluation("m", "s.py", 16, ["emu.small"], 2, [a, b, c], cases, 60.0, 0.01, 600.0, 0.1,
                      {"trained_on": ["x"], "rows": 10, "excluded_model": "m"})
    v = e.summary()["against_baselines"]
    assert v["per_baseline"] == {"cheapest": {"better": 2, "same": 0, "worse": 0},
                                 "homogeneous": {"better": 0, "same": 1, "worse": 1}}
    assert (v["cases"], v["at_least_as_good_as_every_baseline"], v["better_than_every_baseline"]) == (2, 1, 0)
    pooled = ev.pool_verdicts([v, v])
    assert pooled["per_baseline"]["homogeneous"] == {"better": 0, "same": 2, "worse": 2} and pooled["cases"] == 4
    text = ev.render_markdown(e, "srifty evaluate s.py")
    assert "at least as good as every baseline in 1 of 2 cases and better than every one in 0" in text
    assert "| budget $0.3/h, objective throughput | better: job 12% dearer, 0.56× the time | same: the same configuration |" in text
    doc = e.to_dict()
    assert doc["cases"][1]["against_baselines"]["homogeneous"]["verdict"] == "worse"
    json.dumps(doc)  # serialisable


def _evaluation(cands: list[ev.Candidate]) -> ev.Evaluation:
    return ev.Evaluation("m", "s.py", 16, ["emu.small", "emu.large"], 2, cands, [], 60.0, 0.01, 600.0, 0.1,
                         {"trained_on": ["x"], "rows": 10, "excluded_model": "m"})


def test_compare_recordings_measures_the_oracles_own_drift() -> None:
    now = [_cand("1xemu.small", 0.1, 10, 11.0), _cand("1xemu.large", 0.5, 30, 36.0),
           _cand("2xemu.small", 0.2, 20, 18.0), _cand("1xemu.large+1xemu.small", 0.6, 25, 24.0)]
    for i, c in enumerate(now):
        c.measured_at = f"2026-12-04T06:0{i}:00+0000"
    before = {"model": "m", "batch_size": 16, "candidates": [
        {"config": "1xemu.small", "measured_samples_per_s": 10.0}, {"config": "1xemu.large", "measured_samples_per_s": 30.0},
        {"config": "2xemu.small", "measured_samples_per_s": 20.0},
        {"config": "1xemu.large+1xemu.small", "measured_samples_per_s": 20.0}]}
    d = ev.compare_recordings(before, _evaluation(now), "earlier")
    assert d is not None and (d.configurations, d.replayed) == (4, 2)
    assert d.single_host_mape == pytest.approx((0.1 + 0.2) / 2)
    assert d.multi_host_mape == pytest.approx((0.1 + 0.2) / 2)
    # replay: 20 × 1.1 against 18; 20 × √(1.1 × 1.2) against 24
    assert d.replay_mape == pytest.approx((abs(22 - 18) / 18 + abs(20 * (1.32 ** 0.5) - 24) / 24) / 2)
    assert d.replay_worst == pytest.approx(4 / 18)
    e = _evaluation(now)
    e.drift = d
    assert "Repeatability of the oracle itself" in ev.render_markdown(e, "srifty evaluate s.py")
    # regenerated from the same runs: the comparison made then is kept, not one against itself
    same = e.to_dict()
    assert ev.same_recording(same, e) and ev.compare_recordings(same, e, "itself") == d
    assert ev.compare_recordings({**before, "batch_size": 32}, e, "other batch") is None
    assert ev.recording_label(same, "x.json").startswith("the recording of 2026-12-04")
    assert ev.recording_label(before, "x.json", "2026-12-03") == "the earlier recording in x.json (committed 2026-12-03)"


def test_a_partial_cached_run_is_run_again(tmp_path: Path) -> None:
    """An interrupted evaluation leaves a partial profile in the cache: resuming must measure that
    configuration again, never take the partial figure as the oracle's."""
    from srifty import profile as profile_mod

    doc = json.loads((ROOT / "profiles" / "emulated" / "cnn_resnet" / "1xemu.small-b16.json").read_text())
    calls = []

    def fake_profile(hosts: str, out: Path, collectives: bool, batch_by_type: dict | None = None) -> dict:
        calls.append(hosts)
        profile_mod.save(doc, out)
        return doc

    evaluator = ev.Evaluator(str(EXAMPLES / "cnn_resnet.py"), str(ROOT / "configs" / "emulated.yaml"), str(tmp_path),
                             16, profile_fn=fake_profile)
    cached = tmp_path / "profiles" / "cnn_resnet" / "1xemu.small-b16.json"
    profile_mod.save({**doc, "status": "partial", "partial_reason": "interrupted", "stop_reason": "interrupted"}, cached)
    got, seconds, from_cache = evaluator._run(["emu.small"])
    assert calls and not from_cache and got["status"] == "complete"
    assert seconds == pytest.approx(doc["measurement"]["wall_seconds"])
    assert evaluator._run(["emu.small"])[2] and len(calls) == 1  # a complete run is taken from the cache


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the emulated cluster needs root (network namespaces, tc, cgroups)")
def test_reduced_evaluation_end_to_end(tmp_path: Path) -> None:
    """One example, a small space: every configuration really run, regret measured and reported."""
    work, report = tmp_path / "work", tmp_path / "EVAL.md"
    res = subprocess.run(
        [sys.executable, "-m", "srifty", "evaluate", str(EXAMPLES / "mlp_recsys.py"), "--batch-size", "64",
         # a whole-core and a half-core type: hosts start sooner than configs/emulated.yaml's
         "--spec", str(ROOT / "tests" / "data" / "emulated-fast.yaml"), "--types", "emu.whole,emu.half",
         "--max-hosts", "2", "--max-seconds", "2", "--case", "budget=0.7",
         # emulated hosts read only the emulated corpus's residual and sweeps: 3 s to train, not 19
         "--corpus", str(ROOT / "profiles" / "emulated"),
         "--case", "min_throughput=1", "--work-dir", str(work), "--report", str(report), "--json"],
        capture_output=True, text=True, cwd=str(ROOT), timeout=900,
        env={**os.environ, "SRIFTY_PROFILE_CLUSTER": "evtest"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(res.stdout)
    configs = {c["config"] for c in doc["candidates"]}
    space = {"1xemu.whole", "2xemu.whole", "1xemu.half", "2xemu.half", "1xemu.whole+1xemu.half"}
    # and any mix srifty picked at its own batch split, run as its plan
    assert space <= configs and all(c.startswith("1xemu.whole+1xemu.half at ") for c in configs - space)
    assert all(c["measured_samples_per_s"] > 0 for c in doc["candidates"])
    for case in doc["cases"]:
        assert case["oracle"] in configs and case["pick"] in configs
        assert case["pick_regret"] is not None or case["pick_note"]
        if case["pick_regret"] is not None:
            assert case["pick_regret"] >= -1e-9
        # srifty's pick against each baseline: a verdict from the two measured regrets
        assert set(case["against_baselines"]) == set(case["baselines"])
        for name, x in case["against_baselines"].items():
            b = case["baselines"][name]
            if case["pick_regret"] is not None and b["regret"] is not None:
                want = ("same" if abs(case["pick_regret"] - b["regret"]) <= 1e-9
                        else "better" if case["pick_regret"] < b["regret"] else "worse")
                assert x["verdict"] == want
    s = doc["summary"]
    assert s["against_baselines"]["cases"] == 2
    assert s["prediction_mape"] is not None and s["oracle_seconds"] > 0 and s["profiling_seconds"] > 0
    text = report.read_text()
    assert "regret" in text.lower() and "Profiling cost against what srifty's pick saves" in text


def test_the_pick_is_srifty_recommends_and_a_split_mix_is_run_as_its_plan(tmp_path: Path) -> None:
    """The evaluation chooses through the solver exactly as `srifty recommend` does: the same
    model, profiles, constraints and availability give recommend's chosen configuration and batch
    split; a pick whose split differs from the evaluation's batch is a candidate of its own, run
    with the plan's per-type batches."""
    from srifty import model as m
    from srifty import profile as profile_mod
    from srifty.profiling.emulated import config_string

    shipped = ROOT / "profiles" / "emulated"
    runs: list[tuple[str, dict | None]] = []

    def fake_profile(hosts: str, out: Path, collectives: bool, batch_by_type: dict | None = None) -> dict:
        runs.append((hosts, batch_by_type))
        types = [t for part in hosts.split(",") for t, n in [part.split(":")] for _ in range(int(n))]
        src = (shipped / "collectives" / "2xemu.cpu.json" if collectives
               else shipped / "cnn_resnet" / f"{config_string(types)}-b16.json")
        doc = json.loads(src.read_text())
        profile_mod.save(doc, out)
        return doc

    # the emulated corpus alone: emulated hosts read only its residual and sweeps
    evaluator = ev.Evaluator(str(EXAMPLES / "cnn_resnet.py"), str(ROOT / "configs" / "emulated.yaml"), str(tmp_path),
                             16, max_hosts=2, profile_fn=fake_profile, corpus=[str(shipped)])
    cands = ev.candidate_space(evaluator.spec, evaluator.types, 2, 2.0)
    paths, sweep, _, _ = evaluator.cheap_profiles()
    evaluator.predict(cands, paths, sweep)
    case = ev.Case.parse("budget=1.00,available=emu.large=1")
    assert case.limits == {"emu.large": 1} and "at most 1 emu.large" in case.label()
    rec = evaluator.choose(case, 2.0)
    assert rec is not None and rec.usd_per_hour <= 1.0 + 1e-9
    hosts = [g.instance_type for g in parse_config(rec.config).groups for _ in range(g.count)]
    assert hosts.count("emu.large") <= 1
    # srifty recommend, on the same profiles with the same model, chooses the same
    model_file = tmp_path / "model.npz"
    m.save(evaluator.oracle.predictor, model_file)
    res = run_srifty("recommend", "--profile", str(paths[0].parent), "--catalog", str(ROOT / "configs" / "emulated.yaml"),
                     "--model", str(model_file), "--budget", "1", "--max-nodes", "2", "--no-spot",
                     "--available", "emu.large=1", "--top", "1", "--json")
    assert res.returncode == 0, res.stderr
    chosen = json.loads(res.stdout)["recommendations"][0]
    assert chosen["config"] == rec.config
    assert chosen["batch_split"] == {t: round(b, 2) for t, b in rec.batch_split.items()}
    # a pick is the space's candidate when it runs the evaluation's batch; otherwise its own,
    # with the batches its plan gives each type, and the run gets them
    assert all(b == 16 for b in rec.batch_split.values())  # (cnn_resnet: one emu.large, at the batch)
    n = len(cands)
    assert evaluator.as_candidate(rec, cands) in cands[:n] and len(cands) == n
    split_rec = dataclasses.replace(rec, config="1xemu.large+1xemu.medium", mixed=True, global_batch=32.0,
                                    batch_split={"emu.large": 21.4, "emu.medium": 10.6})
    pick = evaluator.as_candidate(split_rec, cands)
    assert pick is cands[-1] and len(cands) == n + 1 and evaluator.as_candidate(split_rec, cands) is pick
    assert pick.config == "1xemu.large+1xemu.medium at emu.large 21 / emu.medium 11"
    assert pick.batch_by_type == {"emu.large": 21, "emu.medium": 11} and pick.usd_per_hour == pytest.approx(0.65)
    assert pick.predicted_samples_per_s == pytest.approx(32 / (rec.iteration_ms / 1e3))
    mixed = next(c for c in cands if c.config == "1xemu.medium+1xemu.small")
    before = len(runs)
    mixed.batch_by_type = {"emu.medium": 20, "emu.small": 12}
    evaluator.measure([mixed])
    assert runs[before:] == [("emu.medium:1,emu.small:1", mixed.batch_by_type)]
    doc = json.loads((tmp_path / "profiles" / "cnn_resnet" / "1xemu.medium+1xemu.small-b20-12.json").read_text())
    median = doc["summary"]["iteration_ms"]["median"]
    assert mixed.measured_samples_per_s == pytest.approx(32 / (median / 1e3))  # the global batch as run


def test_a_case_naming_a_type_outside_the_space_is_refused_before_any_run(tmp_path: Path) -> None:
    def never(*args: object) -> dict:
        raise AssertionError("nothing should run")

    evaluator = ev.Evaluator(str(EXAMPLES / "cnn_resnet.py"), str(ROOT / "configs" / "emulated.yaml"), str(tmp_path),
                             16, types=["emu.small", "emu.net"], profile_fn=never)
    with pytest.raises(SriftyError, match="'emu.large' is not a host type of this evaluation"):
        evaluator.run([ev.Case.parse("budget=1"), ev.Case.parse("budget=1,available=emu.large=1")])
    with pytest.raises(SriftyError, match="available=TYPE=N"):
        ev.Case.parse("available=emu.large@spot=1")

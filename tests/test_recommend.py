"""srifty recommend: solver invariants (hypothesis) and the CLI, on the shipped catalogs and profiles.

The oracle is the analytical simulator (ModelOracle without a trained model) so that the
tests stay fast; the learned model plugs into the same ModelOracle."""

from __future__ import annotations

import json
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from srifty import solver
from srifty.catalog import Catalog
from srifty.configspec import parse_config
from tests.conftest import ROOT, run_srifty

EMU_PROFILES = str(ROOT / "profiles/emulated/cnn_resnet")


@lru_cache(maxsize=1)
def emulated() -> tuple:
    cat = Catalog.from_emulated_spec(ROOT / "configs/emulated.yaml")
    job, mcat = solver.load_inputs([EMU_PROFILES], cat)
    return cat, solver.ModelOracle(job, mcat, None)


def run(**kw):
    cat, oracle = emulated()
    kw.setdefault("max_nodes", 6)
    return solver.solve(oracle, cat, solver.Constraints(**kw), top=kw.pop("top", 50) if "top" in kw else 50)


def all_feasible(**kw):
    """Every feasible configuration (top = a large number)."""
    cat, oracle = emulated()
    kw.setdefault("max_nodes", 5)
    return solver.solve(oracle, cat, solver.Constraints(**kw), top=10**6)


SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(budget=st.floats(0.2, 3.0), minthr=st.one_of(st.none(), st.floats(5, 200)),
       spot=st.booleans(), maxint=st.one_of(st.none(), st.floats(0.01, 0.5)))
def test_every_returned_configuration_meets_every_constraint(budget, minthr, spot, maxint):
    try:
        r = all_feasible(budget_per_hour=budget, min_throughput=minthr, spot=spot, max_interruption=maxint)
    except solver.InfeasibleError:
        return
    for rec in r.recommendations + r.pareto:
        assert rec.usd_per_hour <= budget + 1e-9
        if minthr:
            assert rec.throughput_samples_per_s >= minthr - 1e-9
        if not spot:
            assert "@spot" not in rec.config
        if maxint is not None:
            assert rec.interruptions_per_hour <= maxint + 1e-12
        assert parse_config(rec.config).nodes <= 5
    assert r.recommendations[0].chosen


@SETTINGS
@given(budget=st.floats(0.15, 2.0))
def test_no_pareto_point_dominates_another(budget):
    r = all_feasible(budget_per_hour=budget)
    for a in r.pareto:
        for b in r.pareto:
            if a is b:
                continue
            dominates = (a.throughput_samples_per_s >= b.throughput_samples_per_s and a.usd_per_hour <= b.usd_per_hour
                         and (a.throughput_samples_per_s > b.throughput_samples_per_s or a.usd_per_hour < b.usd_per_hour))
            assert not dominates, (a.config, b.config)
    # and the front really is the best: no feasible configuration beats a front point
    for rec in r.recommendations:
        assert any(p.throughput_samples_per_s >= rec.throughput_samples_per_s - 1e-9 and
                   p.usd_per_hour <= rec.usd_per_hour + 1e-9 for p in r.pareto)


@SETTINGS
@given(b1=st.floats(0.15, 3.0), extra=st.floats(0.0, 2.0))
def test_raising_the_budget_never_lowers_the_best_throughput(b1, extra):
    r1 = run(budget_per_hour=b1)
    r2 = run(budget_per_hour=b1 + extra)
    assert r2.chosen.throughput_samples_per_s >= r1.chosen.throughput_samples_per_s - 1e-9


def test_spot_never_costed_above_on_demand_for_the_same_type():
    cat, _ = emulated()
    offers, _ = solver.build_offers(cat, solver.Constraints())
    od = {t: p for t, m, p in zip(offers.instance_type, offers.market, offers.price) if m.value == "on-demand"}
    spots = [(t, p) for t, m, p in zip(offers.instance_type, offers.market, offers.price) if m.value == "spot"]
    assert spots
    for t, p in spots:
        assert p <= od[t]
    # and in results: the same homogeneous config on spot never costs more per hour
    r = all_feasible(budget_per_hour=5.0)
    by = {x.config: x for x in r.recommendations}
    for cfg, x in by.items():
        if cfg.endswith("@spot") and "+" not in cfg and cfg[:-5] in by:
            assert x.usd_per_hour <= by[cfg[:-5]].usd_per_hour


def test_homogeneous_only_when_mixing_is_disabled():
    r = all_feasible(budget_per_hour=3.0, heterogeneous=False)
    assert r.recommendations and all(len(parse_config(x.config).instance_types) == 1 for x in r.recommendations)
    r2 = all_feasible(budget_per_hour=3.0)
    assert any(x.mixed for x in r2.recommendations)


def test_a_mix_is_never_faster_than_the_sum_of_its_parts():
    cat, oracle = emulated()
    r = all_feasible(budget_per_hour=5.0, spot=False)
    homo = {x.config: x.raw_throughput_samples_per_s for x in r.recommendations if not x.mixed}
    checked = 0
    for x in r.recommendations:
        if not x.mixed:
            continue
        parts = x.config.split("+")
        if all(p in homo for p in parts):
            assert x.raw_throughput_samples_per_s <= sum(homo[p] for p in parts) + 1e-6
            checked += 1
    assert checked > 10


def test_mix_splits_the_batch_by_speed_and_keeps_the_global_batch():
    r = all_feasible(budget_per_hour=5.0, global_batch_size=96)
    mixes = [x for x in r.recommendations if x.mixed]
    assert mixes
    for x in mixes[:50]:
        cfg = parse_config(x.config)
        workers = {g.instance_type: g.count for g in cfg.groups}  # one worker per emulated host
        assert sum(workers[t] * b for t, b in x.batch_split.items()) == pytest.approx(96)
    assert all(x.global_batch == pytest.approx(96) for x in r.recommendations)


def test_spot_goodput_discounts_interruptions():
    r = all_feasible(budget_per_hour=5.0, checkpoint_interval_h=1.0, restart_overhead_h=0.2)
    for x in r.recommendations:
        factor = max(0.0, 1 - x.interruptions_per_hour * (0.2 + 0.5))
        assert x.throughput_samples_per_s == pytest.approx(x.raw_throughput_samples_per_s * factor)


def test_default_objective_and_job_size_figures():
    r = run(min_throughput=50, samples=1e6)
    assert r.objective is solver.Objective.COST
    c = r.chosen
    assert c.hours_to_finish == pytest.approx(1e6 / c.throughput_samples_per_s / 3600)
    assert c.usd_to_finish == pytest.approx(c.hours_to_finish * c.usd_per_hour)
    assert run(budget_per_hour=1.0).objective is solver.Objective.THROUGHPUT


def test_infeasible_names_the_constraint_and_the_relaxation():
    r = all_feasible(min_throughput=100, spot=True)
    cheapest = min(x.usd_per_hour for x in r.recommendations)
    with pytest.raises(solver.InfeasibleError) as e:
        all_feasible(min_throughput=100, budget_per_hour=cheapest * 0.5)
    msg = str(e.value)
    assert "--budget" in msg and f"${cheapest:.2f}/h" in msg


def test_cli_json_on_the_emulated_catalog():
    p = run_srifty("recommend", "--profile", EMU_PROFILES, "--catalog", "configs/emulated.yaml", "--model", "simulator",
                   "--budget", "1", "--max-nodes", "4", "--json", "--samples", "1e6", timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["schema"] == 1 and doc["candidates_evaluated"] > 0 and doc["recommendations"]
    rec = doc["recommendations"][0]
    for k in ("config", "market", "gpus", "batch_split", "iteration_ms", "interval_ms", "throughput_samples_per_s",
              "usd_per_hour", "usd_per_million_samples", "hours_to_finish", "usd_to_finish", "source"):
        assert k in rec
    assert rec["source"] in solver.SOURCES and rec["chosen"]


def test_cli_local_profile_on_ec2_is_transferred_and_infeasible_is_one_paragraph(tmp_path):
    p = run_srifty("recommend", "--profile", "profiles/local/cnn_resnet.json", "--model", "simulator",
                   "--instance-types", "g5.*,g4dn.*", "--max-nodes", "4", "--budget", "12", "--csv", timeout=120)
    assert p.returncode == 0, p.stderr
    assert "transferred" in p.stdout.splitlines()[1]
    bad = run_srifty("recommend", "--profile", "profiles/local/cnn_resnet.json", "--model", "simulator",
                     "--instance-types", "g4dn.*", "--max-nodes", "2", "--budget", "0.1", "--min-throughput", "1e9",
                     timeout=120)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr and "--" in bad.stderr


def test_cli_plot(tmp_path):
    out = tmp_path / "front.png"
    p = run_srifty("recommend", "--profile", EMU_PROFILES, "--catalog", "configs/emulated.yaml", "--model", "simulator",
                   "--budget", "1", "--max-nodes", "3", "--pareto", "--plot", str(out), timeout=120)
    assert p.returncode == 0, p.stderr
    assert out.read_bytes()[:4] == b"\x89PNG" and "★" in p.stdout

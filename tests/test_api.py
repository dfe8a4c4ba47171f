"""srifty as a library (srifty.api): the commands' figures, as result objects."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from srifty import api
from srifty.features import load_corpus

from conftest import PROFILES, run_srifty

CNN = str(PROFILES / "local" / "cnn_resnet.json")


def test_recommend_returns_what_the_command_prints(tmp_path) -> None:
    outcome = api.recommend([CNN], api.Constraints(budget_per_hour=12), top=3)
    cli = json.loads(run_srifty("recommend", "--profile", CNN, "--budget", "12", "--top", "3", "--json").stdout)
    assert [r.config for r in outcome.result.recommendations] == [r["config"] for r in cli["recommendations"]]
    assert outcome.result.chosen.throughput_samples_per_s == \
        pytest.approx(cli["recommendations"][0]["throughput_samples_per_s"], rel=1e-6)
    assert outcome.advice is not None and outcome.advice.to_dict() == cli["measure_next"]
    # each ranked row says what predict warns of it and the notes do not say already; the chosen
    # one's are printed under it
    for row, doc in zip(outcome.result.recommendations, cli["recommendations"]):
        [batch] = set(row.batch_split.values())
        [p] = api.predict([CNN], [(row.config, int(batch))])
        assert row.warnings == doc["warnings"] == [w for w in p.warnings if w not in outcome.result.notes] != []
    chosen = outcome.result.chosen
    assert [p.warnings for p in outcome.result.pareto if p.chosen] == [chosen.warnings]  # the front's too
    said = run_srifty("recommend", "--profile", CNN, "--budget", "12", "--top", "3").stderr
    assert all(f"warning: {chosen.config}: {w}" in said for w in chosen.warnings)
    plan, files = api.write_plan(outcome, tmp_path / "plan", rank=2)
    assert plan.config == cli["recommendations"][1]["config"] and (tmp_path / "plan" / "plan.json") in files
    # a plan says what predict warns of its row
    readme = (tmp_path / "plan" / "README.md").read_text()
    assert all(f"Warning: {w}" in readme for w in outcome.result.recommendations[1].warnings)


def test_predict_returns_what_the_command_prints() -> None:
    [p] = api.predict([CNN], [("2xg5.12xlarge", 16)])
    cli = json.loads(run_srifty("predict", "--profile", CNN, "--config", "2xg5.12xlarge", "-b", "16", "--json").stdout)
    assert (p.config, p.local_batch_size, p.source) == (cli["config"], cli["local_batch_size"], cli["source"])
    assert round(p.iteration_ms, 4) == cli["iteration_ms"] and p.parts["network_source"] == cli["parts"]["network_source"]
    assert api.predict([CNN], []) == []  # nothing asked, nothing predicted


def test_predict_and_recommend_take_one_default_batch_and_say_which() -> None:
    """profiles/h200/cnn_resnet holds one run at each of 32, 128 and 512: without a batch, predict
    and recommend both take the smallest of those tied and say so; given one, neither says it."""
    from srifty.features import default_batch

    assert default_batch([32, 128, 512]) == 32 and default_batch([16] * 17 + [32] * 5) == 16
    assert default_batch([64, 8, 64, 8, 256]) == 8 and default_batch([]) is None
    h200 = str(PROFILES / "h200" / "cnn_resnet")
    said: list[str] = []
    [p] = api.predict([h200], ["1xp5en.48xlarge:1"], say=said.append)
    assert p.local_batch_size == 32
    assert [s for s in said if "per-worker batch 32" in s and "32, 128, 512" in s and "(-b)" in s]
    outcome = api.recommend([h200], api.Constraints(budget_per_hour=200, heterogeneous=False), top=3)
    assert {b for r in outcome.result.recommendations for b in r.batch_split.values()} == {32}
    assert sum("per-worker batch 32" in n and "--batch-size" in n for n in outcome.result.notes) == 1
    said.clear()
    api.predict([h200], ["1xp5en.48xlarge:1"], local_batch_size=128, say=said.append)
    outcome = api.recommend([h200], api.Constraints(budget_per_hour=200, heterogeneous=False, local_batch_size=128),
                            top=3)
    assert not [n for n in said + outcome.result.notes if "per-worker batch" in n]
    said.clear()
    api.predict([CNN], ["1xp5en.48xlarge:1"], say=said.append)  # one batch profiled: nothing to say
    assert not [n for n in said if "per-worker batch" in n]


def test_library_errors_name_the_configuration() -> None:
    from srifty.errors import SriftyError

    with pytest.raises(SriftyError, match=r"g5\.nope.*\(row 2\)"):
        api.predict([CNN], ["1xg5.xlarge", "1xg5.nope"], where=["", " (row 2)"])


def test_validate_returns_every_check_of_the_report(quick_validation) -> None:
    """api.validate on the shipped corpora, quick: the splits the report holds for the real Pollux
    corpus, and the checks that do not depend on the corpus (compute across GPUs, the operator
    model) each as result objects."""
    done, lines = quick_validation
    assert {r.split for r in done.report.results if r.split.startswith("pollux/")} == \
        {"pollux/lomo-1gpu", "pollux/nodes>4"}
    assert any(line.startswith("pollux/lomo-1gpu: holding out") for line in lines)
    assert done.allreduce and done.gpu_transfer and done.batch_scaling
    # the examples' H200 profiles, and the corpus's one-GPU runs of the models profiles/cpu has
    by_gpu = Counter(c.pair.gpu for c in done.cpu_to_gpu.by_model)
    singles = sum(r.world_size == 1 for j in load_corpus([str(PROFILES / "pollux")]) for r in j.runs
                  if (PROFILES / "cpu" / j.model).is_dir())
    assert by_gpu == {"H200": 9, "T4": singles} and singles > 0
    # and each GPU held out: the same steps, predicted by a fit that never saw that GPU
    held_by_gpu, held_by_model = ([(c.pair.model, c.pair.gpu, c.pair.batch) for c in checks]
                                  for checks in (done.cpu_to_gpu.by_gpu, done.cpu_to_gpu.by_model))
    assert sorted(held_by_gpu) == sorted(held_by_model)


def test_import_and_fit_as_the_commands_do(tmp_path) -> None:
    """api.import_trace writes the profiles `srifty import` writes; api.fit trains on them and
    saves a model that loads back to the same predictions."""
    from srifty import model as m

    trace = PROFILES.parent / "data" / "traces" / "lambda_ec2.import.csv"
    result = api.import_trace(str(trace), str(tmp_path / "lib"))
    cli = run_srifty("import", str(trace), "--out", str(tmp_path / "cli"))
    assert cli.returncode == 0
    assert sorted(Path(p).relative_to(tmp_path / "lib") for p in result.written) == \
        sorted(p.relative_to(tmp_path / "cli") for p in (tmp_path / "cli").rglob("*.json"))
    predictor = api.fit([str(tmp_path / "lib")], tmp_path / "model.npz", quick=True)
    assert predictor.meta["rows"] > 0 and m.read_card(tmp_path / "model.npz")["rows"] == predictor.meta["rows"]
    loaded = m.load(tmp_path / "model.npz")
    assert loaded.latency.parts_.keys() == predictor.latency.parts_.keys() and loaded.meta["rows"] == predictor.meta["rows"]
    with pytest.raises(Exception, match="--out"):  # an output inside the corpus is refused
        api.fit([str(tmp_path / "lib")], tmp_path / "lib" / "model.npz", quick=True)

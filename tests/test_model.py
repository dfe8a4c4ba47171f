"""Simulator arithmetic, the learned model against baselines on a held-out model, predict CLI, skops."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from srifty import simulate
from srifty.simulate import Link

from conftest import ROOT, run_srifty

POLLUX = ROOT / "profiles/pollux"


def test_ring_allreduce_hand_arithmetic() -> None:
    link = Link(gbytes_per_s=1.0, latency_us=100.0)
    # 4 workers, 100 MB: 2*(3/4)*0.1 s = 150 ms of transfer + 2*3 steps * 0.1 ms
    assert simulate.ring_allreduce_ms(100e6, 4, link) == pytest.approx(150.0 + 0.6)
    assert simulate.ring_allreduce_ms(100e6, 1, link) == 0.0
    intra, inter = Link(10.0, 10.0), Link(1.0, 100.0)
    # two nodes x 2: flat ring over the slowest link vs hierarchical; the best is kept
    flat = 2 * 3 / 4 * 100.0 + 2 * 3 * 0.1
    hier = 2 * (1 / 2 * 10.0 + 0.01) + 2 * 1 / 2 * 100.0 + 2 * 0.1
    assert simulate.allreduce_ms(100e6, [2, 2], intra, inter) == pytest.approx(min(flat, hier))
    assert simulate.allreduce_ms(100e6, [4], intra, inter) == pytest.approx(2 * 3 / 4 * 10.0 + 6 * 0.01)


def test_overlap_simulation() -> None:
    link = Link(1.0, 0.0)
    # 2 buckets of 10 MB over 2 workers on 1 GB/s: 10 ms each. compute 100 ms, backward 60 ms.
    r = simulate.simulate_iteration(100.0, [10e6, 10e6], [1, 1], link, link, backward_fraction=0.6)
    # bucket 1 ready at 40+30=70 -> ends 80; bucket 2 ready at 100 -> ends 110
    assert r.iteration_ms == pytest.approx(110.0) and r.allreduce_ms == pytest.approx(20.0)
    assert r.exposed_comm_ms == pytest.approx(10.0)
    assert simulate.simulate_iteration(100.0, [10e6], [1], link, link).iteration_ms == 100.0
    assert sum(simulate.bucket_layout(60 * 2**20)) == pytest.approx(60 * 2**20)


def test_model_beats_baselines_on_held_out_model() -> None:
    from srifty.catalog import Catalog
    from srifty.features import load_corpus
    from srifty.validate import METHODS, run_fold

    jobs = load_corpus([POLLUX])
    held = next(j for j in jobs if j.model == "imagenet")
    train = [j for j in jobs if j is not held]
    view = held.restricted(lambda r: r.world_size == 1)
    res = run_fold("lomo-1gpu", held.model, train, [held], {held.model: view}, lambda j, r: r.nodes >= 2,
                   None, Catalog.default(), quick=True)
    assert res is not None and res.n > 100
    st = res.stats()
    for m in METHODS[1:]:
        assert st["model"]["mape"] < st[m]["mape"], (m, st)
    # and it never tested on a row it could see: the view has no multi-worker run
    assert all(r.world_size == 1 for r in view.runs)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("m") / "m.skops"
    res = run_srifty("fit", str(POLLUX), "--quick", "--out", str(out))
    assert res.returncode == 0, res.stderr
    return out


def test_predict_json_shape(model_file: Path) -> None:
    res = run_srifty("predict", "--profile", str(POLLUX / "imagenet"), "--config", "4xg4dn.12xlarge",
                     "--local-batch-size", "64", "--model", str(model_file), "--json")
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout.strip().splitlines()[-1])
    assert set(d) == {"config", "local_batch_size", "iteration_ms", "interval_ms", "throughput_samples_per_s", "source"}
    assert d["source"] == "predicted" and d["interval_ms"][0] <= d["iteration_ms"] <= d["interval_ms"][1]
    assert d["throughput_samples_per_s"] == pytest.approx(16 * 64 / (d["iteration_ms"] / 1e3), rel=1e-3)
    # an exact measured config is reported as measured; another type as transferred
    res = run_srifty("predict", "--profile", str(POLLUX / "imagenet"), "--config", "1xg4dn.12xlarge:1",
                     "-b", "81", "--model", str(model_file), "--json")
    assert json.loads(res.stdout.splitlines()[-1])["source"] == "measured"
    res = run_srifty("predict", "--profile", str(POLLUX / "imagenet"), "--config", "2xp3.8xlarge",
                     "-b", "64", "--model", str(model_file), "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1])["source"] == "transferred"


def test_far_outside_training_range_warns(model_file: Path) -> None:
    res = run_srifty("predict", "--profile", str(POLLUX / "cifar10"), "--config", "64xg4dn.12xlarge",
                     "--model", str(model_file), "--json")
    assert res.returncode == 0 and "outside the training data" in res.stderr
    d = json.loads(res.stdout.splitlines()[-1])
    assert d["interval_ms"][1] / d["interval_ms"][0] > 1.2


def test_unknown_type_did_you_mean(model_file: Path) -> None:
    res = run_srifty("predict", "--profile", str(POLLUX / "ncf"), "--config", "2xg4dn.12xlarg", "--model", str(model_file))
    assert res.returncode != 0 and "Did you mean 'g4dn.12xlarge'" in res.stderr


def test_skops_load_refuses_untrusted_types(model_file: Path, tmp_path: Path) -> None:
    import skops.io as sio

    from srifty import model as m

    pred = m.load(model_file)
    assert pred.meta["data_sha256"] and "scikit-learn" in pred.meta["libraries"]
    assert pred.latency.n_features_in_ == len(pred.latency.feature_names_in_)
    evil = tmp_path / "evil.skops"
    sio.dump({"format": "srifty-latency-model", "x": Path("/etc/passwd")}, str(evil))
    with pytest.raises(m.ModelError, match="does not trust"):
        m.load(evil)
    assert b"pickle" not in Path(model_file).read_bytes()[:4]


def test_estimator_contract() -> None:
    from srifty.model import LatencyModel, ModelError

    lm = LatencyModel(max_iter=5)
    assert lm.max_iter == 5 and not hasattr(lm, "model_")
    import pandas as pd

    with pytest.raises(ModelError, match="not fitted"):
        from srifty.features import FEATURES

        lm.predict(pd.DataFrame(np.ones((2, len(FEATURES) + 1)), columns=FEATURES + ["sim_ms"]))

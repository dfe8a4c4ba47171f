"""The model's version is MODEL_REVISION, held to fixed predictions (scripts/golden_predictions.py).

A change that moves any golden prediction must raise MODEL_REVISION (which makes every saved
and cached model of the old revision stale) and re-record with `make model`; a change that
moves none (a comment, a rename, a refactor) needs neither a re-fit nor a commit of the model."""

from __future__ import annotations

import importlib.util
import json

import pytest

from srifty import model as m

from conftest import ROOT

spec = importlib.util.spec_from_file_location("golden_predictions", ROOT / "scripts" / "golden_predictions.py")
golden = importlib.util.module_from_spec(spec)
spec.loader.exec_module(golden)


def test_the_shipped_model_and_the_golden_predictions_are_of_this_revision() -> None:
    recorded = json.loads(golden.GOLDEN.read_text())
    assert recorded["revision"] == m.MODEL_REVISION, "golden predictions of another revision: run `make model`"
    assert recorded["data_sha256"] == m.read_card(m.SHIPPED_MODEL)["data_sha256"], \
        "golden predictions of another corpus: run `make model`"
    assert m.read_card(m.SHIPPED_MODEL)["revision"] == m.MODEL_REVISION, "shipped model of another revision: " \
                                                                           "run `make model`"
    assert len(recorded["predictions"]) == len(golden.SETUPS)


def test_predictions_have_not_moved_under_this_revision() -> None:
    recorded = json.loads(golden.GOLDEN.read_text())["predictions"]
    changes = golden.moved(recorded, golden.predictions())
    assert not changes, ("predictions moved without a new MODEL_REVISION (raise it in srifty/model/persistence.py, then "
                         "`make model`):\n" + "\n".join(changes))
    assert {p["source"] for p in recorded} == {"measured", "predicted", "transferred"}  # every path is held


def test_a_moved_prediction_is_caught_and_cannot_be_recorded_under_the_same_revision(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = json.loads(golden.GOLDEN.read_text())
    nudged = [dict(p) for p in recorded["predictions"]]
    nudged[0]["iteration_ms"] *= 1 + 1e-4
    assert len(golden.moved(nudged, recorded["predictions"])) == 1
    assert golden.moved(recorded["predictions"], recorded["predictions"]) == []
    fake = tmp_path / "golden.json"
    same = {"revision": m.MODEL_REVISION, "data_sha256": recorded["data_sha256"], "predictions": nudged}
    fake.write_text(json.dumps(same))
    monkeypatch.setattr(golden, "GOLDEN", fake)
    assert golden.main(["--write"]) == 1  # moved under the same revision and corpus: refused
    assert json.loads(fake.read_text())["predictions"] == nudged
    fake.write_text(json.dumps({**same, "data_sha256": "another corpus"}))
    assert golden.main(["--write"]) == 0  # a new corpus moves predictions by itself: recorded
    assert json.loads(fake.read_text())["data_sha256"] == recorded["data_sha256"]
    fake.write_text(json.dumps(same))
    monkeypatch.setattr(m, "MODEL_REVISION", m.MODEL_REVISION + 1)
    assert golden.main(["--write"]) == 0  # a new revision: recorded
    assert json.loads(fake.read_text())["revision"] == m.MODEL_REVISION


def test_a_card_of_another_revision_is_stale() -> None:
    current = m.read_card(m.SHIPPED_MODEL)
    assert m.card_is_current(current)
    assert not m.card_is_current({**current, "revision": m.MODEL_REVISION - 1})
    assert not m.card_is_current({k: v for k, v in current.items() if k != "revision"})

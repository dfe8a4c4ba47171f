"""Profile files: the schema, validation messages that name the field, atomic writes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from srifty import profile as profile_mod
from srifty import report, stats
from srifty.errors import ProfileFormatError

from conftest import PROFILES, run_srifty

SHIPPED = sorted((PROFILES / "local").glob("*.json"))


def test_profiles_are_shipped() -> None:
    kinds = {json.loads(p.read_text())["kind"] for p in SHIPPED}
    assert kinds == {"training", "collectives"}
    models = {json.loads(p.read_text()).get("job", {}).get("model") for p in SHIPPED}
    assert {"cnn_resnet", "transformer_lm", "mlp_recsys"} <= models


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_profiles_replay(path: Path) -> None:
    """CI smoke: each recorded profile loads, validates and summarises consistently."""
    p = profile_mod.load(path)
    summary = report.profile_summary(p)
    if p.kind == "collectives":
        assert summary["collectives"] and all(c["median_ms"] > 0 for c in summary["collectives"])
        return
    assert p.status == "complete"
    doc = p.doc
    # the summary is what the raw records say: recompute each median from the iterations
    warm = doc["measurement"]["warmup_iterations"]
    merged = profile_mod.merge_iterations(doc["ranks"])[warm:]
    for key in ("iteration_ms", *profile_mod.COMPONENTS):
        column = "wall_ms" if key == "iteration_ms" else key
        assert doc["summary"][key]["median"] == pytest.approx(stats.median([m[column] for m in merged]))
    assert summary["throughput_samples_per_s"] == pytest.approx(
        p.world_size * p.local_batch_size / (summary["iteration_ms"] / 1e3)
    )
    # every rank's iteration splits into forward, backward, optimizer and what the hooks do not see
    for rank in doc["ranks"]:
        for it in rank["iterations"]:
            parts = it["forward_ms"] + it["backward_ms"] + it["optimizer_ms"] + it["other_ms"]
            assert parts == pytest.approx(it["wall_ms"], rel=1e-6) or it["other_ms"] == 0
            assert it["backward_compute_ms"] + it["exposed_comm_ms"] == pytest.approx(it["backward_ms"], rel=1e-6)


def _training_doc() -> dict:
    return json.loads(next(p for p in SHIPPED if json.loads(p.read_text())["kind"] == "training").read_text())


def test_round_trip_is_atomic_and_lossless(tmp_path: Path) -> None:
    doc = _training_doc()
    out = tmp_path / "sub" / "p.json"
    profile_mod.save(doc, out)
    assert profile_mod.load(out).doc == doc
    assert [f.name for f in out.parent.iterdir()] == ["p.json"]  # no temporary left behind


def test_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    out.write_text("old contents")

    class Boom:
        def __str__(self) -> str:
            raise RuntimeError("disk on fire")

    with pytest.raises(TypeError):
        profile_mod.atomic_write_text(out, Boom())  # type: ignore[arg-type]
    assert out.read_text() == "old contents"
    assert [f.name for f in tmp_path.iterdir()] == ["p.json"]


def test_malformed_json_says_where(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1,\n "kind": ')
    with pytest.raises(ProfileFormatError, match=r"not valid JSON \(line 2"):
        profile_mod.load(bad)


def test_wrong_version_is_named(tmp_path: Path) -> None:
    doc = _training_doc()
    doc["schema_version"] = 3
    (tmp_path / "v3.json").write_text(json.dumps(doc))
    with pytest.raises(ProfileFormatError, match="`schema_version` is 3"):
        profile_mod.load(tmp_path / "v3.json")


def test_version_1_still_reads_and_version_2_checks_the_operator_count(tmp_path: Path) -> None:
    v1 = json.loads((PROFILES / "h200" / "cnn_resnet" / "b32.json").read_text())
    assert v1["schema_version"] == 1 and "operators" not in v1["job"]
    profile_mod.validate(v1)
    v2 = json.loads((PROFILES / "cpu" / "cnn_resnet" / "b32.json").read_text())
    assert v2["schema_version"] == 2 and v2["job"]["operators"]["phases"]["forward"]["kernels"] > 0
    profile_mod.validate(v2)
    v2["job"]["operators"]["phases"]["backward"]["flops"] = -1
    with pytest.raises(ProfileFormatError, match=r"`job.operators.phases.backward.flops`"):
        profile_mod.validate(v2)
    del v2["job"]["operators"]["phases"]["optimizer"]
    v2["job"]["operators"]["phases"]["backward"]["flops"] = 1
    with pytest.raises(ProfileFormatError, match=r"`job.operators.phases`"):
        profile_mod.validate(v2)


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d["summary"]["iteration_ms"].__setitem__("median", "fast"), "summary.iteration_ms.median"),
        (lambda d: d["cluster"].__setitem__("world_size", 0), "cluster.world_size"),
        (lambda d: d["job"].pop("model"), "job"),
        (lambda d: d["ranks"][0]["iterations"][1].__setitem__("wall_ms", -3), "ranks[0].iterations[1].wall_ms"),
        (lambda d: d.__setitem__("status", "done"), "status"),
        (lambda d: d["job"].__setitem__("memory", {"batch_size": 8, "start_bytes": 0, "peak_bytes": 1e16}),
         "job.memory.peak_bytes"),
        (lambda d: d["job"].__setitem__("memory", {"batch_size": 8, "start_bytes": -1, "peak_bytes": 8}),
         "job.memory.start_bytes"),
    ],
)
def test_wrong_field_is_named(tmp_path: Path, mutate, field: str) -> None:
    doc = _training_doc()
    mutate(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ProfileFormatError) as err:
        profile_mod.load(path)
    assert f"`{field}`" in str(err.value)


def test_a_file_read_before_is_checked_again_once_its_bytes_change(tmp_path: Path) -> None:
    """Validation is skipped only for bytes already found valid: a profile broken after a good read
    (hand-edited, re-recorded badly) is refused on the next read, however often it was read."""
    path = tmp_path / "p.json"
    doc = _training_doc()
    profile_mod.save(doc, path)
    assert profile_mod.load(path).doc == profile_mod.load(path).doc == doc
    doc["cluster"]["world_size"] = 0
    path.write_text(json.dumps(doc))
    for _ in range(2):
        with pytest.raises(ProfileFormatError, match="cluster.world_size"):
            profile_mod.load(path)


@given(st.floats(min_value=0.001, max_value=1e6), st.integers(min_value=1, max_value=4096))
@settings(max_examples=25, deadline=None)
def test_save_load_round_trip_property(tmp_path_factory, median: float, batch: int) -> None:
    doc = copy.deepcopy(_training_doc())
    doc["summary"]["iteration_ms"]["median"] = median
    doc["job"]["local_batch_size"] = batch
    out = tmp_path_factory.mktemp("rt") / "p.json"
    profile_mod.save(doc, out)
    back = profile_mod.load(out)
    assert back.iteration.median == median and back.local_batch_size == batch


def test_load_many_expands_directories() -> None:
    loaded = profile_mod.load_many([PROFILES / "local"])
    assert len(loaded) == len(SHIPPED)
    with pytest.raises(ProfileFormatError, match="no such profile"):
        profile_mod.load_many([PROFILES / "local" / "missing.json"])


def test_a_directory_s_other_json_is_skipped_and_a_named_one_refused(tmp_path: Path) -> None:
    """A directory's JSON files that are no profile (no ``schema_version``: the emulated cluster's
    calibration record beside its corpus) are skipped by every reader, the commands' and the
    corpus's alike; named on its own, such a file is refused as no profile, and a directory with
    nothing else holds no profile. A broken profile in a directory still fails."""
    shipped = PROFILES / "emulated"
    assert "schema_version" not in json.loads((shipped / "calibration.json").read_text())
    loaded = profile_mod.load_many([shipped])
    assert loaded and len(loaded) == len([q for q in shipped.rglob("*.json") if q.name != "calibration.json"])
    shown = run_srifty("show", str(shipped), "--json")
    assert shown.returncode == 0, shown.stderr
    assert len(json.loads(shown.stdout)["profiles"]) == len(loaded)
    with pytest.raises(ProfileFormatError, match=r"calibration\.json: not a srifty profile \(it has no `schema_version`"):
        profile_mod.load(shipped / "calibration.json")
    (tmp_path / "notes.json").write_text(json.dumps({"run": "mine"}))
    with pytest.raises(ProfileFormatError, match="directory holds no profile"):
        profile_mod.load_many([tmp_path])
    profile_mod.save(_training_doc(), tmp_path / "p.json")
    assert [q.path for q in profile_mod.load_many([tmp_path])] == [str(tmp_path / "p.json")]
    (tmp_path / "broken.json").write_text(json.dumps({"schema_version": 2}))
    with pytest.raises(ProfileFormatError, match=r"broken\.json: field"):
        profile_mod.load_many([tmp_path])

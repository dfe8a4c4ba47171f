"""Bad input as a careless user or an attacker gives it: a one-paragraph error and a non-zero exit,
never a traceback, a hang, silent acceptance, or a lost input (issue: hardening)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import signal
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from srifty.commands import params
from srifty import profile as profile_mod
from srifty.cli import main

from conftest import EXAMPLES, PROFILES

CNN = PROFILES / "local" / "cnn_resnet.json"
CATALOG = Path(__file__).resolve().parents[1] / "srifty" / "data" / "ec2_catalog.csv"


@contextlib.contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    """Fail instead of hanging (SIGALRM: main thread, Linux)."""

    def timeout(signum: int, frame: Any) -> None:
        raise AssertionError(f"srifty did not answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def srifty(*args: str, seconds: int = 120) -> tuple[int, str, str]:
    """Run the CLI in this process, as `srifty ARGS` would: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with _deadline(seconds), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def assert_clear_error(code: int, err: str, *needles: str) -> None:
    """A refusal as srifty gives them: non-zero, `Error:` with a reason, no traceback, no bug report."""
    assert code != 0, err
    assert "Error:" in err and "Traceback" not in err, err
    assert "failed unexpectedly" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)


def _profile_doc() -> dict[str, Any]:
    return json.loads(CNN.read_text())


def _write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc))
    return path


# --------------------------------------------------------------------------- one paragraph


def test_an_error_s_hint_reads_as_the_next_sentence() -> None:
    """A message that ends with what it quotes (an OS error, a path) gets its full stop before the
    hint; one that ends as a sentence, or has no hint, is shown as written."""
    from srifty.errors import SriftyError

    assert str(SriftyError("Cannot read x.yaml: [Errno 2] No such file or directory: 'x.yaml'", "Check the path.")) \
        == "Cannot read x.yaml: [Errno 2] No such file or directory: 'x.yaml'. Check the path."
    assert str(SriftyError("Nothing was written.", "Give --out.")) == "Nothing was written. Give --out."
    assert str(SriftyError("Did you mean 'g5.xlarge'?", "See `srifty catalog list`.")).count("?.") == 0
    assert str(SriftyError("a refusal without a hint: 'x'")) == "a refusal without a hint: 'x'"


# --------------------------------------------------------------------------- outputs never clobber inputs


def test_profile_refuses_to_write_over_its_script(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    shutil.copy(EXAMPLES / "cnn_resnet.py", script)
    before = script.read_bytes()
    code, _, err = srifty("profile", script, "--out", script)
    assert_clear_error(code, err, "same file as the script", "Nothing was written")
    assert script.read_bytes() == before


def test_fit_and_validate_refuse_to_write_into_their_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(PROFILES / "lambda", corpus)
    target = next(corpus.rglob("*.json"))
    before = {p: p.read_bytes() for p in corpus.rglob("*")  if p.is_file()}
    for args in (["fit", corpus, "--out", target], ["fit", corpus, "--out", corpus / "model.skops"],
                 ["validate", corpus, "--out", target], ["validate", corpus, "--out", tmp_path / "r.md",
                                                         "--plot", corpus / "x.png"]):
        code, _, err = srifty(*args)
        assert_clear_error(code, err, "the corpus")
    assert {p: p.read_bytes() for p in corpus.rglob("*") if p.is_file()} == before


def test_validate_refuses_the_same_file_for_two_outputs(tmp_path: Path) -> None:
    code, _, err = srifty("validate", PROFILES / "lambda", "--out", tmp_path / "a.png", "--plot", tmp_path / "a.png")
    assert_clear_error(code, err, "name the same file")


def test_outputs_that_cannot_be_written_are_refused_before_the_work(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = srifty("fit", PROFILES / "lambda", "--out", blocker / "model.skops")
    assert_clear_error(code, err, "is a file, not a directory")
    code, _, err = srifty("fit", PROFILES / "lambda", "--out", tmp_path)
    assert_clear_error(code, err, "is a directory")


def test_recommend_plot_needs_an_image_name_and_is_checked_first(tmp_path: Path) -> None:
    code, _, err = srifty("recommend", "--profile", CNN, "--plot", tmp_path / "x.txt")
    assert_clear_error(code, err, "--plot", ".png")
    folder = tmp_path / "cnn"
    folder.mkdir()
    shutil.copy(CNN, folder / "p.json")
    code, _, err = srifty("recommend", "--profile", folder, "--plot", folder / "front.png")
    assert_clear_error(code, err, "lies inside --profile")
    assert not (folder / "front.png").exists()


TRACE_HEADER = "model,instance_type,placement,local_batch_size,step_time_s,param_count\n"


def _trace(path: Path, *rows: str) -> Path:
    path.write_text(TRACE_HEADER + "".join(r + "\n" for r in rows))
    return path


def test_import_adds_runs_to_an_imported_profile_and_is_idempotent(tmp_path: Path) -> None:
    a = _trace(tmp_path / "a.csv", "m,g4dn.12xlarge,1,32,0.10,1000000", "m,g4dn.12xlarge,2,32,0.12,1000000",
               "m,g4dn.12xlarge,4,32,0.15,1000000")
    b = _trace(tmp_path / "b.csv", "m,g4dn.12xlarge,4+4,32,0.30,1000000")
    out = tmp_path / "profiles"
    assert srifty("import", a, "--out", out)[0] == 0
    target = out / "m" / "g4dn.12xlarge.json"
    assert len(profile_mod.load(target).doc["runs"]) == 3
    code, _, err = srifty("import", b, "--out", out)
    assert code == 0 and "were added" in err
    doc = profile_mod.load(target).doc
    assert len(doc["runs"]) == 4
    assert [e["source"] for e in doc["import"]["earlier"]] == ["a.csv"] and doc["import"]["source"] == "b.csv"
    assert srifty("import", b, "--out", out)[0] == 0  # the same runs again: kept once
    assert len(profile_mod.load(target).doc["runs"]) == 4
    assert srifty("import", b, "--out", out, "--replace")[0] == 0
    assert len(profile_mod.load(target).doc["runs"]) == 1


def test_import_never_replaces_a_recorded_profile_without_replace(tmp_path: Path) -> None:
    out = tmp_path / "profiles"
    target = out / "cnn_resnet" / "local.json"
    target.parent.mkdir(parents=True)
    shutil.copy(CNN, target)
    before = target.read_bytes()
    trace = _trace(tmp_path / "t.csv", "cnn_resnet,local,1,32,0.10,1000000")
    code, _, err = srifty("import", trace, "--out", out)
    assert_clear_error(code, err, "`srifty profile` recorded", "--replace")
    assert target.read_bytes() == before


def test_import_disagreeing_with_an_earlier_import_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "profiles"
    assert srifty("import", _trace(tmp_path / "a.csv", "m,g4dn.12xlarge,1,32,0.10,1000"), "--out", out)[0] == 0
    target = out / "m" / "g4dn.12xlarge.json"
    before = target.read_bytes()
    code, _, err = srifty("import", _trace(tmp_path / "b.csv", "m,g4dn.12xlarge,2,32,0.1,2000"), "--out", out)
    assert_clear_error(code, err, "disagree on param_count")
    assert target.read_bytes() == before


def test_import_refuses_more_workers_on_a_node_than_its_gpus(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.csv", "m,g4dn.12xlarge,99,32,0.5,1000", "m,g4dn.12xlarge,1,32,0.1,1000")
    code, _, err = srifty("import", trace, "--out", tmp_path / "out")
    assert_clear_error(code, err, "puts 99 workers on a node of g4dn.12xlarge, which has 4 GPU(s)")
    assert not (tmp_path / "out").exists()


def test_a_partial_profile_goes_beside_a_complete_one(tmp_path: Path) -> None:
    out = tmp_path / "cnn.json"
    shutil.copy(CNN, out)
    before = out.read_bytes()
    partial = {**_profile_doc(), "status": "partial", "partial_reason": "rank 1 died"}
    written = profile_mod.save_partial(partial, out)
    assert written == str(tmp_path / "cnn.partial.json") and out.read_bytes() == before
    assert profile_mod.load(written).is_partial
    # a directory read as a corpus leaves the partial run out; named, it is read
    assert [p.path for p in profile_mod.load_many([tmp_path])] == [str(out)]
    assert profile_mod.load_many([written])[0].is_partial
    # where nothing complete is in the way, the partial profile takes the path asked for
    fresh = tmp_path / "new.json"
    assert profile_mod.save_partial(partial, fresh) == str(fresh)


# --------------------------------------------------------------------------- data files at the boundary


@pytest.mark.parametrize("mutate, needle", [
    (lambda t: t.replace('"median": ', '"median": NaN, "x": ', 1), "NaN"),
    (lambda t: t.replace('"median": ', '"median": Infinity, "x": ', 1), "Infinity"),
    (lambda t: t.replace('"median": ', '"median": 1e999, "x": ', 1), "too large"),
])
def test_profiles_with_non_finite_numbers_are_refused(tmp_path: Path, mutate: Any, needle: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(mutate(CNN.read_text()))
    code, _, err = srifty("show", path)
    assert_clear_error(code, err, needle)


def test_profiles_that_are_not_text_or_not_sane_are_refused(tmp_path: Path) -> None:
    noise = tmp_path / "noise.json"
    noise.write_bytes(bytes(range(256)) * 4)
    assert_clear_error(*srifty("show", noise)[::2], "not UTF-8")
    zero = _profile_doc()
    zero["summary"]["iteration_ms"]["median"] = 0
    code, _, err = srifty("predict", "--profile", _write(tmp_path / "zero.json", zero), "--config", "1xg5.xlarge")
    assert_clear_error(code, err, "summary.iteration_ms.median")
    huge = _profile_doc()
    huge["job"]["param_count"] = 1e30
    code, _, err = srifty("predict", "--profile", _write(tmp_path / "huge.json", huge), "--config", "1xg5.xlarge")
    assert_clear_error(code, err, "job.param_count")


def _catalog_with(tmp_path: Path, column: str, value: str) -> Path:
    lines = CATALOG.read_text().splitlines()
    header = lines[0].split(",")
    row = lines[1].split(",")
    row[header.index(column)] = value
    path = tmp_path / "catalog.csv"
    path.write_text("\n".join([lines[0], ",".join(row), *lines[2:]]) + "\n")
    return path


@pytest.mark.parametrize("column, value, needle", [
    ("ondemand_usd_per_hour", "-1", "a price above 0"),
    ("spot_min_usd_per_hour", "0", "a price above 0"),
    ("gpu_count", "four", "a whole number"),
    ("gpu_count", "2.5", "a whole number"),
    ("vcpus", "inf", "a whole number"),
    ("memory_gib", "nan", "finite"),
])
def test_catalog_rows_with_impossible_numbers_are_refused(tmp_path: Path, column: str, value: str,
                                                          needle: str) -> None:
    code, _, err = srifty("catalog", "--catalog", _catalog_with(tmp_path, column, value), "list")
    assert_clear_error(code, err, "line 2", column, needle)


def test_configurations_beyond_any_cluster_are_refused() -> None:
    for config, needle in (("99999999999999999999xg4dn.xlarge", "1 to 4096 nodes"),
                           ("1xg4dn.12xlarge:99", "asks for 99"), ("3000xg5.xlarge+3000xp3.2xlarge", "at most 4096")):
        code, _, err = srifty("predict", "--profile", CNN, "--config", config)
        assert_clear_error(code, err, needle)


# --------------------------------------------------------------------------- numeric options


@pytest.mark.parametrize("args, needle", [
    (["recommend", "--profile", CNN, "--top", "-1"], "'--top'"),
    (["recommend", "--profile", CNN, "--top", "0"], "'--top'"),
    (["recommend", "--profile", CNN, "--global-batch-size", "-1"], "'--global-batch-size'"),
    (["recommend", "--profile", CNN, "--batch-size", "0"], "'--batch-size'"),
    (["recommend", "--profile", CNN, "--max-types", "3"], "between 1 and 2"),
    (["recommend", "--profile", CNN, "--budget", "inf"], "not a finite number"),
    (["recommend", "--profile", CNN, "--max-nodes", "100000"], "between 1 and 128"),
    (["predict", "--profile", CNN, "--config", "1xg5.xlarge", "-b", "-5"], "'--local-batch-size'"),
    (["predict", "--profile", CNN, "--config", "1xg5.xlarge", "-b", "0"], "'--local-batch-size'"),
    (["profile", EXAMPLES / "cnn_resnet.py", "--target-ci", "nan"], "'--target-ci'"),
    (["profile", EXAMPLES / "cnn_resnet.py", "--nproc", "0"], "'--nproc'"),
])
def test_numeric_options_out_of_range_are_usage_errors(args: list[str], needle: str) -> None:
    code, _, err = srifty(*args)
    assert code == 2
    assert_clear_error(code, err, needle)


@pytest.mark.parametrize("typed, hours", [("36", 36.0), ("2.5", 2.5), ("90m", 1.5), ("90min", 1.5), ("36h", 36.0),
                                          ("2d", 48.0), ("2 D", 48.0), ("45s", 45 / 3600), ("1e2m", 100 / 60)])
def test_a_duration_is_hours_or_a_number_with_its_unit(typed: str, hours: float) -> None:
    assert params.hours().convert(typed, None, None) == pytest.approx(hours)


@pytest.mark.parametrize("typed, n", [("1281167", 1281167.0), ("5e7", 5e7), ("50k", 5e4), ("1.28M", 1.28e6),
                                      ("2B", 2e9), ("2 b", 2e9)])
def test_a_count_is_a_number_or_one_with_a_suffix(typed: str, n: float) -> None:
    assert params.count().convert(typed, None, None) == pytest.approx(n)


def test_a_deadline_with_a_unit_is_the_same_deadline_in_hours() -> None:
    """`--deadline 2d` is `--deadline 48` (and `--samples 1B` is 1e9): the same ranking, said in
    hours; a unit srifty does not know is a usage error that lists those it does."""
    runs = [srifty("recommend", "--profile", CNN, "--samples", n, "--deadline", d, "--top", "3",
                   "--checkpoint-interval", c, "--json") for n, d, c in (("1B", "2d", "30m"), ("1e9", "48", "0.5"))]
    assert all(code == 0 for code, _, _ in runs), runs
    with_units, in_hours = (json.loads(out) for _, out, _ in runs)
    assert with_units["constraints"] == in_hours["constraints"] and with_units["recommendations"]
    assert [r["config"] for r in with_units["recommendations"]] == [r["config"] for r in in_hours["recommendations"]]
    code, _, err = srifty("recommend", "--profile", CNN, "--samples", "1e9", "--deadline", "2w")
    assert code == 2
    assert_clear_error(code, err, "'--deadline'", "90m, 36h, 2d, 45s")


# Every numeric option of every command, with what it accepts: ("whole"|"number", lowest, open, highest).
NUMERIC_OPTIONS: list[tuple[list[str], str, str, float, bool, float | None]] = [
    (["profile", str(EXAMPLES / "cnn_resnet.py")], "--nproc", "whole", 1, False, 1024),
    (["profile", str(EXAMPLES / "cnn_resnet.py")], "--max-seconds", "number", 0, True, None),
    (["profile", str(EXAMPLES / "cnn_resnet.py")], "--max-iterations", "whole", 1, False, None),
    (["profile", str(EXAMPLES / "cnn_resnet.py")], "--min-iterations", "whole", 1, False, None),
    (["profile", str(EXAMPLES / "cnn_resnet.py")], "--target-ci", "number", 0, True, 1),
    (["profile", str(EXAMPLES / "cnn_resnet.py")], "--hang-timeout", "number", 0, True, None),
    (["profile", str(EXAMPLES / "cnn_resnet.py")], "--startup-timeout", "number", 0, True, None),
    (["profile", "--collectives"], "--max-bytes", "whole", 1, False, None),
    (["profile", "--collectives"], "--repeats", "whole", 1, False, None),
    (["profile", str(EXAMPLES / "cnn_resnet.py"), "--backend", "ec2"], "--nodes", "whole", 1, False, 4096),
    (["profile", str(EXAMPLES / "cnn_resnet.py"), "--backend", "ec2"], "--max-cost", "number", 0, False, None),
    (["profile", str(EXAMPLES / "cnn_resnet.py"), "--backend", "ec2"], "--time-cap", "number", 0, True, None),
    (["predict", "--profile", str(CNN), "--config", "1xg5.xlarge"], "--local-batch-size", "whole", 1, False, 1e7),
    *[(["recommend", "--profile", str(CNN)], opt, "number", 0, True, None)
      for opt in ("--budget", "--total-budget", "--min-throughput", "--deadline", "--samples", "--epochs",
                  "--dataset-size")],
    *[(["recommend", "--profile", str(CNN)], opt, "number", 0, False, None)
      for opt in ("--max-interruption", "--checkpoint-interval", "--restart-overhead")],
    (["recommend", "--profile", str(CNN)], "--max-nodes", "whole", 1, False, 128),
    (["recommend", "--profile", str(CNN)], "--max-types", "whole", 1, False, 2),
    (["recommend", "--profile", str(CNN)], "--batch-size", "whole", 1, False, 1e7),
    (["recommend", "--profile", str(CNN)], "--top", "whole", 1, False, None),
    (["evaluate", str(EXAMPLES / "cnn_resnet.py")], "--batch-size", "whole", 1, False, 1e7),
    (["evaluate", str(EXAMPLES / "cnn_resnet.py"), "--batch-size", "8"], "--max-hosts", "whole", 1, False, 64),
    (["evaluate", str(EXAMPLES / "cnn_resnet.py"), "--batch-size", "8"], "--max-seconds", "number", 0, True, None),
    (["cluster", "calibrate"], "--repeats", "whole", 1, False, None),
    (["cluster", "calibrate"], "--iterations", "whole", 1, False, None),
]


def _bad_values(kind: str, low: float, low_open: bool, high: float | None) -> st.SearchStrategy[str]:
    """Text a user could type that the option must refuse."""
    below = st.floats(max_value=low, allow_nan=False, allow_infinity=False,
                      exclude_max=not low_open).filter(lambda x: x >= -1e300)
    options = [below.map(lambda x: str(int(x)) if kind == "whole" and x == int(x) else repr(x)),
               st.sampled_from(["nan", "inf", "-inf", "NaN", "Infinity", "", "ten", "1,5", "0x10", "--"]),
               st.text(alphabet="abcxyz!@#%", min_size=1, max_size=6)]
    if high is not None:
        options.append(st.floats(min_value=high, max_value=1e300, exclude_min=True).map(repr))
        options.append(st.integers(min_value=int(high) + 1, max_value=10 ** 30).map(str))
    if kind == "whole":
        options.append(st.floats(min_value=1.01, max_value=1e6).filter(lambda x: x != int(x)).map(repr))
    return st.one_of(options)


@pytest.mark.parametrize("base, option, kind, low, low_open, high", NUMERIC_OPTIONS,
                         ids=[f"{b[0]}{o}" for b, o, *_ in NUMERIC_OPTIONS])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_numeric_option_refuses_what_it_cannot_mean(data: st.DataObject, base: list[str], option: str,
                                                           kind: str, low: float, low_open: bool,
                                                           high: float | None) -> None:
    value = data.draw(_bad_values(kind, low, low_open, high))
    code, out, err = srifty(*base, f"{option}={value}", seconds=30)
    assert code == 2, (option, value, out, err)
    assert_clear_error(code, err, option)
    assert not out


@settings(max_examples=25, deadline=None)
@given(field=st.sampled_from(["summary.iteration_ms.median", "summary.iteration_ms.n", "job.param_count",
                              "job.local_batch_size", "cluster.world_size", "cluster.nodes", "job.model",
                              "summary.throughput_samples_per_s", "schema_version", "cluster.instance_types"]),
       value=st.one_of(st.none(), st.integers(min_value=-10 ** 20, max_value=10 ** 20), st.booleans(),
                       st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=5),
                       st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(),
                                                                            max_size=1)))
def test_profiles_with_any_field_spoilt_load_or_fail_clearly(field: str, value: Any) -> None:
    """A profile with one field replaced by anything either loads and is summarised, or is refused
    in one paragraph naming the field: `show` never fails unexpectedly."""
    import tempfile

    doc = _profile_doc()
    *parents, last = field.split(".")
    node = doc
    for key in parents:
        node = node[key]
    node[last] = value
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp) / "p.json", doc)
        code, _, err = srifty("show", path)
    if code != 0:
        assert_clear_error(code, err)

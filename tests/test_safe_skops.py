"""Model files: only the exact types a srifty model holds are ever built (srifty.safe_skops)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from srifty import model as m
from srifty import safe_skops

ROOT = Path(__file__).resolve().parents[1]


def _exploit(path: Path, marker: Path) -> None:
    """A skops file whose top object is `builtins.exec(<code that writes marker>)`, built through
    skops' ConstructorFromReduceNode: loading it with `builtins.` trusted runs the code."""
    code = f"open({str(marker)!r}, 'w').write('pwned')"
    schema = {
        "__class__": "exec", "__module__": "builtins", "__loader__": "ConstructorFromReduceNode",
        "__id__": 1, "protocol": 2, "_skops_version": "0.16.0",
        "content": {"__class__": "tuple", "__module__": "builtins", "__loader__": "TupleNode", "__id__": 2,
                    "content": [{"__class__": "str", "__module__": "builtins", "__loader__": "JsonNode",
                                 "__id__": 3, "content": json.dumps(code), "is_json": True}]},
    }
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("schema.json", json.dumps(schema))


def test_the_crafted_file_really_runs_code_when_its_types_are_trusted(tmp_path: Path) -> None:
    """The test's own premise: skops with `builtins.exec` trusted executes the file's code
    (the old prefix rule trusted every `builtins.` type)."""
    evil, marker = tmp_path / "evil.skops", tmp_path / "marker"
    _exploit(evil, marker)
    sio = safe_skops.skops_io()
    assert "builtins.exec" in sio.get_untrusted_types(file=str(evil))
    sio.load(str(evil), trusted=["builtins.exec"])
    assert marker.read_text() == "pwned"


def test_a_crafted_model_file_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    evil, marker = tmp_path / "evil.skops", tmp_path / "marker"
    _exploit(evil, marker)
    with pytest.raises(m.ModelError, match=r"builtins\.exec \(ConstructorFromReduceNode\).*not loaded"):
        m.load(evil)
    assert not marker.exists()


@pytest.mark.parametrize("via", ["--model", "SRIFTY_MODEL"])
def test_the_cli_refuses_a_crafted_model_with_one_paragraph(tmp_path: Path, via: str) -> None:
    evil, marker = tmp_path / "evil.skops", tmp_path / "marker"
    _exploit(evil, marker)
    args = [sys.executable, "-m", "srifty", "predict", "--profile", str(ROOT / "profiles/local/cnn_resnet.json"),
            "--config", "1xg5.xlarge"]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    if via == "--model":
        args += ["--model", str(evil)]
    else:
        env["SRIFTY_MODEL"] = str(evil)
    res = subprocess.run(args, capture_output=True, text=True, cwd=str(ROOT), env=env, timeout=300)
    assert res.returncode == 1
    assert "does not trust: builtins.exec" in res.stderr and "Traceback" not in res.stderr
    assert not marker.exists()


def test_a_type_trusted_by_prefix_alone_is_refused(tmp_path: Path) -> None:
    """A numpy function, a builtins type and a scikit-learn estimator the model never holds: each
    would have passed the old `numpy.`/`builtins.`/`sklearn.` prefixes."""
    from sklearn.linear_model import LinearRegression

    sio = safe_skops.skops_io()
    import numpy as np

    for i, obj in enumerate([{"f": np.load}, {"s": frozenset({1})}, {"e": LinearRegression()}]):
        path = tmp_path / f"odd{i}.skops"
        sio.dump(obj, str(path))
        with pytest.raises(safe_skops.UntrustedModelFile, match="does not trust"):
            safe_skops.load(path, m.MODEL_FILE_TYPES)


def test_save_refuses_what_load_would_refuse(tmp_path: Path) -> None:
    out = tmp_path / "x.skops"
    with pytest.raises(safe_skops.UntrustedModelFile, match="allow-list"):
        safe_skops.dump({"s": frozenset({1})}, out, m.MODEL_FILE_TYPES)
    assert not out.exists()


def test_the_shipped_model_declares_only_allowed_types() -> None:
    assert safe_skops.declared_types(m.SHIPPED_MODEL) <= m.MODEL_FILE_TYPES
    assert isinstance(m.load(m.SHIPPED_MODEL), m.Predictor)


@pytest.mark.parametrize("content", [b"", b"not a zip", b"PK\x03\x04garbage"])
def test_files_that_are_not_skops_get_a_clear_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.skops"
    path.write_bytes(content)
    with pytest.raises(m.ModelError, match="not a skops model file"):
        m.load(path)


def test_no_source_file_deserialises_code() -> None:
    """The promise of docs/SECURITY.md, checked on the source: no pickle, no unsafe YAML, no
    torch.load, no eval/exec, numpy loads with allow_pickle=False."""
    import re

    risky = re.compile(r"\bimport pickle\b|\bpickle\.loads?\(|yaml\.(?:load|unsafe_load|full_load)\(|torch\.load\("
                       r"|(?<![\w.])(?:eval|exec)\(|np\.load\((?![^)]*allow_pickle=False)")
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in sorted((ROOT / "srifty").rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), start=1) if risky.search(line)]
    assert not found, found

"""Model files are data: arrays and JSON read without pickle; whatever else a file holds is
refused with a one-paragraph error, and no source file deserialises code."""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from srifty import model as m

ROOT = Path(__file__).resolve().parents[1]


def _pickled_model(path: Path) -> None:
    """The shipped model with one array replaced by a pickled object (a ``Path``): numpy would
    build it only with ``allow_pickle=True``."""
    buf = io.BytesIO()
    np.save(buf, np.array([Path("/etc/passwd")], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(m.SHIPPED_MODEL) as src, zipfile.ZipFile(path, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, buf.getvalue() if name == "real_model_value.npy" else src.read(name))


@pytest.mark.parametrize("via", ["--model", "SRIFTY_MODEL"])
def test_the_cli_refuses_a_model_holding_a_pickle_with_one_paragraph(tmp_path: Path, via: str) -> None:
    evil = tmp_path / "evil.npz"
    _pickled_model(evil)
    args = [sys.executable, "-m", "srifty", "predict", "--profile", str(ROOT / "profiles/local/cnn_resnet.json"),
            "--config", "1xg5.xlarge"]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    if via == "--model":
        args += ["--model", str(evil)]
    else:
        env["SRIFTY_MODEL"] = str(evil)
    res = subprocess.run(args, capture_output=True, text=True, cwd=str(ROOT), env=env, timeout=300)
    assert res.returncode == 1
    assert "is not a srifty latency model" in res.stderr and "allow_pickle" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("content", [b"", b"not a zip", b"PK\x03\x04garbage"])
def test_files_that_are_not_models_get_a_clear_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.npz"
    path.write_bytes(content)
    with pytest.raises(m.ModelError, match="not a srifty latency model"):
        m.load(path)


def test_arrays_of_something_else_are_not_a_model(tmp_path: Path) -> None:
    path = tmp_path / "other.npz"
    np.savez(path, weights=np.ones(3))
    with pytest.raises(m.ModelError, match="not a srifty latency model"):
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

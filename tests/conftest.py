"""Shared fixtures: paths, a CLI runner, and a check that no worker process outlives a test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "scripts"
EXAMPLES = ROOT / "examples"
PROFILES = ROOT / "profiles"

# A shell starts background jobs with SIGINT ignored, and children inherit that: the tests that
# press Ctrl-C on a child srifty would then test nothing. A handled signal is reset to the
# default in a child, so installing Python's own handler gives every child a working Ctrl-C.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def srifty_processes(marker: str) -> list[psutil.Process]:
    """Live processes whose command line mentions ``marker`` (a script path), other than us."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid == os.getpid():
            continue
        try:
            if any(marker in part for part in (proc.info["cmdline"] or [])):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def run_srifty(*args: str, timeout: float = 240, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess (as a user would), capturing output."""
    return subprocess.run(
        [sys.executable, "-m", "srifty", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(cwd or ROOT),
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def no_orphans():
    """Yields a function that asserts no process runs the given script any more."""

    def check(marker: str) -> None:
        left = srifty_processes(marker)
        assert not left, f"orphaned processes: {[p.info['cmdline'] for p in left]}"

    return check


@pytest.fixture(scope="session")
def quick_validation():
    """``api.validate`` of the shipped corpora, quick (what `srifty validate --quick` computes), with
    the progress lines it said: computed once for the tests that read it."""
    from srifty import api

    lines: list[str] = []
    return api.validate((), quick=True, say=lines.append), lines

"""srifty killed outright leaves no torchrun or worker behind (issue #26 item 4, "Workers die with srifty").

SIGKILL gives srifty no chance to clean up: its ``finally`` blocks never run. What stops the
run's processes then is srifty.profiling.parentwatch: a watchdog that notices srifty is gone,
and the parent-death signal armed in torchrun and in every worker. These tests kill srifty
while its workers train and check that everything it started is gone soon after.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import ROOT, SCRIPTS, srifty_processes

pytestmark = pytest.mark.slow

SLOW = str(SCRIPTS / "slow.py")  # trains forever (0.2 s an iteration): only a kill ends it
STARTUP_S = 150.0  # torch starts slowly on 2 cores, slower still on a throttled emulated host
GONE_WITHIN_S = 15.0  # the bound on stopping everything once srifty is dead
EMU_CLUSTER = "eorph"  # its own cluster name: never touches another test's or a user's cluster
FAST_SPEC = str(ROOT / "tests" / "data" / "emulated-fast.yaml")


def _alive(proc: psutil.Process) -> bool:
    """Running, and not a zombie: a process orphaned to an init that does not reap is dead too."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _is_worker(proc: psutil.Process) -> bool:
    """A rank of the run: ``python -m srifty.profiling.worker`` started by torchrun (not torchrun)."""
    try:
        cmdline = proc.cmdline()
    except psutil.Error:
        return False
    return "srifty.profiling.worker" in cmdline and "torch.distributed.run" not in cmdline


def _iterations(tree: list[psutil.Process]) -> int:
    """Iterations rank 0 has flushed so far, read from the run directory in the processes' env."""
    for proc in tree:
        try:
            run_dir = proc.environ().get("SRIFTY_PROFILE_DIR")
        except psutil.Error:
            continue
        if run_dir:
            try:
                return len(json.loads((Path(run_dir) / "rank0.json").read_text())["iterations"])
            except (OSError, ValueError, KeyError):
                return 0
    return 0


def _wait_for_training(srifty: subprocess.Popen[bytes], log: Path) -> list[psutil.Process]:
    """Every process srifty has started, once its ranks have trained a few iterations."""
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        assert srifty.poll() is None, f"srifty ended early ({srifty.returncode}): {log.read_text(errors='replace')}"
        try:
            tree = psutil.Process(srifty.pid).children(recursive=True)
        except psutil.Error:
            tree = []
        if _iterations(tree) >= 3:
            return tree
        time.sleep(0.5)
    pytest.fail(f"the workers recorded no iterations within {STARTUP_S:.0f} s: {log.read_text(errors='replace')}")


def _kill_srifty_mid_run(tmp_path: Path, args: list[str], env: dict[str, str] | None = None) -> None:
    """Start ``srifty profile slow.py ARGS``, SIGKILL it while two ranks train, and require that
    torchrun, the ranks and every other process srifty started end within GONE_WITHIN_S."""
    log = tmp_path / "srifty.log"
    with open(log, "wb") as out:
        srifty = subprocess.Popen(
            [sys.executable, "-m", "srifty", "profile", SLOW, *args, "--max-seconds", "60",
             "--min-iterations", "1000", "--out", str(tmp_path / "never.json")],
            cwd=str(ROOT), env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
        )
    tree: list[psutil.Process] = []
    try:
        tree = _wait_for_training(srifty, log)
        assert sum(map(_is_worker, tree)) == 2, [p.cmdline() for p in tree if _alive(p)]
        srifty.send_signal(signal.SIGKILL)
        srifty.wait(timeout=10)
        deadline = time.monotonic() + GONE_WITHIN_S
        while time.monotonic() < deadline and (any(map(_alive, tree)) or srifty_processes(SLOW)):
            time.sleep(0.2)
        left = [p for p in tree if _alive(p)] + [p for p in srifty_processes(SLOW) if _alive(p) and p not in tree]
        assert not left, f"still running {GONE_WITHIN_S:.0f} s after srifty was killed: " + "; ".join(
            f"{p.pid} {' '.join(p.cmdline())[:160]}" for p in left if _alive(p))
    finally:  # a failed check must not leave a busy job behind for the next tests
        if srifty.poll() is None:
            srifty.kill()
            srifty.wait()
        for p in [*tree, *srifty_processes(SLOW)]:
            try:
                p.kill()
            except psutil.Error:
                pass


def test_sigkilled_srifty_leaves_no_workers(tmp_path: Path, no_orphans) -> None:
    _kill_srifty_mid_run(tmp_path, ["--nproc", "2"])
    no_orphans(SLOW)


@pytest.mark.skipif(os.geteuid() != 0, reason="the emulated cluster needs root (network namespaces, tc, cgroups)")
def test_sigkilled_srifty_leaves_no_workers_on_emulated_hosts(tmp_path: Path, no_orphans) -> None:
    """Workers in other network namespaces and cgroups are stopped the same way. The emulated
    hosts themselves outlive a SIGKILLed srifty (the next run of the same cluster replaces them);
    this test tears them down."""
    from srifty import cluster

    try:
        _kill_srifty_mid_run(
            tmp_path, ["--backend", "emulated", "--spec", FAST_SPEC, "--hosts", "emu.whole:2"],
            env={**os.environ, "SRIFTY_PROFILE_CLUSTER": EMU_CLUSTER},
        )
        no_orphans(SLOW)
    finally:
        cluster.down(EMU_CLUSTER)

"""Measure each host type's real CPU slowdown (the CFS quota is not exact on this kernel)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from srifty.cluster import core, system
from srifty.cluster.core import ClusterState, CpuCalibration
from srifty.errors import SriftyError

# A fixed pure-Python loop that times itself (interpreter start-up is not counted).
LOOP = (
    "import sys, time\n"
    "n = int(sys.argv[1]); t = time.perf_counter(); s = 0\n"
    "for i in range(n):\n"
    "    s += i * i % 7\n"
    "print(time.perf_counter() - t)\n"
)
DEFAULT_ITERATIONS = 1_500_000  # about 0.2-0.3 s unconstrained on the development machine


def _run(argvs: list[list[str]], timeout: float) -> list[float]:
    """Start the loops at once, wait for all, return their self-timed seconds."""
    procs = [subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for a in argvs]
    out: list[float] = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            if p.returncode != 0:
                raise SriftyError(f"Calibration loop failed (exit {p.returncode}): {stderr.strip()}")
            out.append(float(stdout.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def measure(state: ClusterState, iterations: int = DEFAULT_ITERATIONS, repeats: int = 3,
            timeout: float = 120.0) -> dict[str, CpuCalibration]:
    """Run the loop on the first host of each type (as many copies as the type has workers,
    concurrently) and on an unconstrained reference (same CPU weight, no quota), interleaved
    ``repeats`` times.

    The factor is min(host seconds) / min(unconstrained seconds): best-of-N, as timeit does,
    because other work on this small machine only ever adds time, and a lot of it (under
    another user's load, 0.5- vs 1.0-share ratios over four runs: medians 1.05-1.43x,
    best-of-3 1.61-1.96x). Medians are kept too.
    Other hosts should be idle meanwhile; nothing is written (see :func:`calibrate`).
    """
    if repeats < 1 or iterations < 1:
        raise SriftyError("calibrate: repeats and iterations must be positive.")
    loop = [sys.executable, "-c", LOOP, str(iterations)]
    # The reference runs in a cgroup with a host's weight but no quota: an unconstrained host
    # that competes with other work on the machine exactly as the hosts do.
    driver = system.CgroupDriver(state.cgroup_version, Path(state.cgroup_base))
    ref = f"{core.PREFIX}{state.cluster}-reference"
    ref_loop = [sys.executable, "-m", "srifty.cluster.enter", "--cgroup", str(driver.path(ref)),
                "--netns", state.switch_namespace, "--", *loop]
    firsts: dict[str, str] = {}
    for h in state.hosts:
        firsts.setdefault(h.type_name, h.name)
    load = os.getloadavg()[0]
    base: list[float] = []
    per_type: dict[str, list[float]] = {t: [] for t in firsts}
    driver.create(ref, 1.0, state.cfs_period_us, limit=False)
    try:
        for _ in range(repeats):
            base += _run([ref_loop], timeout)
            for type_name, host in firsts.items():
                h = state.host(host)
                per_type[type_name] += _run([core.host_command(state, host, loop)] * h.workers, timeout)
        base += _run([ref_loop], timeout)
    finally:
        system.kill_pids(driver.pids(ref), grace=0.0)
        driver.remove(ref)
    base_median = statistics.median(base)
    now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    out: dict[str, CpuCalibration] = {}
    for type_name, host in firsts.items():
        h = state.host(host)
        secs = per_type[type_name]
        out[type_name] = CpuCalibration(
            type_name=type_name, host=host, cpu_share=h.cpu_share, workers=h.workers,
            nominal_factor=round(max(1.0, h.workers / h.cpu_share), 4),
            factor=round(min(secs) / min(base), 4),
            factor_median=round(statistics.median(secs) / base_median, 4),
            host_seconds=[round(x, 4) for x in secs], base_seconds=[round(x, 4) for x in base],
            iterations=iterations, measured_at=now, loadavg_1m=round(load, 2),
        )
    return out


def calibrate(state: ClusterState, iterations: int = DEFAULT_ITERATIONS, repeats: int = 3) -> ClusterState:
    """Measure every host type's CPU factor and store it in the cluster's state file."""
    result = measure(state, iterations=iterations, repeats=repeats)
    with core._locked(state.cluster):
        current = core.load_state(state.cluster)
        if current is None or not current.complete or current.hosts != state.hosts:
            raise SriftyError("The emulated cluster changed while calibrating; run `srifty cluster calibrate` again.")
        updated = replace(current, calibration={**current.calibration, **result})
        core._write_state(updated)
    return updated

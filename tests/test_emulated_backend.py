"""`srifty profile --backend emulated`: real DDP across namespaced hosts, and nothing left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from srifty import profile as profile_mod

from conftest import EXAMPLES, ROOT, SCRIPTS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="the emulated cluster needs root (network namespaces, tc, cgroups)"),
]

CLUSTER = "etest"  # its own cluster name: never touches a cluster a user or `make corpus` has up
# Two host types with a whole and half core: workers start 3-4x sooner than on the quarter-core
# hosts of configs/emulated.yaml, and what these tests check does not depend on the shares.
FAST_SPEC = str(ROOT / "tests" / "data" / "emulated-fast.yaml")


def _env() -> dict[str, str]:
    return {**os.environ, "SRIFTY_PROFILE_CLUSTER": CLUSTER}


def _srifty(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "srifty", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=str(ROOT), env=_env(), stdin=subprocess.DEVNULL)


def _leftovers() -> list[str]:
    """Namespaces, links and cgroups of the test cluster that still exist."""
    found = []
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [line.split()[0] for line in ns.splitlines() if f"srifty-{CLUSTER}-" in line]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [line for line in links.splitlines() if f"srifty-{CLUSTER}" in line]
    for root in Path("/sys/fs/cgroup").glob("*"):
        found += [str(p) for p in root.glob(f"srifty-{CLUSTER}-*")]
    return found


@pytest.fixture(autouse=True)
def clean_cluster():
    yield
    left = _leftovers()
    if left:  # clean up for the next test, then fail this one
        from srifty import cluster

        cluster.down(CLUSTER)
    assert not left, f"left behind: {left}"


def test_mixed_hosts_profile(tmp_path: Path, no_orphans) -> None:
    out = tmp_path / "mixed.json"
    res = _srifty("profile", str(EXAMPLES / "mlp_recsys.py"), "--backend", "emulated",
                  "--spec", FAST_SPEC, "--hosts", "emu.whole:1,emu.half:1", "--max-seconds", "3", "--min-iterations", "8",
                  "--batch-size", "64", "--out", str(out))
    assert res.returncode == 0, res.stderr
    doc = profile_mod.load(out).doc
    cl = doc["cluster"]
    assert cl["launcher"] == "emulated" and cl["nodes"] == 2 and cl["world_size"] == 2
    assert cl["config"] == "1xemu.whole+1xemu.half"
    assert cl["instance_types"] == ["emu.half", "emu.whole"]  # sorted
    assert [h["instance_type"] for h in cl["hosts"]] == ["emu.whole", "emu.half"]
    assert [h["spec"]["cpu_share"] for h in cl["hosts"]] == [1.0, 0.5]
    assert cl["network"]["bottleneck_mbit"] == 200
    # every rank ran on its own host
    assert sorted(r["host"] for r in doc["ranks"]) == ["half0", "whole0"]
    assert doc["job"]["local_batch_size"] == 64
    # the slow host sets the pace: the whole-core host waits for it in its allreduce
    s = doc["summary"]
    assert s["exposed_comm_ms"]["median"] > 0
    no_orphans(str(EXAMPLES / "mlp_recsys.py"))


def test_worker_crash_across_hosts_leaves_nothing(tmp_path: Path, no_orphans) -> None:
    out = tmp_path / "crash.json"
    res = _srifty("profile", str(SCRIPTS / "crash_rank1.py"), "--backend", "emulated", "--spec", FAST_SPEC, "--hosts", "emu.whole:2",
                  "--max-seconds", "60", "--min-iterations", "1000", "--out", str(out))
    assert res.returncode != 0 and "Traceback" not in res.stderr
    doc = profile_mod.load(out).doc
    assert doc["status"] == "partial" and len(doc["ranks"][0]["iterations"]) >= 20
    no_orphans(str(SCRIPTS / "crash_rank1.py"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_emulated_run_leaves_nothing(tmp_path: Path, no_orphans, sig: signal.Signals) -> None:
    """Ctrl-C, or SIGTERM from a supervisor: workers stopped, hosts torn down, the partial profile kept."""
    out = tmp_path / "int.json"
    before = set(Path("/tmp").glob("srifty-run-*"))  # earlier tests' run directories are not this run's
    proc = subprocess.Popen(
        [sys.executable, "-m", "srifty", "profile", str(SCRIPTS / "slow.py"), "--backend", "emulated",
         "--spec", FAST_SPEC, "--hosts", "emu.whole:2", "--max-seconds", "120", "--min-iterations", "1000", "--out", str(out)],
        cwd=str(ROOT), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.5)
        runs = [d / "rank0.json" for d in Path("/tmp").glob("srifty-run-*") if d not in before]
        counts = []
        for p in runs:
            try:
                if p.stat().st_mtime > time.time() - 5:
                    counts.append(len(json.loads(p.read_text())["iterations"]))
            except (OSError, ValueError):
                pass
        if any(c >= 3 for c in counts):
            break
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 128 + int(sig), stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert out.exists(), stderr
    assert profile_mod.load(out).doc["status"] == "partial"
    no_orphans(str(SCRIPTS / "slow.py"))
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"srifty-{CLUSTER}-" not in namespaces, namespaces


def test_a_mixed_plan_launches_with_a_batch_per_host_type(tmp_path: Path, no_orphans) -> None:
    """`srifty launch DIR --backend emulated` runs a plan of a mix: each host type trains at the
    plan's per-worker batch, here given as the script's own option (`profile --batch-arg`), and the
    measured step is set against the plan's prediction."""
    from srifty.catalog import Catalog
    from srifty.plan import make_plan, write_plan
    from srifty.solver import Recommendation

    cat = Catalog.from_emulated_spec(Path(FAST_SPEC))
    row = Recommendation(config="1xemu.whole+1xemu.half", market="on-demand", gpus=2, nodes=2,
                         batch_split={"emu.whole": 96.0, "emu.half": 32.0}, global_batch=128.0, iteration_ms=50.0,
                         interval_ms=(30.0, 90.0), throughput_samples_per_s=2560.0,
                         raw_throughput_samples_per_s=2560.0, usd_per_hour=0.65, usd_per_million_samples=0.07,
                         interruptions_per_hour=0.0, source="predicted", mixed=True)
    script = "tests/scripts/batch_option.py"  # reads --per_device_train_batch_size alone
    plan = make_plan("batch_option", script, [], row, 1, None, cat, batch_arg="--per_device_train_batch_size")
    write_plan(plan, tmp_path)
    assert plan.emulated and not (tmp_path / "sky.yaml").exists()
    res = _srifty("launch", str(tmp_path), "--backend", "emulated", "--spec", FAST_SPEC, "--max-seconds", "3",
                  "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    doc = profile_mod.load(tmp_path / "run.profile.json").doc
    assert doc["cluster"]["config"] == "1xemu.whole+1xemu.half"
    batch_of = {r["host"]: {it["batch_size"] for it in r["iterations"]} for r in doc["ranks"]}
    assert batch_of == {"whole0": {96}, "half0": {32}}
    measured = doc["summary"]["iteration_ms"]["median"]
    assert report["measured_ms"] == pytest.approx(measured) and report["global_batch"] == 128
    assert report["inside"] == (30.0 <= measured <= 90.0)
    assert report["measured_samples_per_s"] == pytest.approx(128 / (measured / 1e3), rel=1e-3)
    no_orphans(script)

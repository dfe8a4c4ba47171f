#!/usr/bin/env python3
"""Record the emulated-cluster corpus described by configs/corpus-grid.yaml (`make corpus`).

Needs root (network namespaces, tc, cgroups). Each run writes one profile:
  profiles/emulated/<model>/<config>-b<batch>.json   training runs
  profiles/emulated/collectives/<config>.json        allreduce sweeps
where <config> is the cluster in srifty's config syntax (e.g. 2xemu.medium+1xemu.small).
Runs whose profile exists are skipped (resume after an interruption); --force re-records.
Failed runs are listed in profiles/emulated/FAILED.txt, and the run goes on.

Last, the CPU factor of every host type (the kernel's CFS quota is not exact) is measured
with `srifty cluster calibrate`'s loop on one idle host of each type, written to
profiles/emulated/calibration.json, and recorded in every corpus profile's host specs
(`cpu_factor`, with `cpu_factor_source` naming that file): measured once, right after the
runs, not during each of them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from srifty import cluster  # noqa: E402
from srifty import profile as profile_mod  # noqa: E402
from srifty.cluster import parse_hosts  # noqa: E402
from srifty.errors import SriftyError, run_script  # noqa: E402
from srifty.profiling.emulated import EmulatedBackend, config_string  # noqa: E402
from srifty.profiling.launcher import ProfileRequest  # noqa: E402


def hosts_config(hosts: str) -> str:
    return config_string([t for t, n in parse_hosts(hosts) for _ in range(n)])


def plan(grid: dict, only: str | None) -> list[dict]:
    runs = []
    m = grid["measure"]
    for model, entry in grid["models"].items():
        if only and model != only:
            continue
        sizes = entry["batch_sizes"]
        for hosts in grid["single_hosts"]:
            for b in sizes:
                runs.append({"model": model, "script": entry["script"], "hosts": hosts, "batch": b, **m})
        for hosts in grid["clusters"]:
            for b in sizes[: grid.get("cluster_batch_sizes", 1)]:
                runs.append({"model": model, "script": entry["script"], "hosts": hosts, "batch": b, **m})
    if not only or only == "collectives":
        c = grid["collectives"]
        for hosts in c["clusters"]:
            runs.append({"model": "collectives", "hosts": hosts, "max_bytes": c["max_bytes"], "repeats": c["repeats"], **m})
    return runs


def out_path(run: dict) -> Path:
    cfg = hosts_config(run["hosts"])
    base = ROOT / "profiles" / "emulated"
    if run["model"] == "collectives":
        return base / "collectives" / f"{cfg}.json"
    return base / run["model"] / f"{cfg}-b{run['batch']}.json"


def record(run: dict, spec: str, out: Path) -> None:
    """Record one run of the grid (a training job or an allreduce sweep) into ``out``."""
    req = ProfileRequest(
        script=str(ROOT / run["script"]) if run.get("script") else None,
        batch_size=run.get("batch"), max_seconds=run["max_seconds"], min_iterations=run["min_iterations"],
        target_rel_ci=run["target_ci"], hosts=run["hosts"], spec=str(ROOT / spec),
        model_name=None if run["model"] == "collectives" else run["model"],
        collectives=run["model"] == "collectives", max_bytes=run.get("max_bytes", 64 << 20),
        repeats=run.get("repeats", 10), startup_timeout=240, hang_timeout=120,
    )
    EmulatedBackend().profile(req, str(out))


def calibrate_and_annotate(spec_path: Path) -> Path:
    """Measure each host type's CPU factor once and record it in every corpus profile."""
    from dataclasses import asdict

    spec = cluster.load_spec(spec_path)
    state = cluster.up(spec, [(t, 1) for t in spec.instance_types], cluster="calib", replace=True)
    try:
        result = cluster.measure(state)
    finally:
        cluster.down("calib")
    base = ROOT / "profiles" / "emulated"
    out = base / "calibration.json"
    doc = {"command": "python scripts/make_corpus.py --calibrate-only", "spec": str(spec_path.relative_to(ROOT)),
           "types": {t: asdict(c) for t, c in result.items()}}
    profile_mod.atomic_write_text(out, json.dumps(doc, indent=1) + "\n")
    for path in sorted(base.rglob("*.json")):
        if path.name == "calibration.json":
            continue
        prof = json.loads(path.read_text())
        for host in prof.get("cluster", {}).get("hosts", []):
            cal = result.get(host["instance_type"])
            if cal is not None:
                host["spec"]["cpu_factor"] = round(cal.factor, 4)
                host["spec"]["cpu_factor_source"] = "profiles/emulated/calibration.json"
        profile_mod.save(prof, path)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", default=str(ROOT / "configs" / "corpus-grid.yaml"))
    ap.add_argument("--only", help="one model name, or 'collectives'")
    ap.add_argument("--force", action="store_true", help="re-record runs whose profile exists")
    ap.add_argument("--dry-run", action="store_true", help="list the runs and exit")
    ap.add_argument("--calibrate-only", action="store_true", help="only measure CPU factors and annotate profiles")
    args = ap.parse_args()
    grid = yaml.safe_load(Path(args.grid).read_text())
    runs = plan(grid, args.only)
    if args.calibrate_only:
        print(f"CPU factors written to {calibrate_and_annotate(ROOT / grid['spec']).relative_to(ROOT)}")
        return 0
    todo = [r for r in runs if args.force or not out_path(r).exists()]
    print(f"{len(runs)} runs in the grid, {len(todo)} to record", flush=True)
    if args.dry_run:
        for r in todo:
            print(f"  {r['model']:<15} {r['hosts']:<28} batch {r.get('batch', '-')} -> {out_path(r).relative_to(ROOT)}")
        return 0
    failed: list[str] = []
    t_all = time.monotonic()
    for i, r in enumerate(todo, 1):
        out = out_path(r)
        t0 = time.monotonic()
        try:
            record(r, grid["spec"], out)
            status = "ok"
        except SriftyError as exc:
            status = f"FAILED: {exc}"
            failed.append(f"{out.relative_to(ROOT)}: {exc}")
        print(f"[{i}/{len(todo)}] {r['model']} {r['hosts']} b={r.get('batch', '-')}: {status} "
              f"({time.monotonic() - t0:.0f} s)", flush=True)
    fail_file = ROOT / "profiles" / "emulated" / "FAILED.txt"
    if failed:
        fail_file.parent.mkdir(parents=True, exist_ok=True)
        fail_file.write_text("\n".join(failed) + "\n")
    elif fail_file.exists():
        fail_file.unlink()
    print(f"done in {(time.monotonic() - t_all) / 60:.1f} min; {len(failed)} failed", flush=True)
    print(f"CPU factors written to {calibrate_and_annotate(ROOT / grid['spec']).relative_to(ROOT)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    run_script(main)

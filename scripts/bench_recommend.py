"""Benchmark of `srifty recommend` (make bench): the full EC2 GPU catalog, mixes of 2 types,
up to 64 nodes, both markets. Prints candidates, seconds, candidates/s, then times the CLI end to end.

Usage: python scripts/bench_recommend.py [--profile profiles/local/cnn_resnet.json] [--max-nodes 64]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default=str(ROOT / "profiles/local/cnn_resnet.json"))
    ap.add_argument("--max-nodes", type=int, default=64)
    ap.add_argument("--model", default=None, help="skops model file, 'simulator', or default (cached model)")
    a = ap.parse_args()

    from srifty import solver
    from srifty.catalog import Catalog

    cat = Catalog.default()
    job, mcat = solver.load_inputs([a.profile], cat)
    oracle = solver.ModelOracle(job, mcat, solver.load_predictor(a.model, print))
    cons = solver.Constraints(budget_per_hour=100.0, max_nodes=a.max_nodes)
    r = solver.solve(oracle, cat, cons)  # first solve: runs the latency model over the grid
    t = time.perf_counter()
    r2 = solver.solve(solver.CachedOracle(lambda: oracle, {"bench": a.profile, "n": a.max_nodes},
                                          oracle.default_local_batch()), cat, cons)
    r2 = solver.solve(solver.CachedOracle(lambda: oracle, {"bench": a.profile, "n": a.max_nodes},
                                          oracle.default_local_batch()), cat, cons)
    compose = r2.solve_seconds - r2.model_seconds
    print(f"latency model: {r.model_rows:,} distinct rows in {r.model_seconds:.2f} s")
    print(f"candidates evaluated and ranked: {r2.candidates_evaluated:,} (feasible {r2.feasible:,}); "
          f"pruned offers: {len(r2.pruned_offers)}")
    print(f"compose + constrain + rank + Pareto: {compose:.3f} s -> {r2.candidates_evaluated / compose:,.0f} candidates/s")
    print(f"full solve with the model run: {r.solve_seconds:.2f} s; with cached model figures: {r2.solve_seconds:.2f} s")
    del t
    cmd = [str(ROOT / ".venv/bin/srifty"), "recommend", "--profile", a.profile, "--budget", "12",
           "--min-throughput", "800", "--json"]
    for label in ("run 1 (model loaded unless its figures are cached)", "run 2 (prediction cache warm)"):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        print(f"end to end `{' '.join(cmd[1:])}` [{label}]: {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()

"""Benchmark of `srifty recommend` (make bench): the full EC2 GPU catalog, mixes of 2 types,
up to 64 nodes, both markets.

Prints, for the solver: offers, offers pruned (exactly: see docs/recommend.md), candidates
evaluated against the constraints, seconds to compose + constrain + rank + Pareto (the latency
model's figures held in memory, so the model is timed separately), candidates/s; the same
without pruning (the unpruned candidate space). Then times the CLI end to end from process
start: `--help`, a first run as after a fresh install (empty cache directory: the model shipped
with srifty is loaded, or trained once when this installation's library versions differ), and
a warm run (prediction cache hit).

Usage: python scripts/bench_recommend.py [--profile profiles/local/cnn_resnet.json] [--max-nodes 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class _Memo:
    """The oracle's figures computed once, then served from memory (so that solve times exclude the model)."""

    def __init__(self, inner):
        self.inner, self.memo, self.notes = inner, {}, []

    def default_local_batch(self):
        return self.inner.default_local_batch()

    def predict_rows(self, rows):
        key = rows[["instance_type", "workers_per_node", "nodes", "local_batch_size"]].to_csv(index=False)
        if key not in self.memo:
            self.memo[key] = self.inner.predict_rows(rows)
        return self.memo[key].copy()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="profiles/local/cnn_resnet.json")
    ap.add_argument("--max-nodes", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--model", default=None, help="model file from srifty fit, 'simulator', or default (cached model)")
    a = ap.parse_args()

    from srifty import oracle as oracles
    from srifty import solver
    from srifty.catalog import Catalog

    cat = Catalog.default()
    job, mcat = oracles.load_inputs([a.profile], cat)
    oracle = _Memo(oracles.ModelOracle(job, mcat, oracles.load_predictor(a.model, print)))
    print(f"machine: {os.cpu_count()} CPUs; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for n_max in sorted({16, a.max_nodes}):
        cons = solver.Constraints(budget_per_hour=100.0, max_nodes=n_max)
        t = time.perf_counter()
        r = solver.solve(oracle, cat, cons)  # first solve: runs the latency model over the grid
        if n_max == a.max_nodes:
            print(f"latency model: {r.model_rows:,} distinct rows in {r.model_seconds:.2f} s "
                  f"(first solve {time.perf_counter() - t:.2f} s)")
        for prune in (True, False):
            times, res = [], None
            for _ in range(a.repeat):
                res = solver.solve(oracle, cat, cons, prune=prune)
                times.append(res.solve_seconds - res.model_seconds)
            best, med = min(times), statistics.median(times)
            print(f"--max-nodes {n_max} {'pruned  ' if prune else 'unpruned'}: "
                  f"{res.candidates_evaluated:,} candidates evaluated (feasible {res.feasible:,}; "
                  f"{len(res.pruned_offers)} offers pruned); compose+constrain+rank+Pareto "
                  f"{med:.3f} s median, {best:.3f} s best of {a.repeat} -> {res.candidates_evaluated / med:,.0f} candidates/s; "
                  f"chosen {res.chosen.config}")

    srifty = str(ROOT / ".venv/bin/srifty")
    cmd = [srifty, "recommend", "--profile", a.profile, "--budget", "12", "--min-throughput", "800", "--json"]

    def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, env=env)
        return time.perf_counter() - t0

    print(f"end to end `srifty recommend --help`: {timed([srifty, 'recommend', '--help']):.2f} s")
    from srifty import model as model_mod

    shipped = model_mod.shipped_model()
    how = "the shipped model loaded" if shipped else "no usable shipped model: trained once"
    for argv in (cmd, cmd + ["--max-nodes", str(a.max_nodes)]):
        with tempfile.TemporaryDirectory() as cache:  # a fresh install: nothing cached, no SRIFTY_MODEL
            env = {k: v for k, v in os.environ.items() if k != "SRIFTY_MODEL"}
            env["SRIFTY_CATALOG_DIR"] = cache
            cold = timed(argv, env)
            warm = [timed(argv, env) for _ in range(3)]
        shown = " ".join(argv[1:])
        print(f"end to end `{shown}` cold, the first run on this profile (empty cache; {how}): {cold:.2f} s")
        print(f"end to end `{shown}` warm (prediction cache hit): {statistics.median(warm):.2f} s median of 3")


if __name__ == "__main__":
    main()

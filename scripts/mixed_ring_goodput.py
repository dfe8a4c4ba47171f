#!/usr/bin/env python3
"""Goodput of the slowest link in each emulated allreduce sweep of some directories (default:
profiles/emulated-mixed-rings and the corpus's profiles/emulated/collectives): the ring
formula's 2(p - 1)/p x bytes over the slowest configured link rate, divided by the measured
median time. One row per sweep (averaged over its messages of at least --min-mib), with how
many hosts sit at the slowest rate; or, with --by-class, the median over the sweeps of each
class (slowest rate; one rate, mixed with one host at the slowest, mixed with two or more) at
each message size of at least 1 MiB.

    python scripts/mixed_ring_goodput.py [DIR ...] [--min-mib 4] [--by-class] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from srifty.errors import run_script  # noqa: E402
from srifty.features import mixed_ring_slowest_hosts  # noqa: E402
from srifty.profile import load  # noqa: E402

DEFAULT_DIRS = (ROOT / "profiles" / "emulated-mixed-rings", ROOT / "profiles" / "emulated" / "collectives")
CLASSES = {0: "one rate", 1: "mixed, one host at the slowest rate", 2: "mixed, two or more at the slowest rate"}


def goodputs(doc: dict, min_bytes: int) -> dict | None:
    """The slowest link's goodput at each of one sweep's messages of ``min_bytes`` or more
    (None: not a sweep across 2+ hosts, or no such message)."""
    hosts = (doc.get("cluster") or {}).get("hosts") or []
    rates = [float(h["spec"]["bandwidth_mbit"]) for h in hosts]
    p = len(rates)
    big = [q for q in doc.get("collectives") or [] if q.get("op", "allreduce") == "allreduce" and q["bytes"] >= min_bytes]
    if p < 2 or not big:
        return None
    k = mixed_ring_slowest_hosts(rates)
    return {"config": doc["cluster"]["config"], "hosts": p, "slowest_mbit": min(rates),
            "at_slowest": k or p, "mixed": k > 0, "class": CLASSES[min(k, 2)],
            "oversubscribed": bool(doc["cluster"].get("network", {}).get("oversubscribed")),
            "by_bytes": {int(q["bytes"]): 2 * (p - 1) / p * q["bytes"] * 8 / (min(rates) * 1e6) / (q["median_ms"] / 1e3)
                         for q in big}}


def ring_goodput(doc: dict, min_bytes: int) -> dict | None:
    """:func:`goodputs` averaged over the sweep's sizes (``goodput``, ``sizes``)."""
    r = goodputs(doc, min_bytes)
    if r is None:
        return None
    per = list(r.pop("by_bytes").values())
    return {**r, "goodput": sum(per) / len(per), "sizes": len(per)}


def by_class(sweeps: list[dict]) -> list[dict]:
    """Median goodput over the sweeps of each (slowest rate, class, message size), with their count."""
    groups: dict[tuple[float, str, int], list[float]] = {}
    for s in sweeps:
        for b, g in s["by_bytes"].items():
            groups.setdefault((s["slowest_mbit"], s["class"], b), []).append(g)
    order = {c: i for i, c in enumerate(CLASSES.values())}
    return [{"slowest_mbit": m, "class": c, "mib": b / 2**20, "goodput": statistics.median(v), "sweeps": len(v)}
            for (m, c, b), v in sorted(groups.items(), key=lambda kv: (kv[0][0], order[kv[0][1]], kv[0][2]))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="*", default=[str(d) for d in DEFAULT_DIRS])
    ap.add_argument("--min-mib", type=float, default=4.0)
    ap.add_argument("--by-class", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    files = sorted(f for d in args.dirs for f in Path(d).glob("*.json"))
    docs = [load(f).doc for f in files]
    if args.by_class:
        rows = by_class([s for d in docs if (s := goodputs(d, 1 << 20)) is not None])
        if args.json:
            print(json.dumps(rows, indent=1))
            return 0
        print(f"{'slowest':>8s}  {'ring':40s} {'MiB':>4s} {'goodput':>8s} {'sweeps':>6s}")
        for r in rows:
            print(f"{r['slowest_mbit']:8.0f}  {r['class']:40s} {r['mib']:4.0f} {r['goodput']:8.3f} {r['sweeps']:6d}")
        return 0
    rows = [r for d in docs if (r := ring_goodput(d, int(args.min_mib * 2**20))) is not None]
    rows.sort(key=lambda r: (r["slowest_mbit"], r["mixed"], r["at_slowest"] / r["hosts"], r["config"]))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'configuration':36s} {'hosts':>5s} {'slowest':>8s} {'at it':>5s} {'goodput':>8s}")
    for r in rows:
        flag = " (oversubscribed)" if r["oversubscribed"] else ""
        print(f"{r['config']:36s} {r['hosts']:5d} {r['slowest_mbit']:8.0f} {r['at_slowest']:5d} {r['goodput']:8.3f}{flag}")
    return 0


if __name__ == "__main__":
    run_script(main)

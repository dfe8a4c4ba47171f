#!/usr/bin/env python3
"""Goodput of the slowest link in each allreduce sweep of a directory (default:
profiles/emulated-mixed-rings): for messages of at least --min-mib, the ring formula's
2(p - 1)/p x bytes over the slowest configured link rate, divided by the measured median time,
averaged over those sizes. One row per sweep, with how many hosts sit at the slowest rate.

    python scripts/mixed_ring_goodput.py [DIR] [--min-mib 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from srifty.errors import run_script  # noqa: E402
from srifty.profile import load  # noqa: E402


def ring_goodput(doc: dict, min_bytes: int) -> dict | None:
    """The slowest link's goodput implied by one sweep's large messages (None: no such message)."""
    hosts = doc["cluster"]["hosts"]
    p = len(hosts)
    rates = sorted(float(h["spec"]["bandwidth_mbit"]) for h in hosts)
    big = [q for q in doc.get("collectives") or [] if q.get("op", "allreduce") == "allreduce" and q["bytes"] >= min_bytes]
    if p < 2 or not big:
        return None
    per = [2 * (p - 1) / p * q["bytes"] * 8 / (rates[0] * 1e6) / (q["median_ms"] / 1e3) for q in big]
    return {"config": doc["cluster"]["config"], "hosts": p, "slowest_mbit": rates[0],
            "at_slowest": sum(1 for r in rates if r == rates[0]), "mixed": rates[0] != rates[-1],
            "oversubscribed": bool(doc["cluster"].get("network", {}).get("oversubscribed")),
            "goodput": sum(per) / len(per), "sizes": len(per)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", nargs="?", default=str(ROOT / "profiles" / "emulated-mixed-rings"))
    ap.add_argument("--min-mib", type=float, default=4.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [r for f in sorted(Path(args.dir).glob("*.json"))
            if (r := ring_goodput(load(f).doc, int(args.min_mib * 2**20))) is not None]
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

"""Traffic shaping of the hosts' links, and reading back what a link has.

Each host's link is shaped by ``tc`` tbf at both ends of its veth (the host's ``emu0`` for
host -> switch, its switch port for switch -> host). The lifecycle applies it
(:func:`srifty.cluster.lifecycle.up`) and checks it (``verify``); ``status`` describes it.
"""

from __future__ import annotations

import json
from typing import Any

from srifty.cluster import system

TBF_LATENCY_MS = 25  # queue bound of the tbf shaper (bytes of queue = rate x this)


def tbf_burst_bytes(bandwidth_mbit: float) -> int:
    """Token bucket depth: 2 ms of traffic, at least 16 KiB (ten full frames)."""
    return max(16 * 1024, int(bandwidth_mbit * 1e6 / 8 * 0.002))


def _tbf(netns: str, dev: str, mbit: float) -> None:
    system.sh(["tc", "-n", netns, "qdisc", "replace", "dev", dev, "root", "tbf",
               "rate", f"{int(round(mbit * 1000))}kbit", "burst", str(tbf_burst_bytes(mbit)),
               "latency", f"{TBF_LATENCY_MS}ms"])


def _addresses(ns: str, dev: str) -> list[str]:
    proc = system.sh(["ip", "-n", ns, "-j", "addr", "show", "dev", dev], check=False)
    if proc.returncode != 0:
        return []
    try:
        return [a["local"] for link in json.loads(proc.stdout) for a in link.get("addr_info", [])]
    except (ValueError, KeyError):
        return []


def _qdisc(ns: str, dev: str) -> dict[str, Any] | None:
    proc = system.sh(["tc", "-n", ns, "-j", "qdisc", "show", "dev", dev], check=False)
    if proc.returncode != 0:
        return None
    try:
        roots = [q for q in json.loads(proc.stdout) if q.get("root")]
    except ValueError:
        return None
    return roots[0] if roots else None


def _fmt_qdisc(q: dict[str, Any] | None) -> str:
    if q is None:
        return "none"
    opts = q.get("options", {})
    if q.get("kind") == "tbf":
        return f"tbf {opts.get('rate', 0) * 8 / 1e6:g} Mbit/s burst {opts.get('burst')} B"
    return str(q.get("kind"))

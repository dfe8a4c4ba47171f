"""scripts/mixed_ring_goodput.py: the slowest link's goodput implied by an allreduce sweep,
on a hand-made sweep and on the committed ones."""

from __future__ import annotations

import importlib.util

import pytest

from conftest import ROOT

spec = importlib.util.spec_from_file_location("mixed_ring_goodput", ROOT / "scripts" / "mixed_ring_goodput.py")
mrg = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mrg)


def _sweep(rates: list[float], points: list[tuple[int, float]]) -> dict:
    hosts = [{"instance_type": f"t{r:g}", "spec": {"bandwidth_mbit": r}} for r in rates]
    return {"cluster": {"config": "+".join(f"1xt{r:g}" for r in rates), "hosts": hosts, "network": {}},
            "collectives": [{"op": "allreduce", "bytes": b, "median_ms": ms} for b, ms in points]}


def test_goodput_of_the_slowest_link() -> None:
    # three hosts, two at 50 Mbit/s: 8 MiB moves 2(3-1)/3 x 8 MiB through the slowest link;
    # at exactly 50 Mbit/s that takes 1789.6 ms, so 2236.96 ms is a goodput of 0.8
    eight = 8 << 20
    ideal_ms = 2 * 2 / 3 * eight * 8 / 50e6 * 1e3
    r = mrg.ring_goodput(_sweep([50, 50, 200], [(1 << 20, 10.0), (eight, ideal_ms / 0.8)]), min_bytes=4 << 20)
    assert r["goodput"] == pytest.approx(0.8) and r["sizes"] == 1  # the 1 MiB point is below the threshold
    assert (r["hosts"], r["slowest_mbit"], r["at_slowest"], r["mixed"]) == (3, 50, 2, True)
    assert mrg.ring_goodput(_sweep([50, 50, 200], [(1 << 20, 10.0)]), min_bytes=4 << 20) is None
    assert mrg.ring_goodput(_sweep([200, 200], [(eight, 400.0)]), min_bytes=4 << 20)["mixed"] is False


def test_goodput_by_class_is_the_median_over_each_class_and_size() -> None:
    eight = 8 << 20
    ideal_ms = 2 * 2 / 3 * eight * 8 / 50e6 * 1e3  # three hosts, slowest at 50 Mbit/s
    sweeps = [mrg.goodputs(_sweep(rates, [(eight, ideal_ms / g)]), 1 << 20)
              for rates, g in (([50, 50, 200], 0.7), ([50, 50, 800], 0.8), ([50, 50, 400], 0.75),
                               ([50, 200, 200], 0.9), ([50, 50, 50], 0.95))]
    rows = mrg.by_class(sweeps)
    assert [(r["class"], r["sweeps"]) for r in rows] == [("one rate", 1), ("mixed, one host at the slowest rate", 1),
                                                         ("mixed, two or more at the slowest rate", 3)]
    assert [r["goodput"] for r in rows] == pytest.approx([0.95, 0.9, 0.75])
    assert all(r["mib"] == 8 and r["slowest_mbit"] == 50 for r in rows)


def test_the_committed_sweeps_are_below_their_link_rate() -> None:
    from srifty.profile import load

    files = sorted((ROOT / "profiles" / "emulated-mixed-rings").glob("*.json"))
    assert len(files) >= 30
    for f in files:
        r = mrg.ring_goodput(load(f).doc, min_bytes=4 << 20)
        assert r is not None and 0.5 < r["goodput"] < 1.0, f.name  # no sweep beats its configured rate

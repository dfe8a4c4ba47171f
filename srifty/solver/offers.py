"""What can be rented, and the latency model's figures for it.

:func:`build_offers`: every catalog instance type that passes the filters in each market it is
sold in, with its price and interruption rate (:class:`Offers`). :func:`_grid`: the homogeneous
grid (type, workers per node, nodes, per-worker batch) predicted once by the
:class:`srifty.oracle.ThroughputOracle`, leaving out a type it cannot predict, with each type's
compute at more batches for the mixes.
:func:`_goodput_into`: spot goodput, interruptions discounted.
"""

from __future__ import annotations

import fnmatch
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from srifty.catalog import Market
from srifty.errors import SriftyError
from srifty.oracle import ThroughputOracle
from srifty.solver.constraints import Constraints

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd


@dataclass
class Offers:
    """Instance types × markets with prices (arrays aligned by offer index)."""

    instance_type: list[str]
    market: list[Market]
    price: "np.ndarray"
    rate: "np.ndarray"  # interruptions per node-hour (0 on-demand)
    slots: "np.ndarray"  # workers per node (all GPUs)


def build_offers(catalog: Any, c: Constraints) -> tuple[Offers, list[str]]:
    """Every (type, market) the filters allow, with its price in the region. Spot offers are
    always built (the --no-spot choice is a constraint, so that relaxations can name it)."""
    import numpy as np

    df = catalog.df
    region = c.region or catalog.default_region
    rows = df[df["region"] == region]
    if rows.empty:
        regions = sorted(r for r in set(df["region"]) if r)
        from srifty.catalog import did_you_mean

        raise SriftyError(f"The catalog has no prices in region {region!r}.{did_you_mean(region, regions)}",
                          f"Regions it knows: {', '.join(regions[:12])}{' …' if len(regions) > 12 else ''}.")
    emulated = getattr(getattr(catalog, "source", None), "kind", "") == "emulated"
    if not emulated:
        rows = rows[(rows["gpu_count"].fillna(0) > 0) & (rows["gpu_name"].fillna("") != "")]
    if c.instance_types:
        globs = [g.strip() for g in c.instance_types.split(",") if g.strip()]
        rows = rows[[any(fnmatch.fnmatch(t, g) for g in globs) for t in rows["instance_type"]]]
        if rows.empty:
            raise SriftyError(f"No instance type in region {region} matches --instance-types {c.instance_types!r}.",
                              "See the names with `srifty catalog list`.")
    notes: list[str] = []
    types, markets, price, rate, slots = [], [], [], [], []
    for r in rows.itertuples(index=False):
        wpn = int(r.gpu_count) if not emulated and r.gpu_count == r.gpu_count else int(catalog.get(r.instance_type).workers_per_node)
        od = r.ondemand_usd_per_hour
        if od == od and od is not None and od > 0:
            types.append(r.instance_type); markets.append(Market.ON_DEMAND); price.append(float(od)); rate.append(0.0); slots.append(wpn)
        sp = r.spot_min_usd_per_hour
        if sp == sp and sp is not None and sp > 0:
            lam = r.interruption_per_hour
            if not (lam == lam and lam is not None):
                notes.append(f"{r.instance_type}: no spot interruption rate in the catalog; spot not offered")
                continue
            types.append(r.instance_type); markets.append(Market.SPOT); price.append(float(sp)); rate.append(float(lam)); slots.append(wpn)
    if not types:
        raise SriftyError(f"No instance type with a price in region {region} passes the filters.",
                          "Relax --instance-types or choose another --region.")
    return Offers(types, markets, np.array(price), np.array(rate), np.array(slots, dtype=int)), notes


def _goodput_into(out: "np.ndarray", raw: "np.ndarray", rate: "np.ndarray", ckpt: float) -> None:
    """Spot goodput, in place: out = raw × clip(1 − rate·ckpt, 0, 1), ckpt = restart overhead + checkpoint interval / 2."""
    import numpy as np

    np.multiply(rate, -ckpt, out=out)
    out += 1.0
    np.clip(out, 0.0, 1.0, out=out)
    out *= raw


def curve_batches(c: Constraints, b_ref: float) -> list[float]:
    """The per-worker batches at which each type's compute is also predicted, on one full node, so
    that a mix equalises its two types' compute on their curves (``space.MixCurves``): powers of
    two from 1 to the global batch, or to 64 times the reference batch without one."""
    top = float(c.global_batch_size) if c.global_batch_size else 64.0 * b_ref
    return [2.0 ** k for k in range(0, int(math.log2(top)) + 1)]


def _grid(oracle: ThroughputOracle, offers: Offers, c: Constraints, notes: list[str]
          ) -> tuple["pd.DataFrame", "pd.DataFrame", float]:
    """The homogeneous model grid, one row per distinct (type, workers per node, nodes, batch), and,
    where mixes are composed, each type's compute on one full node at :func:`curve_batches` (what
    they are split on)."""
    import numpy as np
    import pandas as pd

    t0 = time.perf_counter()
    b_ref = c.local_batch_size or oracle.default_local_batch()
    more = curve_batches(c, b_ref) if c.mixes and len(set(offers.instance_type)) >= 2 else []
    rows = []
    for t, slots in sorted(set(zip(offers.instance_type, offers.slots.tolist()))):
        for w in range(1, slots + 1):
            for n in range(1, c.max_nodes + 1):
                b = c.global_batch_size / (w * n) if c.global_batch_size else b_ref
                rows.append((t, w, n, float(b), False))
        rows += [(t, slots, 1, b, True) for b in more]
    grid = pd.DataFrame(rows, columns=["instance_type", "workers_per_node", "nodes", "local_batch_size", "curve"])

    def none_left() -> SriftyError:
        return SriftyError("The latency model cannot predict any instance type that passes the filters.",
                           " ".join(notes[:3]))

    if hasattr(oracle, "unpredictable"):  # types nothing carries the job's compute to: said and left out first
        skip = oracle.unpredictable(sorted(set(grid["instance_type"])), b_ref)
        notes.extend(f"{t} left out: {why}" for t, why in skip.items())
        grid = grid[~grid["instance_type"].isin(list(skip))].reset_index(drop=True)
        if grid.empty:
            first, why = next(iter(skip.items()))
            if len(skip) > 1 and all(w.replace(t, first) == why for t, w in skip.items()):  # one reason for all
                raise SriftyError(f"The latency model cannot predict any of the {len(skip)} instance types that "
                                  f"pass the filters, for one reason. For {first}: {why}")
            raise none_left()
    try:
        out = oracle.predict_rows(grid)
    except SriftyError:  # some type cannot be predicted: find which, say so, go on without it
        keep_types = []
        for t in sorted(set(grid["instance_type"])):
            try:
                oracle.predict_rows(grid[grid["instance_type"] == t].head(1))
                keep_types.append(t)
            except SriftyError as exc:
                notes.append(f"{t} left out: {exc}")  # the reason and what to do, as above
        grid = grid[grid["instance_type"].isin(keep_types)].reset_index(drop=True)
        if grid.empty:
            raise none_left() from None
        out = oracle.predict_rows(grid)
    curve = out[out["curve"]].drop(columns="curve").reset_index(drop=True)
    out = out[~out["curve"]].drop(columns="curve").reset_index(drop=True)
    out["world"] = out["workers_per_node"] * out["nodes"]
    out["throughput"] = out["world"] * out["local_batch_size"] / (out["iteration_ms"] / 1e3)
    out["overhead_ms"] = np.maximum(out["iteration_ms"] - out["compute_ms"], 0.0)
    return out, curve, time.perf_counter() - t0

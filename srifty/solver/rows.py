"""Result rows: a candidate index turned into a configuration and its figures, and the
Pareto front.

:func:`_config_text` writes a candidate as a configuration (``2xp3.8xlarge+1xg5.12xlarge@spot``);
:func:`_recommendation` builds its :class:`srifty.solver.results.Recommendation`, with the
batch split and interval of a mix (:func:`mix_rows`: the mixes a solve has the oracle predict as
they are); :func:`_pareto` finds the front of throughput vs $/h.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from srifty.catalog import Market
from srifty.model.predictor import PART_SOURCES, least_certain
from srifty.oracle import MIX_COLUMNS
from srifty.solver.results import Recommendation
from srifty.solver.space import _Space

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd


def _pareto(thr: "np.ndarray", price: "np.ndarray") -> "np.ndarray":
    """Indices of the Pareto front (throughput up, $/h down), in $/h order: a point is kept when its
    throughput beats (by 1e-9) every point before it in ($/h ascending, throughput descending) order.

    A strided sample's front first discards every point that a sample point beats outright (no
    more $/h, strictly more throughput): such a point is dropped by the full scan too and never
    raises its running best, so only the few survivors need the lexsort."""
    import numpy as np

    n = len(thr)
    if n > 20000:
        s = np.arange(0, n, max(1, n // 4096))
        so = np.lexsort((-thr[s], price[s]))
        sp, st = price[s][so], np.maximum.accumulate(thr[s][so])
        # bucket the $/h axis; a point in bucket b is beaten by the best sample point priced at or
        # below the bucket's lower edge (a cheaper-or-equal point) when that one is strictly faster
        lo, hi = float(price.min()), float(price.max())
        nb = 1 << 16
        width = (hi - lo) / nb or 1.0
        edges = lo + width * np.arange(nb)
        pos = np.searchsorted(sp, edges, side="right") - 1
        best = np.where(pos >= 0, st[np.maximum(pos, 0)], -np.inf)
        b = price - lo
        b *= 1.0 / width
        bi = b.astype(np.int32)
        np.clip(bi, 0, nb - 1, out=bi)
        # edges[bi] <= price holds up to rounding; keep a point unless its bucket edge is clearly below it
        safe = edges[bi] <= price
        cand = np.flatnonzero(~((best[bi] > thr) & safe))
    else:
        cand = np.arange(n)
    order = cand[np.lexsort((-thr[cand], price[cand]))]
    t_sorted = thr[order]
    prev_best = np.concatenate(([-np.inf], np.maximum.accumulate(t_sorted)[:-1]))
    return order[t_sorted > prev_best + 1e-9]


def _mix_parts(space: _Space, blk: tuple, k: int) -> tuple[int, int, int, int]:
    q = len(blk[3])
    p, s = divmod(k, q)
    return blk[1], int(blk[2][p]), int(blk[3][s]), int(blk[4][s])


def _config_text(j: int, space: _Space) -> str:
    blk, k = space.locate(j)
    offers = space.offers
    if blk[0] == "hom":
        i = blk[1]
        row = space.grid.loc[blk[2][k]]
        spot = "@spot" if offers.market[i] is Market.SPOT else ""
        wpn = "" if int(row.workers_per_node) == int(offers.slots[i]) else f":{int(row.workers_per_node)}"
        return f"{int(row.nodes)}x{row.instance_type}{wpn}{spot}"
    a, bb, na, nb = _mix_parts(space, blk, k)
    sa = "@spot" if offers.market[a] is Market.SPOT else ""
    sb = "@spot" if offers.market[bb] is Market.SPOT else ""
    return f"{na}x{offers.instance_type[a]}{sa}+{nb}x{offers.instance_type[bb]}{sb}"


@dataclass(frozen=True)
class _MixSplit:
    """A mix candidate's offers, nodes and global batch, split where both types' compute is equal."""

    a: int
    b: int
    nodes_a: int
    nodes_b: int
    global_batch: float
    compute_ms: float  # each type's compute at its share, equalised
    batch_a: float  # per worker
    batch_b: float


def _mix_split(j: int, space: _Space) -> _MixSplit:
    import numpy as np

    blk, k = space.locate(j)
    a, bb, na, nb = _mix_parts(space, blk, k)
    wa, wb = int(space.offers.slots[a]) * na, int(space.offers.slots[bb]) * nb
    gb = float(space.global_batch) if space.global_batch else space.b_ref * (wa + wb)
    tcs, bas, bbs = space.tab.curves.equalised(a, np.array([bb]), np.array([[float(wa)]]),
                                               np.array([[float(wb)]]), gb)
    return _MixSplit(a, bb, na, nb, gb, float(tcs[0, 0]), float(bas[0, 0]), float(bbs[0, 0]))


def _mix_cap(m: _MixSplit, space: _Space) -> float:
    """A mix's most throughput: its two types' nodes each at their own figure, added up."""
    return float(space.tab.cap[m.a, m.nodes_a - 1] + space.tab.cap[m.b, m.nodes_b - 1])


def mix_rows(splits: "Sequence[_MixSplit]", space: _Space) -> "pd.DataFrame":
    """Mixes as rows of srifty.oracle.MIX_COLUMNS: each type's nodes at its share of the global
    batch, for the oracle to predict as they are (ThroughputOracle.predict_mixes)."""
    import pandas as pd

    offers = space.offers
    return pd.DataFrame([(offers.instance_type[m.a], int(offers.slots[m.a]), m.nodes_a, m.batch_a,
                          offers.instance_type[m.b], int(offers.slots[m.b]), m.nodes_b, m.batch_b) for m in splits],
                        columns=list(MIX_COLUMNS))


def _recommendation(j: int, space: _Space, cat: dict[str, "np.ndarray"], hours: "np.ndarray | None",
                    usd_total: "np.ndarray | None") -> Recommendation:
    """Candidate ``j``'s row. A mix the oracle predicted as it is (``space.direct``) takes that
    prediction's interval, compute and sources; one it did not, those composed of its two types'."""
    blk, k = space.locate(j)
    offers, grid = space.offers, space.grid
    config = _config_text(j, space)
    if blk[0] == "hom":
        i = blk[1]
        row = grid.loc[blk[2][k]]
        market = offers.market[i].value
        split = {str(row.instance_type): float(row.local_batch_size)}
        gb = float(row.local_batch_size * row.world)
        it, lo, hi, source = float(row.iteration_ms), float(row.interval_low_ms), float(row.interval_high_ms), str(row.source)
        mixed, gpus, nodes = False, int(row.world), int(row.nodes)
        compute = float(row.compute_ms)
        sources = {part: str(row[part]) for part in PART_SOURCES if part in grid.columns}
        carried = [str(row.compute_transfer)] if "compute_transfer" in grid.columns else []
        prior = [str(row.instance_type)] if nodes > 1 and sources.get("network_source") == "prior" else []
        memory = _memory_gib(grid.loc[[blk[2][k]]], split)
    else:
        m = _mix_split(j, space)
        a, bb, na, nb, gb = m.a, m.b, m.nodes_a, m.nodes_b, m.global_batch
        ta, tb = offers.instance_type[a], offers.instance_type[bb]
        ma, mb = offers.market[a], offers.market[bb]
        market = ma.value if ma is mb else "mixed"
        split = {ta: m.batch_a, tb: m.batch_b}
        total = na + nb
        rows = space.grid_rows(total, (ta, offers.slots[a]), (tb, offers.slots[bb]))
        it = float(gb / cat["raw"][j] * 1e3)  # after the sum-of-parts cap
        mixed, gpus, nodes = True, int(offers.slots[a]) * na + int(offers.slots[bb]) * nb, total
        direct = space.direct.get(j)
        if direct is not None:  # predicted as it is: its own interval, compute and sources
            rel_lo = float(direct["interval_low_ms"] / direct["iteration_ms"])
            rel_hi = float(direct["interval_high_ms"] / direct["iteration_ms"])
            source, compute = str(direct["source"]), float(direct["compute_ms"])
            sources = {part: str(direct[part]) for part in PART_SOURCES if part in direct.index}
            carried = [str(direct["compute_transfer"])] if "compute_transfer" in direct.index else []
        else:
            rel_lo, rel_hi = _composed_interval(space, rows, m, split)
            srcs = space.type_sources.get(ta, set()) | space.type_sources.get(tb, set())
            source = "transferred" if "transferred" in srcs else "predicted"
            compute = m.compute_ms  # each type's compute at its share of the batch, equalised
            # the less certain of the two types' sources; the split's batches were not profiled as such
            sources = {part: least_certain(part, [str(v) for v in rows[part]]
                                           + (["profiled-other-batch"] if part == "compute_source" else []))
                       for part in PART_SOURCES if part in grid.columns}
            carried = [str(v) for v in rows["compute_transfer"]] if "compute_transfer" in grid.columns else []
        lo, hi = it * rel_lo, it * rel_hi
        prior = [t for t in (ta, tb) if sources.get("network_source") == "prior"
                 and (rows.loc[rows["instance_type"] == t, "network_source"] == "prior").any()]
        memory = _memory_gib(rows, split)
    thr_j, price_j = float(cat["thr"][j]), float(cat["price"][j])
    return Recommendation(
        config=config, market=market, gpus=gpus, nodes=nodes, batch_split=split,
        global_batch=gb, iteration_ms=it, interval_ms=(lo, hi), throughput_samples_per_s=thr_j,
        raw_throughput_samples_per_s=float(cat["raw"][j]), usd_per_hour=price_j,
        usd_per_million_samples=price_j / (thr_j * 3600.0) * 1e6 if thr_j > 0 else math.inf,
        interruptions_per_hour=float(cat["rate"][j]), source=source,
        mixed=mixed, hours_to_finish=float(hours[j]) if hours is not None else None,
        usd_to_finish=float(usd_total[j]) if usd_total is not None else None,
        parts=_parts(it, compute, sources, carried), network_prior_types=prior, memory_gib=memory,
        composed=mixed and j not in space.direct)


def _composed_interval(space: _Space, rows: "pd.DataFrame", m: _MixSplit, split: dict[str, float]
                       ) -> tuple[float, float]:
    """A mix's interval over its figure, from its two types' rows at its node count: the wider of
    theirs, and where a share leaves the batches profiled, its compute's bounds there
    (ComputeCurve.bounds: the equalised step lies within the slower type's)."""
    rel_lo = float((rows["interval_low_ms"] / rows["iteration_ms"]).min())
    rel_hi = float((rows["interval_high_ms"] / rows["iteration_ms"]).max())
    lows, highs = [1.0], [1.0]
    for o, share in ((m.a, m.batch_a), (m.b, m.batch_b)):
        b0, b1 = space.tab.profiled[o]
        if b1 and share > b1:
            lows.append(b1 / share)
        elif b0 and 0 < share < b0:  # none of the batch: the type's workers step at its floor
            highs.append(b0 / share)
    return min(rel_lo, max(lows)), max(rel_hi, max(highs))


def _memory_gib(rows: "pd.DataFrame", split: dict[str, float]) -> dict[str, float]:
    """One worker's tensor memory per type at its share of the batch, from the grid ``rows`` of
    those types (their memory line; none where the oracle gives none or the job's is unknown)."""
    if "memory_fixed_gib" not in rows.columns:
        return {}
    types = list(rows["instance_type"])
    fixed, per_sample = (rows[c].to_numpy(dtype=float) for c in ("memory_fixed_gib", "memory_per_sample_gib"))
    out = {}
    for t, b in split.items():
        first = types.index(t) if t in types else None
        if first is not None and not math.isnan(fixed[first]):
            out[t] = round(float(fixed[first] + per_sample[first] * b), 4)
    return out


def _parts(iteration_ms: float, compute_ms: float, sources: dict[str, str], carried: list[str]) -> dict[str, Any]:
    """A recommendation's step as srifty.model.PredictionTable.parts gives a prediction's: the
    slowest worker's compute alone and the rest, with the sources the oracle gave (``carried``:
    its rows' compute_transfer, comma-separated; a transferred one lists how, in the order seen)."""
    out: dict[str, Any] = {"compute_ms": round(compute_ms, 4),
                           "communication_ms": round(max(iteration_ms - compute_ms, 0.0), 4), **sources}
    if sources.get("compute_source") is not None:
        methods = [m for text in carried for m in text.split(",") if m]
        out["compute_transfer"] = list(dict.fromkeys(methods)) if sources["compute_source"] == "transferred" else None
    return out

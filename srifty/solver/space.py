"""The search space: per-offer figures, exact pruning of dominated offers, capacity limits.

:func:`_offer_table` gathers what composing needs per offer from the model grid
(:class:`_OfferTable`); :func:`dominance` and :func:`_prune` drop an offer only when another can
stand in for it in every candidate (the argument is in docs/recommend.md); :class:`_Space`
locates a candidate index in the composed blocks. :func:`_capacity_units` and
:func:`exceeded_limits` count nodes against node and quota limits (srifty.capacity).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from srifty.capacity import CapacityLimit
from srifty.catalog import Market
from srifty.solver.offers import Offers

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd


@dataclass
class _OfferTable:
    """Per-offer figures the composition needs (arrays aligned by offer index; full nodes = every slot used)."""

    cap: "np.ndarray"  # offers × N: raw throughput of n full nodes (samples/s)
    over: "np.ndarray"  # offers × N: communication overhead (ms) at n nodes
    speed: "np.ndarray"  # per-worker samples/ms from one full node's compute at its batch
    profiled: "np.ndarray"  # offers × 2: the least and most batch its compute was measured at (0: none)
    hom: "np.ndarray"  # offers × (max slots) × N: raw throughput of n nodes with w workers each (nan: no row)
    rows: dict[int, "np.ndarray"]  # offer -> grid index of its homogeneous rows
    valid: "np.ndarray"
    # the most per-worker batch one worker can hold in the offer's GPU memory (inf: unbounded)
    max_batch: "np.ndarray"


def _offer_table(offers: Offers, grid: "pd.DataFrame", N: int) -> _OfferTable:
    import numpy as np

    k = len(offers.instance_type)
    wmax = int(offers.slots.max())
    cap = np.zeros((k, N)); over = np.zeros((k, N)); speed = np.zeros(k); profiled = np.zeros((k, 2))
    hom = np.full((k, wmax, N), np.nan)
    valid = np.zeros(k, bool)
    max_batch = np.full(k, np.inf)
    g_max = grid["max_fitting_batch"].to_numpy(dtype=float) if "max_fitting_batch" in grid.columns else None
    by_type = grid.groupby("instance_type", sort=False).indices
    g_w = grid["workers_per_node"].to_numpy(); g_n = grid["nodes"].to_numpy()
    g_thr = grid["throughput"].to_numpy(dtype=float); g_over = grid["overhead_ms"].to_numpy(dtype=float)
    g_cmp = grid["compute_ms"].to_numpy(dtype=float); g_lb = grid["local_batch_size"].to_numpy(dtype=float)
    g_prof = (grid[["profiled_batch_low", "profiled_batch_high"]].to_numpy(dtype=float)
              if "profiled_batch_low" in grid.columns else np.zeros((len(grid), 2)))
    rows: dict[int, np.ndarray] = {}
    for i, t in enumerate(offers.instance_type):
        idx = by_type.get(t)
        if idx is None:
            continue
        idx = idx[np.lexsort((g_n[idx], g_w[idx]))]
        full = idx[g_w[idx] == offers.slots[i]]
        if len(full) != N:
            continue
        valid[i] = True
        rows[i] = idx
        cap[i] = g_thr[full]; over[i] = g_over[full]
        speed[i] = g_lb[full[0]] / g_cmp[full[0]]
        profiled[i] = g_prof[full[0]]
        if g_max is not None:
            max_batch[i] = g_max[full[0]]
        hom[i, g_w[idx] - 1, g_n[idx] - 1] = g_thr[idx]
    return _OfferTable(cap, over, speed, profiled, hom, rows, valid, max_batch)


def dominance(offers: Offers, tab: _OfferTable) -> "np.ndarray":
    """``D[j, i]``: offer j dominates offer i, i.e. j can stand in for i in every candidate
    (homogeneous or mixed) and the result is at least as good on every figure any objective or
    constraint looks at — raw throughput, $/h, interruptions/h and the spot flag (see docs/recommend.md).
    Exact ties are broken by index, so D is a strict partial order."""
    import numpy as np

    spot = np.array([m is Market.SPOT for m in offers.market])
    node_speed = offers.slots * tab.speed
    hom = np.where(np.isnan(tab.hom), -np.inf, tab.hom)
    weak = (tab.valid[:, None] & tab.valid[None, :]
            & (offers.price[:, None] <= offers.price[None, :]) & (offers.rate[:, None] <= offers.rate[None, :])
            & (spot[:, None] <= spot[None, :]) & (offers.slots[:, None] >= offers.slots[None, :])
            & (node_speed[:, None] >= node_speed[None, :])
            & (tab.cap[:, None, :] >= tab.cap[None, :, :]).all(axis=2)
            & (tab.over[:, None, :] <= tab.over[None, :, :]).all(axis=2))
    cand = np.nonzero(weak)
    for j, i in zip(*cand):  # homogeneous rows: every (w, n) that i has, j has at least as fast
        if j == i:
            continue
        if not (hom[j] >= hom[i]).all():
            weak[j, i] = False
    k = len(offers.instance_type)
    idx = np.arange(k)
    return weak & (~weak.T | (idx[:, None] < idx[None, :])) & (idx[:, None] != idx[None, :])


def _prune(offers: Offers, tab: _OfferTable, mixing: bool, limited: "np.ndarray | None" = None) -> "np.ndarray":
    """Keep-mask over offers. An offer is dropped when dominated (see :func:`dominance`) and, if mixes
    are composed, when its dominators can replace it next to any partner: some dominator is of its own
    type (other market), or they span two types (a partner can share the type of at most one). An
    offer under a capacity limit (``limited``) stands in for no other: it may not have the nodes."""
    import numpy as np

    D = dominance(offers, tab)
    if limited is not None:
        D[limited, :] = False
    types = np.array(offers.instance_type, dtype=object)
    keep = tab.valid.copy()
    for i in np.nonzero(tab.valid)[0]:
        dom = np.nonzero(D[:, i])[0]
        if len(dom) == 0:
            continue
        dtypes = set(types[dom])
        if not mixing or types[i] in dtypes or len(dtypes) >= 2:
            keep[i] = False
    return keep


@dataclass
class _Space:
    """The composed candidates: homogeneous blocks, then one mix block per first offer (A)."""

    offers: Offers
    tab: _OfferTable
    grid: "pd.DataFrame"
    blocks: list[tuple]  # ("hom", offer, grid index) | ("mix", A, B array, nA, nB)
    starts: "np.ndarray"  # first candidate index of each block
    b_ref: float
    global_batch: int | None

    def locate(self, j: int) -> tuple[tuple, int]:
        import numpy as np

        b = int(np.searchsorted(self.starts, j, side="right") - 1)
        return self.blocks[b], int(j - self.starts[b])


def exceeded_limits(config: str, limits: Sequence["CapacityLimit"]) -> list[str]:
    """The limits a configuration (as ``format_config`` writes it) goes beyond."""
    from srifty.configspec import parse_config

    groups = parse_config(config).groups
    return [lim.what for lim in limits
            if sum(g.count * lim.units.get(g.instance_type, 0.0) for g in groups
                   if (Market.SPOT if g.spot else Market.ON_DEMAND) is lim.market) > lim.limit + 1e-9]


def _capacity_units(offers: Offers, limits: Sequence["CapacityLimit"]) -> tuple["np.ndarray", "np.ndarray"]:
    """(units[g, offer], limit[g]): what one node of each offer counts against each limit (0 where
    it does not), and the limits."""
    import numpy as np

    units = np.array([[lim.units.get(t, 0.0) if m is lim.market else 0.0
                       for t, m in zip(offers.instance_type, offers.market)] for lim in limits], dtype=float)
    return units.reshape(len(limits), len(offers.instance_type)), np.array([lim.limit for lim in limits], dtype=float)

"""The search space: per-offer figures, exact pruning of dominated offers, capacity limits.

:func:`_offer_table` gathers what composing needs per offer from the model grid
(:class:`_OfferTable`); :func:`dominance` and :func:`_prune` drop an offer only when another can
stand in for it in every candidate (the argument is in docs/recommend.md); :class:`_Space`
locates a candidate index in the composed blocks and a ranked row's rows of the grid. :func:`_capacity_units` and
:func:`exceeded_limits` count nodes against node and quota limits (srifty.capacity).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Sequence

from srifty.capacity import CapacityLimit
from srifty.catalog import Market
from srifty.features import ComputeCurve
from srifty.solver.offers import Offers

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd


@dataclass
class MixCurves:
    """Each offer's per-worker batch at a common grid of compute times (ms): the inverse of its
    compute curve on a full node (the model's compute at every batch the grid and its curve rows
    predicted, made non-decreasing in the batch, as ComputeCurve.bounds has it), linear between
    grid times, proportional beyond its largest batch. Below its smallest batch the curve follows
    its first segment's line down to no batch at all (as ComputeCurve.at does, within its bounds):
    a step bound by kernel launches takes about as long at any batch. A mix's two types run at the
    one compute time at which their workers' batches add up to the global batch, and no faster than
    either type's worker takes for one sample (``one_ms``): every worker trains on at least one
    (:meth:`equalised`)."""

    times_ms: "np.ndarray"  # M, increasing
    batch: "np.ndarray"  # offers × M: per-worker batch computed in each time
    one_ms: "np.ndarray"  # offers: the compute time in which one worker computes one sample

    @classmethod
    def from_points(cls, points: Sequence[tuple["np.ndarray", "np.ndarray"] | None], size: int = 256) -> "MixCurves":
        """``points``: per offer (batches, compute ms) on a full node, or None (no rows)."""
        import numpy as np

        curves = []
        for p in points:
            if p is None or not len(p[0]):
                curves.append(None)
                continue
            order = np.argsort(p[0], kind="stable")
            b, t = np.asarray(p[0], dtype=float)[order], np.maximum.accumulate(np.asarray(p[1], dtype=float)[order])
            # no batch: the curve's own rule below its smallest batch (one point: proportional, 0)
            floor = ComputeCurve.from_points(zip(b, t)).at(0.0)
            curves.append((np.concatenate([[0.0], b]), np.concatenate([[floor], t])))
        known = [c for c in curves if c is not None]
        lo = min((float(t[1]) for _, t in known), default=1.0) / 4.0
        hi = max((float(t[-1]) for _, t in known), default=1.0) * 4.0
        times = np.geomspace(max(lo, 1e-9), max(hi, 2 * lo, 1e-6), size)
        batch, one = np.zeros((len(curves), size)), np.zeros(len(curves))
        for i, c in enumerate(curves):
            if c is None:
                continue
            b, t = c
            # strictly increasing times for the inverse (a flat stretch: its largest batch wins)
            t = t + np.arange(len(t)) * 1e-12 * float(t[-1])
            batch[i] = np.where(times > t[-1], b[-1] * times / t[-1], np.interp(times, t, b, left=0.0))
            # one sample on the grid's line (proportional beyond its last time, as ``equalised`` reads it)
            reach = np.flatnonzero(batch[i] >= 1.0)
            if not len(reach):
                one[i] = times[-1] / batch[i][-1]
            elif reach[0] == 0:
                one[i] = times[0] / batch[i][0]
            else:
                k = reach[0]
                w = (1.0 - batch[i][k - 1]) / (batch[i][k] - batch[i][k - 1])
                one[i] = times[k - 1] + w * (times[k] - times[k - 1])
        return cls(times, batch, one)

    def node_batch(self, slots: "np.ndarray") -> "np.ndarray":
        """offers × M: one full node's batch at each compute time."""
        return slots[:, None] * self.batch

    def equalised(self, a: int, Bs: "np.ndarray", workers_a: "np.ndarray", workers_b: "np.ndarray",
                  global_batch: "np.ndarray | float", batches: bool = True
                  ) -> tuple["np.ndarray", "np.ndarray | None", "np.ndarray | None"]:
        """(compute ms, per-worker batch on a, on B): ``workers_a`` workers of offer ``a`` beside
        ``workers_b`` of each offer of ``Bs`` (arrays of shape (len(Bs), splits)), at the one
        compute time where their batches add up to ``global_batch``, or, where one type's workers
        would hold less than one sample each there, the time its worker takes for one: they train
        on one sample each and the other type on the rest. ``batches`` False: the time alone."""
        import numpy as np

        Bs = np.asarray(Bs)
        size = len(self.times_ms)  # a power of two (from_points)
        ba = self.batch[a]
        bb = self.batch[Bs].ravel()  # len(Bs) × size, flat
        base = (np.arange(len(Bs)) * size)[:, None]
        workers_a, workers_b = np.asarray(workers_a, dtype=float), np.asarray(workers_b, dtype=float)

        def total(m: "np.ndarray") -> "np.ndarray":
            return workers_a * ba.take(m) + workers_b * bb.take(base + m)

        # m: how many grid times fall short of the global batch (the first that reaches it), by halves
        m = np.zeros(np.broadcast(workers_a, workers_b, base).shape, dtype=np.intp)
        step = size // 2
        while step:
            m += step * (total(m + (step - 1)) < global_batch)
            step //= 2
        m += total(np.minimum(m, size - 1)) < global_batch  # size: every grid time falls short
        beyond = m >= size  # past the grid's last time: proportional
        m = np.minimum(m, size - 1)
        prev = np.maximum(m - 1, 0)
        first = m == 0  # before the grid's first time: from no batch at no time
        g1, t1 = total(m), self.times_ms.take(m)
        g0, t0 = np.where(first, 0.0, total(prev)), np.where(first, 0.0, self.times_ms.take(prev))
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.where(beyond, 1.0, np.clip((global_batch - g0) / (g1 - g0), 0.0, 1.0))
            t = np.where(beyond, t1 * global_batch / g1, t0 + w * (t1 - t0))
            one_a, one_b = self.one_ms[a], self.one_ms[Bs][:, None]
            step_ms = np.maximum(t, np.maximum(one_a, one_b))
            if not batches:
                return step_ms, None, None
            scale = np.where(beyond, global_batch / g1, 1.0)

        def at(x1: "np.ndarray", x0: "np.ndarray") -> "np.ndarray":
            x0 = np.where(first, 0.0, x0)
            return (x0 + w * (x1 - x0)) * scale

        batch_a, batch_b = at(ba.take(m), ba.take(prev)), at(bb.take(base + m), bb.take(base + prev))
        with np.errstate(divide="ignore", invalid="ignore"):
            short_a, short_b = t < one_a, (t < one_b) & (t >= one_a)  # a type at one sample a worker
            rest_b, rest_a = (global_batch - workers_a) / workers_b, (global_batch - workers_b) / workers_a
        batch_a = np.where(short_a, 1.0, np.where(short_b, rest_a, batch_a))
        batch_b = np.where(short_b, 1.0, np.where(short_a, rest_b, batch_b))
        return step_ms, batch_a, batch_b


@dataclass
class _OfferTable:
    """Per-offer figures the composition needs (arrays aligned by offer index; full nodes = every slot used)."""

    cap: "np.ndarray"  # offers × N: raw throughput of n full nodes (samples/s)
    over: "np.ndarray"  # offers × N: communication overhead (ms) at n nodes
    curves: MixCurves  # per-worker batch against compute time, on a full node
    profiled: "np.ndarray"  # offers × 2: the least and most batch its compute was measured at (0: none)
    hom: "np.ndarray"  # offers × (max slots) × N: raw throughput of n nodes with w workers each (nan: no row)
    rows: dict[int, "np.ndarray"]  # offer -> grid index of its homogeneous rows
    valid: "np.ndarray"
    # the most per-worker batch one worker can hold in the offer's GPU memory (inf: unbounded)
    max_batch: "np.ndarray"


def _offer_table(offers: Offers, grid: "pd.DataFrame", N: int, curve: "pd.DataFrame | None" = None) -> _OfferTable:
    """``curve``: more rows of one full node per type (offers._grid), points of its compute curve."""
    import numpy as np

    k = len(offers.instance_type)
    wmax = int(offers.slots.max())
    cap = np.zeros((k, N)); over = np.zeros((k, N)); profiled = np.zeros((k, 2))
    points: list[tuple[np.ndarray, np.ndarray] | None] = [None] * k
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
        more = (curve[(curve["instance_type"] == t) & (curve["workers_per_node"] == offers.slots[i])]
                if curve is not None else grid.iloc[:0])
        points[i] = (np.concatenate([g_lb[full], more["local_batch_size"].to_numpy(dtype=float)]),
                     np.concatenate([g_cmp[full], more["compute_ms"].to_numpy(dtype=float)]))
        profiled[i] = g_prof[full[0]]
        if g_max is not None:
            max_batch[i] = g_max[full[0]]
        hom[i, g_w[idx] - 1, g_n[idx] - 1] = g_thr[idx]
    return _OfferTable(cap, over, MixCurves.from_points(points), profiled, hom, rows, valid, max_batch)


def dominance(offers: Offers, tab: _OfferTable) -> "np.ndarray":
    """``D[j, i]``: offer j dominates offer i, i.e. j can stand in for i in every candidate
    (homogeneous or mixed) and the result is at least as good on every figure any objective or
    constraint looks at — raw throughput, $/h, interruptions/h and the spot flag (see docs/recommend.md).
    Exact ties are broken by index, so D is a strict partial order."""
    import numpy as np

    spot = np.array([m is Market.SPOT for m in offers.market])
    # a node's batch in every compute time (linear between the grid's times, proportional beyond)
    node_batch = tab.curves.node_batch(offers.slots.astype(float))
    hom = np.where(np.isnan(tab.hom), -np.inf, tab.hom)
    weak = (tab.valid[:, None] & tab.valid[None, :]
            & (offers.price[:, None] <= offers.price[None, :]) & (offers.rate[:, None] <= offers.rate[None, :])
            & (spot[:, None] <= spot[None, :]) & (offers.slots[:, None] >= offers.slots[None, :])
            & (node_batch[:, None, :] >= node_batch[None, :, :]).all(axis=2)
            & (tab.curves.one_ms[:, None] <= tab.curves.one_ms[None, :])
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


def _prune(offers: Offers, tab: _OfferTable, mixing: bool, limited: "np.ndarray | None" = None,
           same_slots: bool = False) -> "np.ndarray":
    """Keep-mask over offers. An offer is dropped when dominated (see :func:`dominance`) and, if mixes
    are composed, when its dominators can replace it next to any partner: some dominator is of its own
    type (other market), or they span two types (a partner can share the type of at most one). An
    offer under a capacity limit (``limited``) stands in for no other: it may not have the nodes.
    ``same_slots``: only an offer with as many GPUs per node stands in (a mix of more GPUs may have
    more than a global batch has samples)."""
    import numpy as np

    D = dominance(offers, tab)
    if limited is not None:
        D[limited, :] = False
    if same_slots:
        D &= offers.slots[:, None] == offers.slots[None, :]
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
    # mixes the oracle predicted as they are (search.solve): candidate -> its row of predict_mixes
    direct: dict[int, "pd.Series"] = field(default_factory=dict)

    def locate(self, j: int) -> tuple[tuple, int]:
        import numpy as np

        b = int(np.searchsorted(self.starts, j, side="right") - 1)
        return self.blocks[b], int(j - self.starts[b])

    @cached_property
    def _positions(self) -> dict[tuple[str, int, int], "np.ndarray"]:
        # the grid's row positions of each (instance type, workers per node, nodes), in grid order
        return {(str(t), int(w), int(n)): v for (t, w, n), v in
                self.grid.groupby(["instance_type", "workers_per_node", "nodes"], sort=False).indices.items()}

    def grid_rows(self, nodes: int, *types: tuple[str, int]) -> "pd.DataFrame":
        """The grid's rows at ``nodes`` of each (instance type, workers per node) in ``types``,
        in grid order (each type's rows at every batch the grid holds)."""
        import numpy as np

        found = [self._positions.get((t, int(w), int(nodes))) for t, w in types]
        return self.grid.iloc[np.sort(np.concatenate([f for f in found if f is not None] or [np.zeros(0, int)]))]

    @cached_property
    def type_sources(self) -> dict[str, set[str]]:
        """Each instance type's sources over all its grid rows."""
        return {str(t): set(map(str, v)) for t, v in self.grid.groupby("instance_type", sort=False)["source"]}


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

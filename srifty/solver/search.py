"""The search: every candidate composed, evaluated, constrained and ranked (:func:`solve`).

The flow (library first; ``srifty recommend`` only formats what :func:`solve` returns), with
the module of srifty.solver that holds each step:

1. **Offers**: every catalog instance type that passes the filters (region, name glob,
   GPU types for EC2) in each market it is sold in (on-demand, spot), with its price
   and interruption rate per node-hour (``offers``).
2. **Latency model, once per distinct key**: a :class:`ThroughputOracle` predicts the
   iteration time (with interval and source) of every distinct
   (instance type, workers per node, nodes, per-worker batch) of the homogeneous grid —
   a few thousand rows. Nothing else calls the model (``offers._grid``).
3. **Prune** dominated offers, exactly (:func:`dominance`, :func:`_prune`; the argument is in
   docs/recommend.md): an offer is dropped only when another can stand in for it in every
   homogeneous and mixed candidate with no less throughput, no more $/h, no more
   interruptions and no more spot, so no objective or constraint can prefer it (``space``).
4. **Compose** (numpy, vectorised): homogeneous candidates directly; mixes of two offers of
   different types over every node split with ``nA + nB <= max_nodes``. Synchronous data
   parallelism waits for the slowest worker, so the global batch is split where the two
   types' compute times are equal, on each type's compute curve (``space.MixCurves``: a
   step bound by kernel launches barely grows with the batch); the gradient allreduce over
   the whole cluster costs the larger of the two types' communication overheads at the
   total node count (the slowest link bounds it). A mix is capped at the sum of its
   parts' throughputs (here; a row's figures: ``rows``). The composed figure is for the
   search: the mixes that reach the rows shown are predicted as they are
   (``ThroughputOracle.predict_mixes``, ``rows.mix_rows``) and ranked again (step 6).
5. **Spot**: goodput = throughput × (1 − λ·(restart overhead + checkpoint interval / 2)),
   with λ the cluster's interruptions per hour (the sum over its spot nodes: any
   interruption stalls every synchronous worker; ``offers._goodput_into``).
6. **Constraints** (``constraints``) as boolean masks; **rank** by the objective; **Pareto front** of
   throughput vs $/h over the feasible set (``rows._pareto``); the mixes among the ranked rows
   and the front predicted as they are, their figures checked against the constraints again,
   and ranking and front made again, until every mix shown was (at most :data:`MIX_ROUNDS`).
   When nothing is feasible, :func:`explain_infeasible` names the constraint(s) that rule
   everything out and the nearest relaxation (``infeasible``). What comes back: ``results``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterator

from srifty.catalog import Market
from srifty.errors import SriftyError
from srifty.features import hardware_of
from srifty.features.memory import tight_notes
from srifty.oracle import ThroughputOracle
from srifty.solver.constraints import Constraints, Objective, choose_objective
from srifty.solver.infeasible import explain_infeasible
from srifty.solver.offers import _goodput_into, _grid, build_offers
from srifty.solver.results import NearTie, Recommendation, Result, slow_end
from srifty.solver.rows import _config_text, _mix_cap, _mix_split, _pareto, _recommendation, mix_rows
from srifty.solver.space import _capacity_units, _offer_table, _prune, _Space

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


def solve(oracle: ThroughputOracle, catalog: Any, constraints: Constraints, objective: Objective | None = None,
          top: int = 10, pareto_limit: int = 50, prune: bool = True) -> Result:
    """Every candidate evaluated, constrained and ranked; raises :class:`InfeasibleError` when none is feasible.

    ``prune=False`` composes every offer (the reference the exactness test compares against)."""
    import numpy as np

    c = constraints
    c.validate()
    if top < 1:
        raise SriftyError(f"--top must be at least 1, got {top}.")
    t_start = time.perf_counter()
    obj, reason = choose_objective(c, objective)
    offers, notes = build_offers(catalog, c)
    grid, curve, model_s = _grid(oracle, offers, c, notes)
    N = c.max_nodes
    b_ref = float(c.local_batch_size or oracle.default_local_batch())
    mixing = c.mixes

    tab = _offer_table(offers, grid, N, curve)
    units, limits = _capacity_units(offers, c.capacity)
    # the most nodes of each offer alone within every limit of its market (inf: none counts it)
    cap_nodes = np.array([min((lim.max_nodes(t) for lim in c.capacity if lim.market is m), default=np.inf)
                          for t, m in zip(offers.instance_type, offers.market)], dtype=float)
    # an offer whose GPU memory could refuse a per-worker batch the search may give it (at most the
    # global batch, or the reference batch of every worker there can be) stands in for no other
    most_batch = float(c.global_batch_size) if c.global_batch_size else b_ref * N * float(offers.slots.max())
    memory_binds = tab.max_batch < most_batch
    # with a global batch, a configuration of more GPUs than samples is ruled out (every worker trains on
    # at least one): a dominator with more GPUs per node cannot then stand in for an offer in every mix
    few_samples = bool(c.global_batch_size) and N * int(offers.slots.max()) > float(c.global_batch_size or 0)
    keep = (_prune(offers, tab, mixing, limited=(cap_nodes < N) | memory_binds, same_slots=mixing and few_samples)
            if prune else tab.valid.copy())
    keep_i = np.nonzero(keep)[0]
    pruned = [f"{offers.instance_type[i]} ({offers.market[i].value})" for i in np.nonzero(tab.valid & ~keep)[0]]
    nodes_axis = np.arange(1, N + 1)
    ckpt = c.restart_overhead_h + c.checkpoint_interval_h / 2.0

    # ---- sizes, then one preallocated array per figure (no concatenation)
    blocks: list[tuple] = []
    sizes: list[int] = []
    for i in keep_i:
        blocks.append(("hom", int(i), tab.rows[int(i)]))
        sizes.append(len(tab.rows[int(i)]))
    if mixing:
        nA, nB = np.meshgrid(nodes_axis, nodes_axis, indexing="ij")
        sel = (nA + nB) <= N
        nA, nB = nA[sel], nB[sel]
        types = offers.instance_type
        for ai, a in enumerate(keep_i):
            Bs = np.array([b for b in keep_i[ai + 1:] if types[b] != types[a]], dtype=int)
            if len(Bs):
                blocks.append(("mix", int(a), Bs, nA, nB))
                sizes.append(len(Bs) * len(nA))
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64) if sizes else np.zeros(1, np.int64)
    n_cand = int(sum(sizes))
    thr = np.empty(n_cand); raw = np.empty(n_cand); price = np.empty(n_cand); rate = np.empty(n_cand)
    spot = np.empty(n_cand, bool)
    gpus = np.empty(n_cand) if c.global_batch_size else None  # GPUs per candidate: the 'workers' mask
    within = np.ones(n_cand, bool) if len(limits) else None  # inside every capacity limit
    fits = np.ones(n_cand, bool) if memory_binds[keep_i].any() else None  # every worker's batch fits its GPU
    g_thr = grid["throughput"].to_numpy(dtype=float); g_n = grid["nodes"].to_numpy()
    g_lb = grid["local_batch_size"].to_numpy(dtype=float); g_w = grid["workers_per_node"].to_numpy()
    is_spot = np.array([m is Market.SPOT for m in offers.market])

    if mixing:  # per offer and node split, gathered once (a block then takes whole rows)
        fA, fB = nA.astype(float), nB.astype(float)
        over_s = tab.over[:, nA + nB - 1]  # offers × splits: overhead at the total node count
        cap_a, cap_b = tab.cap[:, nA - 1], tab.cap[:, nB - 1]  # offers × splits: caps at nA, nB nodes
    for blk, s0, size in zip(blocks, starts, sizes):
        sl = slice(int(s0), int(s0) + size)
        if blk[0] == "hom":
            i, idx = blk[1], blk[2]
            n = g_n[idx]
            raw[sl] = g_thr[idx]
            price[sl] = offers.price[i] * n
            rate[sl] = offers.rate[i] * n
            spot[sl] = is_spot[i]
            if gpus is not None:
                gpus[sl] = g_w[idx] * n
            if within is not None:
                within[sl] = n <= cap_nodes[i]
            if fits is not None:
                fits[sl] = g_lb[idx] <= tab.max_batch[i]
            _goodput_into(thr[sl], raw[sl], rate[sl], ckpt)
            continue
        a, Bs = blk[1], blk[2]
        P = len(Bs)
        shp = (P, len(nA))
        r_raw = raw[sl].reshape(shp); r_price = price[sl].reshape(shp); r_rate = rate[sl].reshape(shp)
        wa, wb = float(offers.slots[a]), offers.slots[Bs].astype(float)[:, None]
        G: Any = float(c.global_batch_size) if c.global_batch_size else (wb * fB + wa * fA) * b_ref
        # iteration = compute (equalised on the two types' curves) + the slower link's overhead at
        # the total node count
        S, batch_a, batch_b = tab.curves.equalised(a, Bs, wa * fA, wb * fB, G, batches=fits is not None)
        if fits is not None:
            fits[sl].reshape(shp)[:] = (batch_a <= tab.max_batch[a]) & (batch_b <= tab.max_batch[Bs][:, None])
        S += np.maximum(over_s[Bs], over_s[a])  # S now holds the iteration time (ms)
        np.divide(G, S, out=r_raw); r_raw *= 1e3
        cap = cap_b[Bs]
        cap += cap_a[a]
        np.minimum(r_raw, cap, out=r_raw)
        np.multiply(offers.price[Bs][:, None], fB, out=r_price); r_price += offers.price[a] * fA
        np.multiply(offers.rate[Bs][:, None], fB, out=r_rate); r_rate += offers.rate[a] * fA
        spot[sl].reshape(shp)[:] = is_spot[Bs][:, None] | is_spot[a]
        if gpus is not None:
            gpus[sl].reshape(shp)[:] = wa * fA + wb * fB
        if within is not None:
            w = within[sl].reshape(shp)
            for g in range(len(limits)):
                w &= (units[g, Bs][:, None] * fB + units[g, a] * fA) <= limits[g] + 1e-9
        _goodput_into(thr[sl], raw[sl], rate[sl], ckpt)  # while the block is still in cache

    with np.errstate(divide="ignore", invalid="ignore"):
        hours = np.where(thr > 0, (c.samples or 0.0) / (thr * 3600.0), np.inf) if c.samples else None
    usd_total = hours * price if hours is not None else None
    cat = {"thr": thr, "raw": raw, "price": price, "rate": rate, "spot": spot}
    if gpus is not None:
        cat["gpus"] = gpus
    space = _Space(offers, tab, grid, blocks, starts, b_ref, c.global_batch_size)

    masks = _constraint_masks(c, cat, hours, usd_total, within, fits)
    ok = _all_of(masks)
    feasible_idx = np.flatnonzero(ok)
    if len(feasible_idx) == 0:
        err = explain_infeasible(masks, cat, usd_total, hours, c, lambda j: _config_text(int(j), space))
        if "memory" in masks:  # what each type's GPU holds
            held = [n for n in getattr(oracle, "notes", []) if n.startswith("GPU memory:")]
            err.hint = " ".join([err.hint or "", *(n + "." for n in held)]).strip()
        raise err

    # ---- rank and the front; the mixes among them predicted as they are, until those shown all were
    ranked, front, keys = _rank(obj, cat, usd_total, feasible_idx, top, pareto_limit)
    mix_block = np.array([blk[0] == "mix" for blk in blocks], bool)
    for _ in range(MIX_ROUNDS if hasattr(oracle, "predict_mixes") else 0):
        shown = np.unique(np.concatenate([ranked, front]))
        todo = [int(j) for j in shown[mix_block[np.searchsorted(starts, shown, side="right") - 1]]
                if int(j) not in space.direct]
        if not todo:
            break
        splits = [_mix_split(j, space) for j in todo]
        direct = oracle.predict_mixes(mix_rows(splits, space))
        for k, j in enumerate(todo):
            space.direct[j] = direct.iloc[k]
        idx = np.array(todo)
        # the mix's throughput at its own prediction, capped at the sum of its parts' as composed
        G = np.array([m.global_batch for m in splits])
        cap = np.array([_mix_cap(m, space) for m in splits])
        raw[idx] = np.minimum(G / direct["iteration_ms"].to_numpy(dtype=float) * 1e3, cap)
        sub = np.empty(len(idx))
        _goodput_into(sub, raw[idx], rate[idx], ckpt)
        thr[idx] = sub
        if hours is not None and usd_total is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                hours[idx] = np.where(sub > 0, (c.samples or 0.0) / (sub * 3600.0), np.inf)
            usd_total[idx] = hours[idx] * price[idx]
        again = _constraint_masks(c, {k: v[idx] for k, v in cat.items()}, None if hours is None else hours[idx],
                                  None if usd_total is None else usd_total[idx],
                                  None if within is None else within[idx], None if fits is None else fits[idx])
        for name, m in again.items():
            masks[name][idx] = m
        ok[idx] = _all_of(again)
        feasible_idx = np.flatnonzero(ok)
        if len(feasible_idx) == 0:  # none is left once the mixes shown are predicted as they are
            raise explain_infeasible(masks, cat, usd_total, hours, c, lambda j: _config_text(int(j), space))
        ranked, front, keys = _rank(obj, cat, usd_total, feasible_idx, top, pareto_limit)

    def rec(j: int) -> Recommendation:
        return _recommendation(int(j), space, cat, hours, usd_total)

    def further() -> Iterator[Recommendation]:  # the ranked rows after those shown, in order
        after = _leaders(keys, feasible_idx, SLOW_END_SEARCH)[len(recs):]
        for k, j in enumerate(after, start=len(recs) + 1):
            r = rec(j)
            r.rank = k
            yield r

    recs = [rec(j) for j in ranked]
    for k, r in enumerate(recs):
        r.rank = k + 1
    recs[0].chosen = True
    pareto = [rec(j) for j in front]
    chosen_cfg = recs[0].config
    for p in pareto:
        p.chosen = p.config == chosen_cfg
    if pruned:
        notes.append(f"pruned {len(pruned)} dominated offer(s) before composing (exact: each has a cheaper-or-equal, "
                     f"no-riskier, no-slower stand-in): {', '.join(pruned[:8])}" + (" …" if len(pruned) > 8 else ""))
    shown = {t for r in recs + pareto for t in r.batch_split}
    notes.extend(n for n in _on_rows_shown(getattr(oracle, "notes", []), catalog, shown, set(grid["instance_type"]))
                 if n not in notes)
    notes.extend(tight_notes(recs[0].memory_gib, recs[0].batch_split, catalog))
    near = None
    if (tie := _near_tie(keys, feasible_idx, int(ranked[0]))) is not None:
        alt = next((r for r in recs if r.rank == tie[1]), None) or rec(tie[0])
        alt.rank = tie[1]
        near = NearTie(obj, recs[0], alt, len(recs), NEAR_TIE)
        notes.insert(0, near.sentence())
    if (slow := slow_end(recs, c, further, len(feasible_idx))) is not None:
        notes.insert(0, slow.sentence())  # about the answer itself: first
    if getattr(oracle, "hit", False):
        notes.append("latency-model figures reused from the prediction cache (same model, profiles, catalog, rows)")
    if space.direct:
        notes.append(f"{len(space.direct)} mix(es) among the rows shown predicted as they are (each type at its share "
                     "of the batch); the search composed every mix from its two types' figures")
    return Result(obj, reason, c, n_cand, len(grid) + len(curve), pruned, time.perf_counter() - t_start, model_s, recs,
                  pareto, int(len(feasible_idx)), notes, near, slow)


def _on_rows_shown(oracle_notes: list[str], catalog: Any, shown: set[str], searched: set[str]) -> list[str]:
    """The oracle's notes less those the catalog says of types in no row shown, ranked or on the
    front (a network baseline it lacks, a GPU's memory bandwidth imputed): they move no figure
    shown. A last note counts them."""
    def said_of(types: set[str]) -> set[str]:
        return {n for t in types for n in hardware_of(catalog, t).notes}

    if not oracle_notes:
        return []
    others = said_of(searched - shown) - said_of(shown)
    kept = [n for n in oracle_notes if n not in others]
    if len(kept) < len(oracle_notes):
        kept.append(f"{len(oracle_notes) - len(kept)} note(s) on the catalog figures of instance types in no row "
                    "shown left out (`srifty predict --config` on such a type gives them)")
    return kept


# rounds of predicting the mixes shown as they are: each may bring new mixes into the rows shown
MIX_ROUNDS = 30
# ranked rows a note looks through for one that meets the constraints at its interval's slow end
SLOW_END_SEARCH = 500
# within this share of the chosen row on the objective, another row counts as a near tie: under 1%
# is below what a measurement tells apart (repeated runs scatter by about 5%, docs/REPEATABILITY.md)
NEAR_TIE = 0.01


def _constraint_masks(c: Constraints, cat: dict[str, "np.ndarray"], hours: "np.ndarray | None",
                      usd_total: "np.ndarray | None", within: "np.ndarray | None",
                      fits: "np.ndarray | None") -> dict[str, "np.ndarray"]:
    """Per constraint, which candidates meet it ("usable": some throughput at all)."""
    thr, price, rate, spot = cat["thr"], cat["price"], cat["rate"], cat["spot"]
    masks: dict[str, "np.ndarray"] = {"usable": thr > 0}
    if c.budget_per_hour is not None:
        masks["budget"] = price <= c.budget_per_hour + 1e-9
    if c.total_budget is not None and usd_total is not None:
        masks["total_budget"] = usd_total <= c.total_budget + 1e-9
    if c.min_throughput is not None:
        masks["min_throughput"] = thr >= c.min_throughput - 1e-9
    if c.deadline_hours is not None and hours is not None:
        masks["deadline"] = hours <= c.deadline_hours + 1e-12
    if not c.spot:
        masks["spot"] = ~spot
    if c.max_interruption is not None:
        masks["max_interruption"] = rate <= c.max_interruption + 1e-12
    if c.global_batch_size:  # every worker trains on at least one sample
        masks["workers"] = cat["gpus"] <= c.global_batch_size
    if within is not None:
        masks["capacity"] = within
    if fits is not None:
        masks["memory"] = fits
    return masks


def _all_of(masks: dict[str, "np.ndarray"]) -> "np.ndarray":
    """The candidates that meet every mask."""
    ok = masks["usable"].copy()
    for name, m in masks.items():
        if name != "usable":
            ok &= m
    return ok


def _rank(obj: Objective, cat: dict[str, "np.ndarray"], usd_total: "np.ndarray | None", feasible_idx: "np.ndarray",
          top: int, pareto_limit: int) -> tuple["np.ndarray", "np.ndarray", tuple["np.ndarray", "np.ndarray"]]:
    """The first ``top`` feasible candidates by the objective (:func:`_leaders`), the Pareto front
    of throughput vs $/h (at most ``pareto_limit`` of its points, evenly spread), and the ranking
    keys (:func:`_keys`) they were read off."""
    import numpy as np

    front = feasible_idx[_pareto(cat["thr"][feasible_idx], cat["price"][feasible_idx])]
    if len(front) > pareto_limit:
        pick = np.unique(np.linspace(0, len(front) - 1, pareto_limit).round().astype(int))
        front = front[pick]
    keys = _keys(obj, cat, usd_total, feasible_idx)
    return _leaders(keys, feasible_idx, top), front, keys


def _keys(obj: Objective, cat: dict[str, "np.ndarray"], usd_total: "np.ndarray | None",
          feasible_idx: "np.ndarray") -> tuple["np.ndarray", "np.ndarray"]:
    """The feasible candidates' ranking keys: the objective (less is better) and what breaks its ties."""
    fthr, fprice = cat["thr"][feasible_idx], cat["price"][feasible_idx]
    if obj is Objective.THROUGHPUT:
        return -fthr, fprice
    if obj is Objective.COST:
        return (usd_total[feasible_idx] if usd_total is not None else fprice), -fthr
    return fprice / (fthr * 3600.0), -fthr


def _leaders(keys: tuple["np.ndarray", "np.ndarray"], feasible_idx: "np.ndarray", top: int) -> "np.ndarray":
    """The first ``top`` feasible candidates by their ranking ``keys``, in order (a partial sort picks
    them, a full sort orders only them; ties in the objective by the other figure, then by index)."""
    import numpy as np

    primary, secondary = keys
    if len(primary) > top:
        kth = np.partition(primary, top - 1)[top - 1]
        lead = np.flatnonzero(primary <= kth)
    else:
        lead = np.arange(len(primary))
    return feasible_idx[lead[np.lexsort((secondary[lead], primary[lead]))][:top]]


def _near_tie(keys: tuple["np.ndarray", "np.ndarray"], feasible_idx: "np.ndarray", j: int) -> tuple[int, int] | None:
    """(candidate, its rank): of the feasible candidates within NEAR_TIE of candidate ``j`` on the
    objective (ranking ``keys``), the best on the other figure (least $/h where the objective is
    throughput, most throughput where it is a cost), where that beats ``j``'s by more than NEAR_TIE;
    else None."""
    import numpy as np

    primary, secondary = keys
    at = int(np.searchsorted(feasible_idx, j))
    p0, s0 = primary[at], secondary[at]  # the objective keeps one sign: throughput negated, or a cost
    close = np.flatnonzero(np.abs(primary - p0) <= NEAR_TIE * abs(p0))
    best = close[np.lexsort((primary[close], secondary[close]))[0]]
    if not secondary[best] < s0 - NEAR_TIE * abs(s0):
        return None
    pb, sb = primary[best], secondary[best]
    level = np.flatnonzero(primary == pb)  # ties in the objective: by the other figure, then by index
    ahead = int(np.count_nonzero(primary < pb)) + int(np.count_nonzero(secondary[level] < sb))
    ahead += int(np.count_nonzero((secondary[level] == sb) & (level < best)))
    return int(feasible_idx[best]), ahead + 1

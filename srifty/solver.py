"""Recommend cluster configurations: enumerate, predict, constrain, rank, Pareto.

The flow (library first; ``srifty recommend`` only formats what :func:`solve` returns):

1. **Offers**: every catalog instance type that passes the filters (region, name glob,
   GPU types for EC2) in each market it is sold in (on-demand, spot), with its price
   and interruption rate per node-hour.
2. **Latency model, once per distinct key**: a :class:`ThroughputOracle` predicts the
   iteration time (with interval and source) of every distinct
   (instance type, workers per node, nodes, per-worker batch) of the homogeneous grid —
   a few thousand rows. Nothing else calls the model.
3. **Prune** dominated offers, exactly (:func:`dominance`, :func:`_prune`; the argument is in
   docs/recommend.md): an offer is dropped only when another can stand in for it in every
   homogeneous and mixed candidate with no less throughput, no more $/h, no more
   interruptions and no more spot, so no objective or constraint can prefer it.
4. **Compose** (numpy, vectorised): homogeneous candidates directly; mixes of two offers of
   different types over every node split with ``nA + nB <= max_nodes``. Synchronous data
   parallelism waits for the slowest worker, so the global batch is split in proportion
   to each type's per-worker speed (compute time equalised); the gradient allreduce over
   the whole cluster costs the larger of the two types' communication overheads at the
   total node count (the slowest link bounds it). A mix is capped at the sum of its
   parts' throughputs.
5. **Spot**: goodput = throughput × (1 − λ·(restart overhead + checkpoint interval / 2)),
   with λ the cluster's interruptions per hour (the sum over its spot nodes: any
   interruption stalls every synchronous worker).
6. **Constraints** as boolean masks; **rank** by the objective; **Pareto front** of
   throughput vs $/h over the feasible set. When nothing is feasible,
   :func:`explain_infeasible` names the constraint(s) that rule everything out and the
   nearest relaxation.
"""

from __future__ import annotations

import fnmatch
import math
import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Sequence

from srifty.capacity import CapacityLimit
from srifty.catalog import Market
from srifty.configspec import MAX_SEARCH_NODES
from srifty.errors import SriftyError
from srifty.oracle import ThroughputOracle
from srifty.profiling.ec2 import billed_hours
from srifty.profiling.launcher import ProfileRequest

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd

    from srifty.features import JobProfile

DEFAULT_CHECKPOINT_INTERVAL_H = 0.5
DEFAULT_RESTART_OVERHEAD_H = 0.1
SOURCES = ("measured", "predicted", "transferred")


class Objective(str, Enum):
    """What to optimise among the configurations that meet every constraint."""

    THROUGHPUT = "throughput"  # most samples/s
    COST = "cost"  # least $ (to finish, when the job size is known; else $/h)
    COST_PER_SAMPLE = "cost-per-sample"  # least $ per sample


class InfeasibleError(SriftyError):
    """No configuration meets every constraint (the message names the one to relax)."""


# --------------------------------------------------------------------------- inputs


@dataclass
class Constraints:
    """What the person asked for. ``None`` means: no such constraint."""

    budget_per_hour: float | None = None
    total_budget: float | None = None
    min_throughput: float | None = None
    deadline_hours: float | None = None
    samples: float | None = None  # job size: samples to process (epochs × dataset size)
    max_nodes: int = 16
    max_types: int = 2
    heterogeneous: bool = True
    spot: bool = True
    max_interruption: float | None = None  # interruptions per hour of the whole cluster
    region: str | None = None
    instance_types: str | None = None  # glob(s), comma-separated
    checkpoint_interval_h: float = DEFAULT_CHECKPOINT_INTERVAL_H
    restart_overhead_h: float = DEFAULT_RESTART_OVERHEAD_H
    global_batch_size: int | None = None
    local_batch_size: int | None = None  # per-worker batch when no global batch is given
    placement_group: bool = False  # nodes in a cluster placement group (the predictor's network; reported)
    capacity: tuple["CapacityLimit", ...] = ()  # node and quota limits (srifty.capacity)

    def validate(self) -> None:
        for name in ("budget_per_hour", "total_budget", "min_throughput", "deadline_hours", "samples"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v > 0):
                raise SriftyError(f"--{name.replace('_per_hour', '').replace('_', '-')} must be a positive "
                                  f"finite number, got {v}.")
        for name in ("max_interruption", "checkpoint_interval_h", "restart_overhead_h"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise SriftyError(f"--{name.removesuffix('_h').replace('_', '-')} must be a finite number >= 0, "
                                  f"got {v}.")
        if not 1 <= self.max_nodes <= MAX_SEARCH_NODES:
            raise SriftyError(f"--max-nodes must be between 1 and {MAX_SEARCH_NODES}, got {self.max_nodes}.")
        if self.max_types not in (1, 2):
            raise SriftyError(f"--max-types must be 1 or 2, got {self.max_types}.")
        for name, v in (("--global-batch-size", self.global_batch_size), ("--batch-size", self.local_batch_size)):
            if v is not None and not v >= 1:
                raise SriftyError(f"{name} must be at least 1 sample, got {v}.")
        if self.deadline_hours is not None and self.samples is None:
            raise SriftyError("--deadline needs the job size.",
                              "Give --samples N, or --epochs E with --dataset-size N.")
        if self.total_budget is not None and self.samples is None:
            raise SriftyError("--total-budget needs the job size.",
                              "Give --samples N, or --epochs E with --dataset-size N.")
        if self.checkpoint_interval_h < 0 or self.restart_overhead_h < 0:
            raise SriftyError("--checkpoint-interval and --restart-overhead must be >= 0.")

    @property
    def required_throughput(self) -> float | None:
        """The throughput the constraints need: --min-throughput and the deadline's rate, whichever is higher."""
        need = [x for x in (self.min_throughput,) if x is not None]
        if self.deadline_hours is not None and self.samples is not None:
            need.append(self.samples / (self.deadline_hours * 3600.0))
        return max(need) if need else None


def choose_objective(c: Constraints, objective: Objective | None) -> tuple[Objective, str]:
    """The objective to use and why (said to the user)."""
    if objective is not None:
        return objective, f"--objective {objective.value}"
    if c.min_throughput is not None or c.deadline_hours is not None:
        what = "--min-throughput" if c.min_throughput is not None else "--deadline"
        return Objective.COST, f"cheapest configuration meeting {what} (default when a throughput or deadline is required)"
    return Objective.THROUGHPUT, ("highest throughput within the budget (default)" if
                                  (c.budget_per_hour or c.total_budget) else "highest throughput (default; no budget given)")


# --------------------------------------------------------------------------- outputs


@dataclass
class Recommendation:
    """One configuration with its figures (every figure says where it came from)."""

    config: str
    market: str  # on-demand | spot | mixed
    gpus: int
    nodes: int
    batch_split: dict[str, float]  # per-worker batch on each instance type
    global_batch: float
    iteration_ms: float
    interval_ms: tuple[float, float]
    throughput_samples_per_s: float  # expected goodput (interruptions discounted)
    raw_throughput_samples_per_s: float
    usd_per_hour: float
    usd_per_million_samples: float
    interruptions_per_hour: float
    source: str
    mixed: bool
    hours_to_finish: float | None = None
    usd_to_finish: float | None = None
    rank: int | None = None
    chosen: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["interval_ms"] = [round(self.interval_ms[0], 3), round(self.interval_ms[1], 3)]
        for k in ("iteration_ms", "throughput_samples_per_s", "raw_throughput_samples_per_s", "global_batch"):
            d[k] = round(d[k], 3)
        for k in ("usd_per_hour", "usd_per_million_samples", "usd_to_finish"):
            if d[k] is not None:
                d[k] = round(d[k], 4)
        d["batch_split"] = {k: round(v, 2) for k, v in self.batch_split.items()}
        if d["hours_to_finish"] is not None:
            d["hours_to_finish"] = round(d["hours_to_finish"], 4)
        d["interruptions_per_hour"] = round(d["interruptions_per_hour"], 6)
        if self.hours_to_finish is None:
            d.pop("hours_to_finish")
            d.pop("usd_to_finish")
        return d


@dataclass(frozen=True)
class MeasurementAdvice:
    """What would turn the chosen configuration's predicted compute on a type nobody profiled into
    a measured one, what it costs, and which of the ranked rows it could reorder."""

    config: str
    instance_type: str
    command: str
    hours: float  # the most one instance of the EC2 profile is billed for
    usd: float | None  # on demand, in the region recommended for
    interval_ratio: tuple[float, float]  # the chosen row's interval over its point
    overlapping: tuple[str, ...]  # ranked configurations whose throughput interval overlaps the chosen one's

    def sentence(self) -> str:
        lo, hi = self.interval_ratio
        cost = (f"at most ${self.usd:.2f} ({self.hours:.2f} h of one {self.instance_type} on demand)"
                if self.usd is not None else f"{self.hours:.2f} h of one {self.instance_type} (no price in the catalog)")
        shown = ", ".join(self.overlapping[:3]) + (f" and {len(self.overlapping) - 3} more"
                                                   if len(self.overlapping) > 3 else "")
        settle = (f"; the chosen row's throughput interval overlaps those of {shown} in the ranking, whose order "
                  "against it the measurement would settle" if self.overlapping else
                  "; no other ranked row's interval overlaps the chosen one's, so the choice stands either way")
        return (f"compute on {self.instance_type} is predicted, not measured (the interval spans x{lo:.2f} to "
                f"x{hi:.2f} of {self.config}'s figure): `{self.command}` measures it, {cost}{settle}.")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["usd"] = None if self.usd is None else round(self.usd, 2)
        d["hours"] = round(self.hours, 3)
        d["interval_ratio"] = [round(x, 3) for x in self.interval_ratio]
        d["overlapping"] = list(self.overlapping)
        d["sentence"] = self.sentence()
        return d


def _throughput_interval(r: "Recommendation") -> tuple[float, float]:
    lo_ms, hi_ms = r.interval_ms
    return r.throughput_samples_per_s * r.iteration_ms / hi_ms, r.throughput_samples_per_s * r.iteration_ms / lo_ms


def measurement_advice(result: "Result", job: "JobProfile", catalog: Any) -> MeasurementAdvice | None:
    """The one measurement that would make the chosen row's compute measured (None when it already is)."""
    chosen = result.chosen
    if chosen.source != "transferred":
        return None
    unprofiled = [t for t in chosen.batch_split if t not in job.instance_types]
    if not unprofiled:
        return None
    itype = unprofiled[0]
    batch = chosen.batch_split[itype]
    command = (f"srifty profile {job.script or 'SCRIPT'} --backend ec2 --instance-types {itype}"
               + (f" --batch-size {batch:.0f}" if batch >= 1 else ""))
    hours = billed_hours(ProfileRequest(script=job.script))
    price = catalog.ondemand_price(itype, result.constraints.region)
    lo, hi = _throughput_interval(chosen)
    overlapping = tuple(r.config for r in result.recommendations[1:]
                        if _throughput_interval(r)[1] >= lo and _throughput_interval(r)[0] <= hi)
    return MeasurementAdvice(chosen.config, itype, command, hours, None if price is None else price * hours,
                             (chosen.interval_ms[0] / chosen.iteration_ms, chosen.interval_ms[1] / chosen.iteration_ms),
                             overlapping)


@dataclass
class Result:
    objective: Objective
    objective_reason: str
    constraints: Constraints
    candidates_evaluated: int
    model_rows: int
    pruned_offers: list[str]
    solve_seconds: float
    model_seconds: float
    recommendations: list[Recommendation]
    pareto: list[Recommendation]
    feasible: int
    notes: list[str] = field(default_factory=list)

    @property
    def chosen(self) -> Recommendation:
        return self.recommendations[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "objective": self.objective.value,
            "objective_reason": self.objective_reason,
            "constraints": {k: ([lim["what"] for lim in v] if k == "capacity" else v)
                            for k, v in asdict(self.constraints).items() if v is not None and v != ()},
            "candidates_evaluated": self.candidates_evaluated,
            "feasible": self.feasible,
            "model_rows": self.model_rows,
            "pruned_offers": self.pruned_offers,
            "solve_seconds": round(self.solve_seconds, 4),
            "model_seconds": round(self.model_seconds, 4),
            "recommendations": [r.to_dict() for r in self.recommendations],
            "pareto": [r.to_dict() for r in self.pareto],
            "notes": self.notes,
        }


# --------------------------------------------------------------------------- offers


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


# --------------------------------------------------------------------------- solve


def _goodput_into(out: "np.ndarray", raw: "np.ndarray", rate: "np.ndarray", ckpt: float) -> None:
    """Spot goodput, in place: out = raw × clip(1 − rate·ckpt, 0, 1), ckpt = restart overhead + checkpoint interval / 2."""
    import numpy as np

    np.multiply(rate, -ckpt, out=out)
    out += 1.0
    np.clip(out, 0.0, 1.0, out=out)
    out *= raw


def _grid(oracle: ThroughputOracle, offers: Offers, c: Constraints, notes: list[str]) -> tuple["pd.DataFrame", float]:
    """The homogeneous model grid: one row per distinct (type, workers per node, nodes, batch)."""
    import numpy as np
    import pandas as pd

    t0 = time.perf_counter()
    b_ref = c.local_batch_size or oracle.default_local_batch()
    rows = []
    for t, slots in sorted(set(zip(offers.instance_type, offers.slots.tolist()))):
        for w in range(1, slots + 1):
            for n in range(1, c.max_nodes + 1):
                b = c.global_batch_size / (w * n) if c.global_batch_size else b_ref
                rows.append((t, w, n, float(b)))
    grid = pd.DataFrame(rows, columns=["instance_type", "workers_per_node", "nodes", "local_batch_size"])
    try:
        out = oracle.predict_rows(grid)
    except SriftyError:  # some type cannot be predicted: find which, say so, go on without it
        keep_types = []
        for t in sorted(set(grid["instance_type"])):
            try:
                oracle.predict_rows(grid[grid["instance_type"] == t].head(1))
                keep_types.append(t)
            except SriftyError as exc:
                notes.append(f"{t} left out: {exc.message}")
        grid = grid[grid["instance_type"].isin(keep_types)].reset_index(drop=True)
        if grid.empty:
            raise SriftyError("The latency model cannot predict any instance type that passes the filters.",
                              " ".join(notes[:3])) from None
        out = oracle.predict_rows(grid)
    out["world"] = out["workers_per_node"] * out["nodes"]
    out["throughput"] = out["world"] * out["local_batch_size"] / (out["iteration_ms"] / 1e3)
    out["overhead_ms"] = np.maximum(out["iteration_ms"] - out["compute_ms"], 0.0)
    return out, time.perf_counter() - t0


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


def _offer_table(offers: Offers, grid: "pd.DataFrame", N: int) -> _OfferTable:
    import numpy as np

    k = len(offers.instance_type)
    wmax = int(offers.slots.max())
    cap = np.zeros((k, N)); over = np.zeros((k, N)); speed = np.zeros(k); profiled = np.zeros((k, 2))
    hom = np.full((k, wmax, N), np.nan)
    valid = np.zeros(k, bool)
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
        hom[i, g_w[idx] - 1, g_n[idx] - 1] = g_thr[idx]
    return _OfferTable(cap, over, speed, profiled, hom, rows, valid)


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
    grid, model_s = _grid(oracle, offers, c, notes)
    N = c.max_nodes
    b_ref = float(c.local_batch_size or oracle.default_local_batch())
    mixing = bool(c.heterogeneous and c.max_types >= 2 and N >= 2)

    tab = _offer_table(offers, grid, N)
    units, limits = _capacity_units(offers, c.capacity)
    # the most nodes of each offer alone within every limit of its market (inf: none counts it)
    cap_nodes = np.array([min((lim.max_nodes(t) for lim in c.capacity if lim.market is m), default=np.inf)
                          for t, m in zip(offers.instance_type, offers.market)], dtype=float)
    keep = _prune(offers, tab, mixing, limited=cap_nodes < N) if prune else tab.valid.copy()
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
    within = np.ones(n_cand, bool) if len(limits) else None  # inside every capacity limit
    g_thr = grid["throughput"].to_numpy(dtype=float); g_n = grid["nodes"].to_numpy()
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
            if within is not None:
                within[sl] = n <= cap_nodes[i]
            _goodput_into(thr[sl], raw[sl], rate[sl], ckpt)
            continue
        a, Bs = blk[1], blk[2]
        P = len(Bs)
        shp = (P, len(nA))
        r_raw = raw[sl].reshape(shp); r_price = price[sl].reshape(shp); r_rate = rate[sl].reshape(shp)
        wa, sa = float(offers.slots[a]), float(offers.slots[a] * tab.speed[a])
        wb, sb = offers.slots[Bs].astype(float)[:, None], (offers.slots[Bs] * tab.speed[Bs])[:, None]
        # total speed S (samples/ms) and global batch G
        S = sb * fB; S += sa * fA
        if c.global_batch_size:
            G: Any = float(c.global_batch_size)
        else:
            G = wb * fB; G += wa * fA; G *= b_ref
        # iteration = G / S (compute, equalised) + the slower link's overhead at the total node count
        over = np.maximum(over_s[Bs], over_s[a])
        np.divide(G, S, out=S); S += over  # S now holds the iteration time (ms)
        np.divide(G, S, out=r_raw); r_raw *= 1e3
        cap = cap_b[Bs]
        cap += cap_a[a]
        np.minimum(r_raw, cap, out=r_raw)
        np.multiply(offers.price[Bs][:, None], fB, out=r_price); r_price += offers.price[a] * fA
        np.multiply(offers.rate[Bs][:, None], fB, out=r_rate); r_rate += offers.rate[a] * fA
        spot[sl].reshape(shp)[:] = is_spot[Bs][:, None] | is_spot[a]
        if within is not None:
            w = within[sl].reshape(shp)
            for g in range(len(limits)):
                w &= (units[g, Bs][:, None] * fB + units[g, a] * fA) <= limits[g] + 1e-9
        _goodput_into(thr[sl], raw[sl], rate[sl], ckpt)  # while the block is still in cache

    with np.errstate(divide="ignore", invalid="ignore"):
        hours = np.where(thr > 0, (c.samples or 0.0) / (thr * 3600.0), np.inf) if c.samples else None
    usd_total = hours * price if hours is not None else None
    cat = {"thr": thr, "raw": raw, "price": price, "rate": rate, "spot": spot}
    space = _Space(offers, tab, grid, blocks, starts, b_ref, c.global_batch_size)

    masks: dict[str, np.ndarray] = {"usable": thr > 0}
    if c.budget_per_hour is not None:
        masks["budget"] = price <= c.budget_per_hour + 1e-9
    if c.total_budget is not None:
        masks["total_budget"] = usd_total <= c.total_budget + 1e-9
    if c.min_throughput is not None:
        masks["min_throughput"] = thr >= c.min_throughput - 1e-9
    if c.deadline_hours is not None:
        masks["deadline"] = hours <= c.deadline_hours + 1e-12
    if not c.spot:
        masks["spot"] = ~spot
    if c.max_interruption is not None:
        masks["max_interruption"] = rate <= c.max_interruption + 1e-12
    if within is not None:
        masks["capacity"] = within
    ok = masks["usable"].copy()
    for k, m in masks.items():
        if k != "usable":
            ok &= m
    feasible_idx = np.flatnonzero(ok)
    if len(feasible_idx) == 0:
        raise explain_infeasible(masks, cat, usd_total, hours, c, lambda j: _config_text(int(j), space))

    # ---- rank: a partial sort picks the leaders, a full sort orders only them
    fthr, fprice = thr[feasible_idx], price[feasible_idx]
    if obj is Objective.THROUGHPUT:
        primary, secondary = -fthr, fprice
    elif obj is Objective.COST:
        primary, secondary = (usd_total[feasible_idx] if usd_total is not None else fprice), -fthr
    else:
        primary, secondary = fprice / (fthr * 3600.0), -fthr
    if len(primary) > top:
        kth = np.partition(primary, top - 1)[top - 1]
        lead = np.flatnonzero(primary <= kth)
    else:
        lead = np.arange(len(primary))
    ranked = feasible_idx[lead[np.lexsort((secondary[lead], primary[lead]))][:top]]

    # ---- Pareto front (throughput up, $/h down) over the feasible set
    front = feasible_idx[_pareto(fthr, fprice)]
    if len(front) > pareto_limit:
        pick = np.unique(np.linspace(0, len(front) - 1, pareto_limit).round().astype(int))
        front = front[pick]

    def rec(j: int) -> Recommendation:
        return _recommendation(int(j), space, cat, hours, usd_total)

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
    notes.extend(n for n in getattr(oracle, "notes", []) if n not in notes)
    if getattr(oracle, "hit", False):
        notes.append("latency-model figures reused from the prediction cache (same model, profiles, catalog, rows)")
    return Result(obj, reason, c, n_cand, len(grid), pruned, time.perf_counter() - t_start, model_s, recs, pareto,
                  int(len(feasible_idx)), notes)


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


def _recommendation(j: int, space: _Space, cat: dict[str, "np.ndarray"], hours: "np.ndarray | None",
                    usd_total: "np.ndarray | None") -> Recommendation:
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
    else:
        a, bb, na, nb = _mix_parts(space, blk, k)
        ta, tb = offers.instance_type[a], offers.instance_type[bb]
        ma, mb = offers.market[a], offers.market[bb]
        market = ma.value if ma is mb else "mixed"
        wa, wb = int(offers.slots[a]) * na, int(offers.slots[bb]) * nb
        ra, rb = float(space.tab.speed[a]), float(space.tab.speed[bb])
        gb = float(space.global_batch) if space.global_batch else space.b_ref * (wa + wb)
        tc = gb / (wa * ra + wb * rb)
        split = {ta: ra * tc, tb: rb * tc}
        total = na + nb
        rows = grid[(grid["nodes"] == total) & (((grid["instance_type"] == ta) & (grid["workers_per_node"] == offers.slots[a])) |
                                                ((grid["instance_type"] == tb) & (grid["workers_per_node"] == offers.slots[bb])))]
        rel_lo = float((rows["interval_low_ms"] / rows["iteration_ms"]).min())
        rel_hi = float((rows["interval_high_ms"] / rows["iteration_ms"]).max())
        # the split takes each type's compute as linear in its batch; outside the batches profiled
        # it lies within ComputeCurve.bounds, and the equalised step within the slower type's
        lows, highs = [1.0], [1.0]
        for o, t in ((a, ta), (bb, tb)):
            b0, b1 = space.tab.profiled[o]
            if b1 and split[t] > b1:
                lows.append(b1 / split[t])
            elif b0 and split[t] < b0:
                highs.append(b0 / split[t])
        rel_lo, rel_hi = min(rel_lo, max(lows)), max(rel_hi, max(highs))
        it = float(gb / cat["raw"][j] * 1e3)  # after the sum-of-parts cap
        lo, hi = it * rel_lo, it * rel_hi
        srcs = set(grid[grid["instance_type"].isin([ta, tb])]["source"])
        source = "transferred" if "transferred" in srcs else "predicted"
        mixed, gpus, nodes = True, wa + wb, total
    thr_j, price_j = float(cat["thr"][j]), float(cat["price"][j])
    return Recommendation(
        config=config, market=market, gpus=gpus, nodes=nodes, batch_split=split,
        global_batch=gb, iteration_ms=it, interval_ms=(lo, hi), throughput_samples_per_s=thr_j,
        raw_throughput_samples_per_s=float(cat["raw"][j]), usd_per_hour=price_j,
        usd_per_million_samples=price_j / (thr_j * 3600.0) * 1e6 if thr_j > 0 else math.inf,
        interruptions_per_hour=float(cat["rate"][j]), source=source,
        mixed=mixed, hours_to_finish=float(hours[j]) if hours is not None else None,
        usd_to_finish=float(usd_total[j]) if usd_total is not None else None)


# --------------------------------------------------------------------------- infeasible


FLAG = {"budget": "--budget", "total_budget": "--total-budget", "min_throughput": "--min-throughput",
        "deadline": "--deadline", "spot": "--no-spot", "max_interruption": "--max-interruption",
        "capacity": "--available/--quotas"}


def explain_infeasible(masks: dict[str, "np.ndarray"], cat: dict[str, "np.ndarray"], usd_total: "np.ndarray | None",
                       hours: "np.ndarray | None", c: Constraints, config_of: Any) -> InfeasibleError:
    """Which constraint rules everything out, and the nearest feasible relaxation."""
    import numpy as np

    thr, price, rate = cat["thr"], cat["price"], cat["rate"]
    names = [k for k in masks if k != "usable"]

    def pick(idx: "np.ndarray", *keys: "np.ndarray") -> int:
        # the best by the first key, ties broken by the others (more throughput, less $/h, less risk),
        # so that a dominated configuration is never named where one that dominates it ties
        return int(idx[np.lexsort(tuple(k[idx] for k in reversed(keys)))[0]])

    if not masks["usable"].any():
        return InfeasibleError("The latency model predicts no usable throughput for any candidate.",
                               "Check the profile (srifty show) and the catalog filters.")
    blockers = []
    for k in names:
        others = np.logical_and.reduce([masks[o] for o in masks if o != k])
        if others.any():
            blockers.append((k, np.nonzero(others)[0]))
    if not blockers:
        return InfeasibleError(
            "No configuration meets the constraints, and relaxing any single one of "
            f"{', '.join(FLAG[k] for k in names)} is not enough.",
            "Relax two or more of them, raise --max-nodes, or widen --instance-types / --region.")
    lines = []
    for k, idx in blockers:
        if k == "budget":
            j = pick(idx, price, -thr, rate)
            lines.append(f"--budget ${c.budget_per_hour:.2f}/h rules everything out: the cheapest configuration "
                         f"meeting the other constraints ({config_of(j)}, {thr[j]:.1f} samples/s) costs "
                         f"${price[j]:.2f}/h; raise --budget to {math.ceil(price[j] * 100) / 100:.2f}")
        elif k == "total_budget":
            j = pick(idx, usd_total, -thr, price, rate)
            lines.append(f"--total-budget ${c.total_budget:.2f} rules everything out: the cheapest run that meets the "
                         f"others ({config_of(j)}) costs ${usd_total[j]:.2f}; raise --total-budget to "
                         f"{math.ceil(usd_total[j] * 100) / 100:.2f}")
        elif k == "min_throughput":
            j = pick(idx, -thr, price, rate)
            lines.append(f"--min-throughput {c.min_throughput:g} rules everything out: the fastest configuration "
                         f"meeting the other constraints ({config_of(j)}, ${price[j]:.2f}/h) reaches "
                         f"{thr[j]:.1f} samples/s; lower --min-throughput to {math.floor(thr[j] * 10) / 10:g}")
        elif k == "deadline":
            j = pick(idx, hours, price, rate)
            lines.append(f"--deadline {c.deadline_hours:g} h rules everything out: the fastest configuration meeting "
                         f"the others ({config_of(j)}) needs {hours[j]:.2f} h; extend --deadline to "
                         f"{math.ceil(hours[j] * 100) / 100:g}")
        elif k == "spot":
            j = pick(idx, price, -thr, rate)
            lines.append(f"--no-spot rules everything out: with spot, {config_of(j)} meets every other constraint at "
                         f"${price[j]:.2f}/h; allow --spot")
        elif k == "capacity":
            j = pick(idx, price, -thr, rate)
            over = exceeded_limits(config_of(j), c.capacity)
            lines.append(f"the capacity limits rule everything out: {config_of(j)} meets every other constraint at "
                         f"${price[j]:.2f}/h but exceeds {'; '.join(over) or 'them'}; give a larger --available "
                         "count or ask AWS for a higher quota")
        elif k == "max_interruption":
            j = pick(idx, rate, -thr, price)
            lines.append(f"--max-interruption {c.max_interruption:g}/h rules everything out: the least risky "
                         f"configuration meeting the others ({config_of(j)}) expects {rate[j]:.4g} interruptions/h; "
                         f"raise --max-interruption to {rate[j]:.4g}")
    hint = "Relax one of these (each alone is enough)." if len(lines) > 1 else "Relax it as shown."
    if "spot" not in masks and any(k == "budget" for k, _ in blockers) and not c.spot:
        hint += " Allowing --spot may also help."
    return InfeasibleError("No configuration meets every constraint. " + "; or ".join(lines) + ".", hint)

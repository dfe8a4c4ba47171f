"""Recommend cluster configurations: enumerate, predict, constrain, rank, Pareto.

The flow (library first; ``srifty recommend`` only formats what :func:`solve` returns):

1. **Offers**: every catalog instance type that passes the filters (region, name glob,
   GPU types for EC2) in each market it is sold in (on-demand, spot), with its price
   and interruption rate per node-hour.
2. **Latency model, once per distinct key**: a :class:`ThroughputOracle` predicts the
   iteration time (with interval and source) of every distinct
   (instance type, workers per node, nodes, per-worker batch) of the homogeneous grid —
   a few thousand rows. Nothing else calls the model.
3. **Prune** dominated offers: an offer whose full-node throughput is at most another
   offer's at every node count while costing at least as much per node (and risking at
   least as many interruptions) can never be the better choice in a mix; it is dropped
   before mixes are composed.
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
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from srifty.catalog import Market
from srifty.errors import SriftyError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd

    from srifty.catalog import Catalog
    from srifty.features import JobProfile
    from srifty.model import Predictor

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

    def validate(self) -> None:
        for name in ("budget_per_hour", "total_budget", "min_throughput", "deadline_hours", "samples"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise SriftyError(f"--{name.replace('_per_hour', '').replace('_', '-')} must be positive, got {v}.")
        if self.max_nodes < 1:
            raise SriftyError(f"--max-nodes must be at least 1, got {self.max_nodes}.")
        if self.max_types < 1:
            raise SriftyError(f"--max-types must be at least 1, got {self.max_types}.")
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


# --------------------------------------------------------------------------- the oracle


class ThroughputOracle(Protocol):
    """Predicts homogeneous rows. ``rows`` has instance_type, workers_per_node, nodes,
    local_batch_size; the result adds iteration_ms, interval_low_ms, interval_high_ms,
    compute_ms (per-worker compute at that batch) and source (measured|predicted|transferred)."""

    def predict_rows(self, rows: "pd.DataFrame") -> "pd.DataFrame": ...

    def default_local_batch(self) -> int: ...


class ModelOracle:
    """Adapter over the latency model (:class:`srifty.model.Predictor`) and its FeatureBuilder.

    Same figures as ``Predictor.predict`` (measured where the profile has the exact run,
    the single-worker compute curve for one worker, the learned model otherwise), with the
    model run once over all rows. ``predictor=None`` uses the analytical simulator alone
    (source still says predicted/transferred; the interval is then the point).
    """

    def __init__(self, job: "JobProfile", catalog: Any, predictor: "Predictor | None" = None) -> None:
        self.job = job
        self.catalog = catalog
        self.predictor = predictor
        if predictor is not None:
            self.builder = predictor.builder(job, catalog)
        else:
            from srifty.features import FeatureBuilder

            self.builder = FeatureBuilder(job, catalog)
        self.notes: list[str] = []

    def default_local_batch(self) -> int:
        counts: dict[int, int] = {}
        for r in self.job.runs:
            counts[r.local_batch_size] = counts.get(r.local_batch_size, 0) + 1
        return max(sorted(counts), key=lambda b: counts[b])

    def predict_rows(self, rows: "pd.DataFrame") -> "pd.DataFrame":
        import numpy as np

        from srifty.configspec import ClusterConfig, NodeGroup

        configs = [(ClusterConfig((NodeGroup(int(n), str(t), int(w)),)), float(b))
                   for t, w, n, b in zip(rows["instance_type"], rows["workers_per_node"], rows["nodes"],
                                         rows["local_batch_size"])]
        X = self.builder.frame(configs)
        sim = X["sim_ms"].to_numpy(dtype=float)
        if self.predictor is not None:
            it = np.asarray(self.predictor.latency.predict(X), dtype=float)
            lo, hi = (np.asarray(a, dtype=float) for a in self.predictor.latency.predict_interval(X))
        else:
            it, lo, hi = sim.copy(), sim.copy(), sim.copy()
        world = (rows["workers_per_node"] * rows["nodes"]).to_numpy()
        single = world == 1  # one worker: the compute curve is the estimate (as Predictor.predict)
        it = np.where(single, sim, it)
        lo, hi = np.minimum(lo, it), np.maximum(hi, it)
        transferred = X["transferred"].to_numpy() > 0.5
        source = np.where(transferred, "transferred", "predicted").astype(object)
        for i, (t, w, n, b) in enumerate(zip(rows["instance_type"], rows["workers_per_node"], rows["nodes"],
                                             rows["local_batch_size"])):
            if float(b).is_integer():
                m = self.job.measured(str(t), [int(w)] * int(n), int(b))
                if m is not None:
                    it[i] = lo[i] = hi[i] = m
                    source[i] = "measured"
        for t in sorted(set(rows["instance_type"])):
            for note in self.builder.hardware(str(t)).notes:
                if note not in self.notes:
                    self.notes.append(note)
        out = rows.copy()
        out["iteration_ms"] = it
        out["interval_low_ms"] = lo
        out["interval_high_ms"] = hi
        out["compute_ms"] = X["compute_ms"].to_numpy(dtype=float)
        out["source"] = source
        return out


class CachedOracle:
    """Remembers an oracle's predictions on disk (``.npz``, no pickle), keyed by everything that
    determines them: the model file, the profiles, the catalog file and the rows asked for.

    The wrapped oracle is built only on a miss (loading a trained model costs seconds), so a
    repeated recommendation over the same inputs skips the model entirely.
    """

    COLUMNS = ("iteration_ms", "interval_low_ms", "interval_high_ms", "compute_ms")

    def __init__(self, make: Any, identity: dict[str, Any], default_batch: int, directory: Any = None) -> None:
        self.make = make
        self.identity = identity
        self._default_batch = default_batch
        self._inner: Any = None
        self.directory = directory
        self.hit = False
        self.notes: list[str] = []

    def default_local_batch(self) -> int:
        return self._default_batch

    def _path(self, rows: "pd.DataFrame") -> Any:
        import hashlib
        import json
        from pathlib import Path

        from srifty.catalog import cache_dir

        h = hashlib.sha256(json.dumps(self.identity, sort_keys=True, default=str).encode())
        h.update(rows[["instance_type", "workers_per_node", "nodes", "local_batch_size"]].to_csv(index=False).encode())
        return Path(self.directory or (cache_dir() / "predictions")) / f"{h.hexdigest()[:32]}.npz"

    def predict_rows(self, rows: "pd.DataFrame") -> "pd.DataFrame":
        import numpy as np

        path = self._path(rows)
        if path.exists():
            try:
                with np.load(path, allow_pickle=False) as z:
                    out = rows.copy()
                    for c in self.COLUMNS:
                        out[c] = z[c]
                    out["source"] = z["source"].astype(object)
                    self.notes = [str(n) for n in z["notes"]]
                self.hit = True
                return out
            except (OSError, KeyError, ValueError):
                pass
        if self._inner is None:
            self._inner = self.make()
        out = self._inner.predict_rows(rows)
        self.notes = list(getattr(self._inner, "notes", []))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp.npz")
            np.savez(tmp, **{c: out[c].to_numpy(dtype=float) for c in self.COLUMNS},
                     source=out["source"].to_numpy().astype(str), notes=np.array(self.notes, dtype=str))
            tmp.replace(path)
        except OSError:
            pass
        return out


def file_identity(paths: Sequence[Any]) -> list[tuple[str, int, str]]:
    """(path, size, sha256) of files (directories expanded), for cache keys."""
    import hashlib
    from pathlib import Path

    out = []
    for p in paths:
        p = Path(p)
        files = sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p]
        for f in files:
            if f.exists():
                out.append((str(f.resolve()), f.stat().st_size, hashlib.sha256(f.read_bytes()).hexdigest()))
    return out


class ProfiledHostsCatalog:
    """A catalog that also knows the hosts a profile was recorded on (e.g. ``local``), so
    that their compute can be transferred to catalog types by the model's transfer path.

    A profiled host is described by what the profile recorded: its usable CPUs (no GPU)."""

    def __init__(self, catalog: Any, hosts: dict[str, Any]) -> None:
        self.inner = catalog
        self.hosts = hosts

    def get(self, name: str) -> Any:
        if name in self.hosts:
            return self.hosts[name]
        return self.inner.get(name)

    def gpu_spec(self, gpu_name: str) -> Any:
        return self.inner.gpu_spec(gpu_name)

    @property
    def warnings(self) -> list[str]:
        return list(getattr(self.inner, "warnings", []))


def profiled_hosts(profiles: Sequence[Any], catalog: Any) -> dict[str, Any]:
    """InstanceType entries for profiled host types the catalog does not know."""
    from srifty.catalog import InstanceType

    out: dict[str, Any] = {}
    for p in profiles:
        cl = (p.doc or {}).get("cluster") or {}
        for h in cl.get("hosts") or []:
            name = h.get("instance_type")
            if not name or name in out:
                continue
            try:
                catalog.get(name)
                continue
            except SriftyError:
                pass
            spec = h.get("spec") or {}
            cpus = spec.get("cpu_quota_cores") or spec.get("usable_cpus") or spec.get("logical_cpus") or 1
            out[name] = InstanceType(name=name, family="profiled-host", arch=str(spec.get("arch") or ""),
                                     gpu_name="", gpu_count=0, gpu_memory_gib=None, accelerator_name="",
                                     accelerator_count=0, vcpus=float(cpus), memory_gib=spec.get("memory_gib"),
                                     network_gbps=None, network_up_to_gbps=None, efa_interfaces=0,
                                     intra_node_link="", intra_node_bandwidth_gbytes_per_s=None)
    return out


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
            "constraints": {k: v for k, v in asdict(self.constraints).items() if v is not None},
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


def _goodput_factor(rate: "np.ndarray", c: Constraints) -> "np.ndarray":
    import numpy as np

    return np.clip(1.0 - rate * (c.restart_overhead_h + c.checkpoint_interval_h / 2.0), 0.0, 1.0)


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


def _prune(offers: Offers, thr: "np.ndarray", valid: "np.ndarray") -> "np.ndarray":
    """Boolean keep-mask over offers: drop an offer that another offer matches or beats on
    goodput at every node count while costing no more per node and risking no more."""
    import numpy as np

    k = len(offers.instance_type)
    keep = valid.copy()
    idx = np.arange(k)
    for i in range(k):
        if not valid[i]:
            continue
        better = ((thr >= thr[i]).all(axis=1) & (offers.price <= offers.price[i]) & (offers.rate <= offers.rate[i])
                  & valid & (idx != i))
        strictly = (thr > thr[i]).any(axis=1) | (offers.price < offers.price[i]) | (offers.rate < offers.rate[i])
        if (better & (strictly | (idx < i))).any():  # of exact equals, the first is kept
            keep[i] = False
    return keep


def solve(oracle: ThroughputOracle, catalog: Any, constraints: Constraints, objective: Objective | None = None,
          top: int = 10, pareto_limit: int = 50) -> Result:
    """Every candidate evaluated, constrained and ranked; raises :class:`InfeasibleError` when none is feasible."""
    import numpy as np

    c = constraints
    c.validate()
    t_start = time.perf_counter()
    obj, reason = choose_objective(c, objective)
    offers, notes = build_offers(catalog, c)
    grid, model_s = _grid(oracle, offers, c, notes)
    N = c.max_nodes
    b_ref = float(c.local_batch_size or oracle.default_local_batch())

    # ---- per-offer arrays from the grid (full nodes: every slot used)
    known = set(grid["instance_type"])
    valid = np.array([t in known for t in offers.instance_type])
    full_rows = grid[grid["workers_per_node"] == grid["instance_type"].map(
        dict(zip(offers.instance_type, offers.slots.tolist())))]
    full: dict[str, dict[str, np.ndarray]] = {}
    for t, g in full_rows.groupby("instance_type"):
        g = g.sort_values("nodes")
        full[t] = {k: g[k].to_numpy() for k in ("throughput", "iteration_ms", "interval_low_ms", "interval_high_ms",
                                                "overhead_ms", "compute_ms", "local_batch_size")}
        full[t]["source"] = g["source"].to_numpy()
    empty = np.zeros(N)
    nodes_axis = np.arange(1, N + 1)
    goodput_full = {}
    for i, t in enumerate(offers.instance_type):
        if t in full:
            goodput_full[(t, offers.market[i])] = full[t]["throughput"] * _goodput_factor(
                offers.rate[i] * nodes_axis, c)
    offer_thr = np.stack([goodput_full.get((t, m), empty) for t, m in zip(offers.instance_type, offers.market)])
    keep = _prune(offers, offer_thr, valid)
    keep_i = np.nonzero(keep)[0]
    pruned = [f"{offers.instance_type[i]} ({offers.market[i].value})" for i in np.nonzero(valid & ~keep)[0]]

    # ---- homogeneous candidates: every kept offer × workers per node × nodes
    parts: list[dict[str, np.ndarray]] = []
    labels: list[tuple] = []  # how to rebuild each block's rows
    for i in keep_i:
        t, m = offers.instance_type[i], offers.market[i]
        g = grid[grid["instance_type"] == t]
        n = g["nodes"].to_numpy()
        lam = offers.rate[i] * n
        gp = g["throughput"].to_numpy() * _goodput_factor(lam, c)
        parts.append({"thr": gp, "raw": g["throughput"].to_numpy(), "price": offers.price[i] * n, "rate": lam,
                      "nodes": n, "gpus": g["world"].to_numpy(), "spot": np.full(len(n), m is Market.SPOT)})
        labels.append(("hom", i, g.index.to_numpy()))

    # ---- mixes of two offers of different types, full nodes, nA + nB <= N
    if c.heterogeneous and c.max_types >= 2 and N >= 2:
        nA, nB = np.meshgrid(nodes_axis, nodes_axis, indexing="ij")
        sel = (nA + nB) <= N
        nA, nB = nA[sel], nB[sel]
        pairs = [(a, b) for ai, a in enumerate(keep_i) for b in keep_i[ai + 1:]
                 if offers.instance_type[a] != offers.instance_type[b]]
        if pairs:
            A = np.array([p[0] for p in pairs]); B = np.array([p[1] for p in pairs])
            fA = [full[offers.instance_type[a]] for a in A]; fB = [full[offers.instance_type[b]] for b in B]

            def col(fs: list, key: str) -> np.ndarray:
                return np.stack([f[key] for f in fs])  # pairs × N

            # per-worker speed (samples/ms) from one full node's compute at its batch
            rA = col(fA, "local_batch_size")[:, 0] / col(fA, "compute_ms")[:, 0]
            rB = col(fB, "local_batch_size")[:, 0] / col(fB, "compute_ms")[:, 0]
            wA, wB = offers.slots[A], offers.slots[B]
            WA = wA[:, None] * nA[None, :]; WB = wB[:, None] * nB[None, :]
            G = (np.full(WA.shape, float(c.global_batch_size)) if c.global_batch_size else b_ref * (WA + WB))
            Tc = G / (WA * rA[:, None] + WB * rB[:, None])
            tot = nA + nB - 1  # index of total node count
            oA, oB = col(fA, "overhead_ms")[:, tot], col(fB, "overhead_ms")[:, tot]
            over = np.maximum(oA, oB)
            it = Tc + over
            raw = G / it * 1e3
            cap = col(fA, "throughput")[:, nA - 1] + col(fB, "throughput")[:, nB - 1]
            raw = np.minimum(raw, cap)
            lam = offers.rate[A][:, None] * nA + offers.rate[B][:, None] * nB
            gp = raw * _goodput_factor(lam, c)
            price = offers.price[A][:, None] * nA + offers.price[B][:, None] * nB
            P = len(pairs)
            parts.append({"thr": gp.ravel(), "raw": raw.ravel(), "price": price.ravel(), "rate": lam.ravel(),
                          "nodes": np.broadcast_to(nA + nB, (P, len(nA))).ravel(),
                          "gpus": (WA + WB).ravel(),
                          "spot": ((np.array([offers.market[a] is Market.SPOT for a in A])[:, None] |
                                    np.array([offers.market[b] is Market.SPOT for b in B])[:, None])
                                   & np.ones((1, len(nA)), bool)).ravel()})
            labels.append(("mix", A, B, nA, nB, rA, rB, G.ravel(), Tc.ravel(), it.ravel()))

    cat = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    n_cand = len(cat["thr"])
    thr, price = cat["thr"], cat["price"]
    with np.errstate(divide="ignore", invalid="ignore"):
        usd_per_m = np.where(thr > 0, price / (thr * 3600.0) * 1e6, np.inf)
        hours = np.where(thr > 0, (c.samples or 0.0) / (thr * 3600.0), np.inf) if c.samples else None
    usd_total = hours * price if hours is not None else None

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
        masks["spot"] = ~cat["spot"]
    if c.max_interruption is not None:
        masks["max_interruption"] = cat["rate"] <= c.max_interruption + 1e-12
    ok = np.logical_and.reduce(list(masks.values()))
    feasible_idx = np.nonzero(ok)[0]
    if len(feasible_idx) == 0:
        raise explain_infeasible(masks, cat, usd_total, hours, c, lambda j: _config_text(j, labels, parts, offers, grid))

    # ---- rank: a partial sort picks the leaders, a full sort orders only them
    fthr, fprice = thr[feasible_idx], price[feasible_idx]
    if obj is Objective.THROUGHPUT:
        primary, secondary = -fthr, fprice
    elif obj is Objective.COST:
        primary, secondary = (usd_total[feasible_idx] if usd_total is not None else fprice), -fthr
    else:
        primary, secondary = usd_per_m[feasible_idx], -fthr
    if len(primary) > top:
        kth = np.partition(primary, top - 1)[top - 1]
        lead = np.nonzero(primary <= kth)[0]
    else:
        lead = np.arange(len(primary))
    ranked = feasible_idx[lead[np.lexsort((secondary[lead], primary[lead]))][:top]]

    # ---- Pareto front (throughput up, $/h down) over the feasible set, vectorised
    order = np.lexsort((-fthr, fprice))
    t_sorted = fthr[order]
    prev_best = np.concatenate(([-np.inf], np.maximum.accumulate(t_sorted)[:-1]))
    front = list(feasible_idx[order[t_sorted > prev_best + 1e-9]])
    if len(front) > pareto_limit:
        pick = np.unique(np.linspace(0, len(front) - 1, pareto_limit).round().astype(int))
        front = [front[i] for i in pick]

    def rec(j: int) -> Recommendation:
        return _recommendation(int(j), labels, parts, offers, grid, cat, usd_per_m, hours, usd_total)

    recs = [rec(j) for j in ranked]
    for k, r in enumerate(recs):
        r.rank = k + 1
    recs[0].chosen = True
    pareto = [rec(j) for j in front]
    chosen_cfg = recs[0].config
    for p in pareto:
        p.chosen = p.config == chosen_cfg
    if pruned:
        notes.append(f"pruned {len(pruned)} dominated offer(s) before composing mixes: {', '.join(pruned[:8])}"
                     + (" …" if len(pruned) > 8 else ""))
    notes.extend(n for n in getattr(oracle, "notes", []) if n not in notes)
    if getattr(oracle, "hit", False):
        notes.append("latency-model figures reused from the prediction cache (same model, profiles, catalog, rows)")
    return Result(obj, reason, c, n_cand, len(grid), pruned, time.perf_counter() - t_start, model_s, recs, pareto,
                  int(len(feasible_idx)), notes)


def _locate(j: int, parts: list[dict[str, Any]]) -> tuple[int, int]:
    for b, p in enumerate(parts):
        if j < len(p["thr"]):
            return b, j
        j -= len(p["thr"])
    raise IndexError(j)


def _config_text(j: int, labels: list[tuple], parts: list[dict[str, Any]], offers: Offers, grid: "pd.DataFrame") -> str:
    b, k = _locate(j, parts)
    lab = labels[b]
    if lab[0] == "hom":
        i, gidx = lab[1], lab[2]
        row = grid.loc[gidx[k]]
        spot = "@spot" if offers.market[i] is Market.SPOT else ""
        wpn = "" if int(row.workers_per_node) == int(offers.slots[i]) else f":{int(row.workers_per_node)}"
        return f"{int(row.nodes)}x{row.instance_type}{wpn}{spot}"
    A, B, nA, nB = lab[1], lab[2], lab[3], lab[4]
    q = len(nA)
    p, s = divmod(k, q)
    a, bb = A[p], B[p]
    sa = "@spot" if offers.market[a] is Market.SPOT else ""
    sb = "@spot" if offers.market[bb] is Market.SPOT else ""
    return f"{nA[s]}x{offers.instance_type[a]}{sa}+{nB[s]}x{offers.instance_type[bb]}{sb}"


def _recommendation(j: int, labels: list[tuple], parts: list[dict[str, Any]], offers: Offers, grid: "pd.DataFrame",
                    cat: dict[str, "np.ndarray"], usd_per_m: "np.ndarray", hours: "np.ndarray | None",
                    usd_total: "np.ndarray | None") -> Recommendation:
    b, k = _locate(j, parts)
    lab = labels[b]
    config = _config_text(j, labels, parts, offers, grid)
    if lab[0] == "hom":
        i = lab[1]
        row = grid.loc[lab[2][k]]
        market = offers.market[i].value
        split = {str(row.instance_type): float(row.local_batch_size)}
        gb = float(row.local_batch_size * row.world)
        it, lo, hi, source = float(row.iteration_ms), float(row.interval_low_ms), float(row.interval_high_ms), str(row.source)
        mixed = False
    else:
        A, B, nA, nB, rA, rB, G, Tc, itm = lab[1:]
        q = len(nA)
        p, s = divmod(k, q)
        a, bb = A[p], B[p]
        ta, tb = offers.instance_type[a], offers.instance_type[bb]
        ma, mb = offers.market[a], offers.market[bb]
        market = ma.value if ma is mb else "mixed"
        split = {ta: float(rA[p] * Tc[k]), tb: float(rB[p] * Tc[k])}
        gb = float(G[k])
        total = int(nA[s] + nB[s])
        rows = grid[(grid["nodes"] == total) & (((grid["instance_type"] == ta) & (grid["workers_per_node"] == offers.slots[a])) |
                                                ((grid["instance_type"] == tb) & (grid["workers_per_node"] == offers.slots[bb])))]
        rel_lo = float((rows["interval_low_ms"] / rows["iteration_ms"]).min())
        rel_hi = float((rows["interval_high_ms"] / rows["iteration_ms"]).max())
        it = float(gb / cat["raw"][j] * 1e3)  # after the sum-of-parts cap
        lo, hi = it * rel_lo, it * rel_hi
        srcs = set(grid[grid["instance_type"].isin([ta, tb])]["source"])
        source = "transferred" if "transferred" in srcs else "predicted"
        mixed = True
    return Recommendation(
        config=config, market=market, gpus=int(cat["gpus"][j]), nodes=int(cat["nodes"][j]), batch_split=split,
        global_batch=gb, iteration_ms=it, interval_ms=(lo, hi), throughput_samples_per_s=float(cat["thr"][j]),
        raw_throughput_samples_per_s=float(cat["raw"][j]), usd_per_hour=float(cat["price"][j]),
        usd_per_million_samples=float(usd_per_m[j]), interruptions_per_hour=float(cat["rate"][j]), source=source,
        mixed=mixed, hours_to_finish=float(hours[j]) if hours is not None else None,
        usd_to_finish=float(usd_total[j]) if usd_total is not None else None)


# --------------------------------------------------------------------------- infeasible


FLAG = {"budget": "--budget", "total_budget": "--total-budget", "min_throughput": "--min-throughput",
        "deadline": "--deadline", "spot": "--no-spot", "max_interruption": "--max-interruption"}


def explain_infeasible(masks: dict[str, "np.ndarray"], cat: dict[str, "np.ndarray"], usd_total: "np.ndarray | None",
                       hours: "np.ndarray | None", c: Constraints, config_of: Any) -> InfeasibleError:
    """Which constraint rules everything out, and the nearest feasible relaxation."""
    import numpy as np

    thr, price, rate = cat["thr"], cat["price"], cat["rate"]
    names = [k for k in masks if k != "usable"]
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
            j = idx[np.argmin(price[idx])]
            lines.append(f"--budget ${c.budget_per_hour:.2f}/h rules everything out: the cheapest configuration "
                         f"meeting the other constraints ({config_of(j)}, {thr[j]:.1f} samples/s) costs "
                         f"${price[j]:.2f}/h; raise --budget to {math.ceil(price[j] * 100) / 100:.2f}")
        elif k == "total_budget":
            j = idx[np.argmin(usd_total[idx])]
            lines.append(f"--total-budget ${c.total_budget:.2f} rules everything out: the cheapest run that meets the "
                         f"others ({config_of(j)}) costs ${usd_total[j]:.2f}; raise --total-budget to "
                         f"{math.ceil(usd_total[j] * 100) / 100:.2f}")
        elif k == "min_throughput":
            j = idx[np.argmax(thr[idx])]
            lines.append(f"--min-throughput {c.min_throughput:g} rules everything out: the fastest configuration "
                         f"meeting the other constraints ({config_of(j)}, ${price[j]:.2f}/h) reaches "
                         f"{thr[j]:.1f} samples/s; lower --min-throughput to {math.floor(thr[j] * 10) / 10:g}")
        elif k == "deadline":
            j = idx[np.argmin(hours[idx])]
            lines.append(f"--deadline {c.deadline_hours:g} h rules everything out: the fastest configuration meeting "
                         f"the others ({config_of(j)}) needs {hours[j]:.2f} h; extend --deadline to "
                         f"{math.ceil(hours[j] * 100) / 100:g}")
        elif k == "spot":
            j = idx[np.argmin(price[idx])]
            lines.append(f"--no-spot rules everything out: with spot, {config_of(j)} meets every other constraint at "
                         f"${price[j]:.2f}/h; allow --spot")
        elif k == "max_interruption":
            j = idx[np.argmin(rate[idx])]
            lines.append(f"--max-interruption {c.max_interruption:g}/h rules everything out: the least risky "
                         f"configuration meeting the others ({config_of(j)}) expects {rate[j]:.4g} interruptions/h; "
                         f"raise --max-interruption to {rate[j]:.4g}")
    hint = "Relax one of these (each alone is enough)." if len(lines) > 1 else "Relax it as shown."
    if "spot" not in masks and any(k == "budget" for k, _ in blockers) and not c.spot:
        hint += " Allowing --spot may also help."
    return InfeasibleError("No configuration meets every constraint. " + "; or ".join(lines) + ".", hint)


# --------------------------------------------------------------------------- loading


def load_inputs(profile_paths: Sequence[str], catalog: "Catalog") -> tuple["JobProfile", Any]:
    """The job of the given profiles and a catalog that also knows their profiled hosts."""
    from srifty import profile as profile_mod
    from srifty.features import job_from_profiles

    profiles = profile_mod.load_many(list(profile_paths))
    job = job_from_profiles(profiles)
    hosts = profiled_hosts(profiles, catalog)
    return job, (ProfiledHostsCatalog(catalog, hosts) if hosts else catalog)


def default_model_path() -> "Any":
    """Where ``srifty recommend`` keeps the trained latency model between runs."""
    import os
    from pathlib import Path

    from srifty.catalog import cache_dir

    return Path(os.environ.get("SRIFTY_MODEL") or (cache_dir() / "latency-model.skops"))


def load_predictor(model: str | None, say: Any = None) -> "Predictor | None":
    """``simulator``: none (analytical simulator only); a path: that skops file; None: the cached
    model, trained once on the shipped corpus (profiles/pollux, profiles/emulated) and saved."""
    from pathlib import Path

    from srifty import model as model_mod

    if model == "simulator":
        return None
    if model:
        return model_mod.load(model)
    path = default_model_path()
    if Path(path).exists():
        return model_mod.load(path)
    if say:
        say(f"Training the latency model on the shipped corpus once (about a minute); it is saved to {path}.")
    pred = model_mod.default_predictor(quick=True)
    model_mod.save(pred, path)
    return pred

"""Grouped validation of the latency model: never tests on what it trained on.

Splits (on whatever corpora exist):

- ``lomo-1gpu``: leave one model out; the held-out model is known only by its single-GPU
  runs and its parameter count (when the trace states it); tested on all its multi-GPU runs
  (one node or several).
- ``lomo-1node``: the same, but the held-out model's profile is one node (1..N GPUs of one
  instance), as a user profiling on a single VM would have; tested on its multi-node runs.
- ``nodes>4``: extrapolation in scale: trained on every model's runs with at most 4 nodes,
  tested on runs with more.
- ``loio``: leave one instance type out, where the corpus has several (e.g. profiles/emulated):
  the held-out type's compute is transferred from the other types (measured CPU factor or
  spec ratio), and its runs are tested.
- ``loco``: leave one configuration out (emulated corpus): each multi-host configuration in
  turn (every model's runs on it) is predicted from each model's single-host profiles and
  the allreduce sweeps of the *other* configurations; the residual model trains on the other
  configurations' runs.

Several corpora (e.g. profiles/pollux and profiles/emulated) are validated separately
(their models never mix in a fold), and each split is named ``<corpus>/<split>``.

Baselines on the same rows: the analytical simulator with catalog link figures
(``simulator``), linear scaling of single-worker throughput (``linear``), and a
Pollux-style model (``pollux``): T = (T_compute^γ + T_sync^γ)^(1/γ) with
T_sync = α + β·(K − 2) across nodes (α_local, β_local within one node), fitted on the
training rows, scaled by gradient size where known.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from srifty.errors import SriftyError
from srifty.features import CollectivePoint, JobProfile, Run, run_config
from srifty.gpuspeed import SingleGpuRate, read_lambda_single_gpu
from srifty.comm import NCCL_MIN_BYTES, CommModel
from srifty.features import AllreduceRow
from srifty.model import MIN_RESIDUAL_ROWS, NO_RESIDUAL_HALF_WIDTH, LatencyModel, table_for
from srifty.outputs import save_figure

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from srifty.catalog import Catalog
    from srifty.gpuspeed import TransferError

METHODS = ("model", "simulator", "pollux", "linear")


@dataclass
class SplitResult:
    split: str
    fold: str
    n: int
    errors: dict[str, "np.ndarray"]  # method -> absolute percentage errors
    measured: "np.ndarray"
    predicted: dict[str, "np.ndarray"]
    grad_known: "np.ndarray | None" = None  # rows whose gradient size the profile states (not estimated, not unknown)
    inside: "np.ndarray | None" = None  # rows whose measured time lies in the model's predicted interval
    nodes: "np.ndarray | None" = None  # each row's node count
    # each row's measured share of the step beyond its slowest worker's compute alone (exposed
    # communication and what data parallelism costs besides): its regime
    beyond_compute: "np.ndarray | None" = None

    def stats(self) -> dict[str, dict[str, float]]:
        import numpy as np

        return {m: {"mape": float(np.mean(e)), "median": float(np.median(e)), "p90": float(np.percentile(e, 90))}
                for m, e in self.errors.items()}


@dataclass(frozen=True)
class ReplicateFloor:
    """How far a corpus's repeated measurements of one configuration lie from each other: the
    error a predictor that knew each configuration's true mean step time would still make."""

    corpus: str
    rows: int  # multi-worker rows measured more than once (as the model sees them)
    configurations: int  # distinct (model, configuration, per-worker batch) among them
    mape: float  # estimated absolute percentage error of the true mean, %
    by_model: tuple[tuple[str, float, int], ...]  # (model, MAPE %, rows)


def replicate_floor(jobs: Sequence[JobProfile], corpus: str = "") -> ReplicateFloor | None:
    """The noise floor of a corpus's multi-worker runs, from the rows it measured more than once.

    Rows are replicates when the latency model cannot tell them apart: same model, same per-worker
    batch, and the same instance type and worker count on each node up to the order of the nodes
    (Pollux recorded placements 1+2+1+2 and 1+1+2+2 as different runs). Each row is compared with
    the mean of its replicates: |y − mean of the others| · √((n−1)/n) / y estimates its distance
    from the configuration's true mean (the √ term removes the others' own noise, so a pair
    is not counted twice), averaged over rows. None when nothing was measured twice.
    """
    import numpy as np

    groups: dict[tuple[Any, ...], list[float]] = {}
    for j in jobs:
        for r in j.runs:
            if r.world_size < 2:
                continue
            types = [t for g in run_config(r).groups for t in [g.instance_type] * g.count]
            nodes = tuple(sorted(zip(types, r.workers_per_node)))
            groups.setdefault((j.model, nodes, r.local_batch_size), []).append(r.step_ms)
    per_model: dict[str, list[float]] = {}
    for (model, _, _), ys in groups.items():
        n = len(ys)
        if n < 2:
            continue
        y = np.asarray(ys, dtype=float)
        others = (y.sum() - y) / (n - 1)
        per_model.setdefault(model, []).extend(np.abs(y - others) * np.sqrt((n - 1) / n) / y * 100)
    if not per_model:
        return None
    every = [e for es in per_model.values() for e in es]
    configurations = sum(1 for (m, _, _), ys in groups.items() if len(ys) >= 2)
    return ReplicateFloor(corpus, len(every), configurations, float(np.mean(every)),
                          tuple((m, float(np.mean(es)), len(es)) for m, es in sorted(per_model.items())))


@dataclass
class ValidationReport:
    results: list[SplitResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    floors: list[ReplicateFloor] = field(default_factory=list)

    def pooled(self) -> dict[str, dict[str, dict[str, float]]]:
        """Per split (all folds pooled): method -> {mape, median, p90, n}."""
        import numpy as np

        out: dict[str, dict[str, dict[str, float]]] = {}
        for split in dict.fromkeys(r.split for r in self.results):
            rs = [r for r in self.results if r.split == split]
            out[split] = {}
            for m in METHODS:
                e = np.concatenate([r.errors[m] for r in rs])
                out[split][m] = {"mape": float(np.mean(e)), "median": float(np.median(e)),
                                 "p90": float(np.percentile(e, 90)), "n": int(len(e))}
            if all(r.inside is not None for r in rs):
                out[split]["model"]["inside_interval"] = float(np.mean(np.concatenate([r.inside for r in rs])))
        return out

    def _grad_known_rows(self, split: str) -> tuple["np.ndarray", "np.ndarray"] | None:
        """The model's errors and the node counts over ``split``'s rows whose gradient size is
        stated; None when the split has no such flags or every row has it stated."""
        import numpy as np

        rs = [r for r in self.results if r.split == split and r.grad_known is not None]
        if not rs or all(r.grad_known.all() for r in rs):
            return None
        e = np.concatenate([r.errors["model"][r.grad_known] for r in rs])
        n = np.concatenate([r.nodes[r.grad_known] if r.nodes is not None else np.full(int(r.grad_known.sum()), np.nan)
                            for r in rs])
        return e, n

    def pooled_grad_known(self) -> dict[str, tuple[float, int]]:
        """(model MAPE, rows) over the rows whose gradient size is stated, for the splits where
        some rows lack it (e.g. Pollux models without a sourced parameter count)."""
        import numpy as np

        out = {}
        for split in dict.fromkeys(r.split for r in self.results):
            rows = self._grad_known_rows(split)
            if rows is not None and len(rows[0]):
                out[split] = (float(np.mean(rows[0])), int(len(rows[0])))
        return out

    def grad_known_by_nodes(self) -> dict[str, tuple[tuple[float, int], tuple[float, int]]]:
        """Per split of :meth:`pooled_grad_known` with both kinds of row: (model MAPE, rows) over the
        gradient-size-stated rows on one node (several workers) and over those on several nodes."""
        import numpy as np

        out = {}
        for split in self.pooled_grad_known():
            e, n = self._grad_known_rows(split)
            one, many = e[n == 1], e[n > 1]
            if len(one) and len(many):
                out[split] = ((float(np.mean(one)), len(one)), (float(np.mean(many)), len(many)))
        return out


    def breakdown(self, group: Callable[[SplitResult], "np.ndarray"], labels: Sequence[str]
                  ) -> dict[str, list[dict[str, Any]]]:
        """Per split, per group of rows (``group`` maps a fold's rows to indices into ``labels``):
        rows, the model's MAPE, the best baseline's, and the share inside the model's interval."""
        import numpy as np

        out: dict[str, list[dict[str, Any]]] = {}
        for split in dict.fromkeys(r.split for r in self.results):
            rs = [r for r in self.results if r.split == split and r.inside is not None]
            if not rs:
                continue
            idx = np.concatenate([group(r) for r in rs])
            errors = {m: np.concatenate([r.errors[m] for r in rs]) for m in METHODS}
            inside = np.concatenate([r.inside for r in rs])
            cells = []
            for k, label in enumerate(labels):
                mine = idx == k
                if not mine.any():
                    continue
                base = min(METHODS[1:], key=lambda m: float(np.mean(errors[m][mine])))
                cells.append({"group": label, "rows": int(mine.sum()), "model_mape": float(np.mean(errors["model"][mine])),
                              "baseline": base, "baseline_mape": float(np.mean(errors[base][mine])),
                              "inside_interval": float(np.mean(inside[mine]))})
            out[split] = cells
        return out

    def by_regime(self) -> dict[str, list[dict[str, Any]]]:
        """:meth:`breakdown` by REGIMES: the measured share of the step beyond compute alone."""
        import numpy as np

        edges = [hi for _, hi in REGIMES[:-1]]
        return self.breakdown(lambda r: np.digitize(r.beyond_compute, edges) if r.beyond_compute is not None
                              else np.full(r.n, -1), [label for label, _ in REGIMES])

    def by_nodes(self) -> dict[str, list[dict[str, Any]]]:
        """:meth:`breakdown` by node count (NODE_BINS)."""
        import numpy as np

        edges = [hi + 0.5 for _, hi in NODE_BINS[:-1]]
        return self.breakdown(lambda r: np.digitize(r.nodes, edges) if r.nodes is not None
                              else np.full(r.n, -1), [label for label, _ in NODE_BINS])


# Regimes of a row, by its measured share of the step beyond its slowest worker's compute alone
# (label, upper edge): where communication is hidden, where it shows, where it sets the step.
REGIMES = (("compute-bound (<10% beyond compute)", 0.10), ("mixed (10-40%)", 0.40),
           ("communication-bound (>40%)", 1.01))
NODE_BINS = (("1 node", 1), ("2 nodes", 2), ("3-4 nodes", 4), ("5-8 nodes", 8), ("9+ nodes", 10**6))


def render_breakdown(title: str, table: dict[str, list[dict[str, Any]]]) -> list[str]:
    """A Markdown table of :meth:`ValidationReport.breakdown`'s cells."""
    lines = ["", title, "", "| split | rows of | rows | model MAPE % | best baseline MAPE % | inside the model's "
             "5–95% interval % |", "|---|---|---:|---:|---:|---:|"]
    for split, cells in table.items():
        for c in cells:
            lines.append(f"| {split} | {c['group']} | {c['rows']} | {c['model_mape']:.1f} | "
                         f"{c['baseline_mape']:.1f} ({c['baseline']}) | {c['inside_interval'] * 100:.0f} |")
    return lines


# --------------------------------------------------------------------------- Pollux-style baseline


def _pollux_predict(params: "np.ndarray", compute: "np.ndarray", nodes: "np.ndarray", world: "np.ndarray",
                    scale: "np.ndarray") -> "np.ndarray":
    import numpy as np

    p = np.clip(np.asarray(params, dtype=float), -30.0, 30.0)  # the optimiser may wander: keep exp finite
    a_l, b_l, a_n, b_n, g = np.exp(p[:4]).tolist() + [1.0 + np.exp(min(p[4], 5.0))]
    k = np.maximum(world - 2, 0)
    sync = np.where(nodes > 1, a_n + b_n * k, a_l + b_l * k) * scale
    sync = np.where(world > 1, sync, 0.0)
    top = np.maximum(np.maximum(compute, sync), 1e-12)  # (c^γ + s^γ)^(1/γ) without overflow
    return top * ((compute / top) ** g + (sync / top) ** g) ** (1.0 / g)


def fit_pollux(compute: "np.ndarray", nodes: "np.ndarray", world: "np.ndarray", scale: "np.ndarray",
               y: "np.ndarray") -> "np.ndarray":
    import numpy as np
    from scipy.optimize import minimize

    def loss(p: "np.ndarray") -> float:
        return float(np.mean(np.abs(np.log(_pollux_predict(p, compute, nodes, world, scale) / y))))

    # Nelder-Mead from one start lands in whichever basin is nearest (the fit moved between
    # 35% and 170% MAPE with small changes of the rows): start from a spread of sync scales and
    # γ, keep the lowest training loss
    best = None
    for sync_scale in (0.1, 1.0, 10.0):
        for g0 in (0.1, 1.0, 3.0):
            x0 = np.log(np.array([5.0 * sync_scale, 1.0 * sync_scale, 20.0 * sync_scale, 2.0 * sync_scale, g0]))
            fit = minimize(loss, x0, method="Nelder-Mead", options={"maxiter": 1500, "xatol": 1e-3, "fatol": 1e-5})
            if best is None or fit.fun < best.fun:
                best = fit
    return best.x


# --------------------------------------------------------------------------- one fold


def model_regimes(jobs: Sequence[JobProfile], catalog: "Catalog") -> dict[str, str]:
    """Each model's network regime (the short label of REGIMES): the median, over its runs across
    nodes, of the measured share of the step beyond its slowest worker's compute alone."""
    import numpy as np

    out = {}
    for j in jobs:
        t = table_for([j], catalog, None, keep=lambda job, r: r.nodes >= 2)
        if len(t.y_ms) == 0:
            continue
        share = float(np.median(np.clip(1.0 - t.X["compute_ms"].to_numpy(dtype=float) / t.y_ms, 0.0, 1.0)))
        out[j.model] = next(label for label, hi in REGIMES if share < hi).split(" (")[0]
    return out


def run_fold(split: str, fold: str, train_jobs: Sequence[JobProfile], test_jobs: Sequence[JobProfile],
             views: dict[str, JobProfile], test_keep: Callable[[JobProfile, Run], bool],
             train_keep: Callable[[JobProfile, Run], bool] | None, catalog: "Catalog", quick: bool,
             collectives: Sequence[CollectivePoint] = (), allreduce: Sequence[AllreduceRow] = ()) -> SplitResult | None:
    import numpy as np

    train_views = {j.model: j.restricted(lambda r, j=j: train_keep(j, r)) for j in train_jobs} if train_keep else {}
    fit_jobs = [train_views.get(j.model, j) for j in train_jobs]
    comm = CommModel(max_rows=200 if quick else 300,
                     inter_grid=(0.01, 0.03, 0.1, 0.18, 0.32, 0.56, 1.0),
                     intra_grid=(0.05, 0.2, 0.5, 1.0)).fit(fit_jobs, catalog, collectives, allreduce)
    tr = table_for(fit_jobs, catalog, comm.link_scale_)
    te = table_for(test_jobs, catalog, comm.link_scale_, keep=test_keep, views=views)
    if len(te.y_ms) == 0 or len(tr.y_ms) < 3:
        return None
    if len(tr.y_ms) >= MIN_RESIDUAL_ROWS:
        lm = LatencyModel(max_iter=120 if quick else 200).fit(tr.X, tr.y_ms, groups=tr.model)
        model_pred = lm.predict(te.X)
        lo, hi = lm.predict_interval(te.X)
    else:  # too few training runs for a residual model: the calibrated simulator (as Predictor does)
        model_pred = te.X["sim_ms"].to_numpy(dtype=float)
        lo, hi = model_pred * np.exp(-NO_RESIDUAL_HALF_WIDTH), model_pred * np.exp(NO_RESIDUAL_HALF_WIDTH)
    # catalog links, uncalibrated (emulated links: the tbf framing prior, no sweep fit)
    raw = table_for(test_jobs, catalog, None, keep=test_keep, views=views)
    y = te.y_ms
    ref_gb = np.nanmean(np.exp(tr.X["log_grad_mb"].to_numpy(dtype=float)))

    def scale_of(X: Any) -> "np.ndarray":
        gb = np.exp(X["log_grad_mb"].to_numpy(dtype=float))
        return np.where(np.isfinite(gb) & np.isfinite(ref_gb), gb / ref_gb, 1.0)

    params = fit_pollux(tr.X["compute_ms"].to_numpy(), tr.X["nodes"].to_numpy(), tr.X["world_size"].to_numpy(),
                        scale_of(tr.X), tr.y_ms)
    preds = {
        "model": model_pred,
        "simulator": raw.X["sim_ms"].to_numpy(),
        "pollux": _pollux_predict(params, te.X["compute_ms"].to_numpy(), te.X["nodes"].to_numpy(),
                                  te.X["world_size"].to_numpy(), scale_of(te.X)),
        "linear": te.X["compute_ms"].to_numpy(),
    }
    errors = {m: np.abs(p - y) / y * 100 for m, p in preds.items()}
    known = te.X["grad_bytes_estimated"].to_numpy(dtype=float) == 0
    return SplitResult(split, fold, len(y), errors, y, preds, known, (lo <= y) & (y <= hi),
                       te.X["nodes"].to_numpy(dtype=float),
                       np.clip(1.0 - te.X["compute_ms"].to_numpy(dtype=float) / y, 0.0, 1.0))


def catalog_without_gpu_of(catalog: "Catalog", instance_type: str) -> "Catalog":
    """``catalog`` with its GPU speed factors refitted without any rate of the GPU chip of
    ``instance_type`` (srifty.gpuspeed), so that a held-out type's compute is transferred as it
    would be for a GPU nobody measured. Without the Lambda trace, that chip's factors are dropped."""
    from srifty.gpuspeed import fit_speed_corrections, same_chip
    from srifty.model import ROOT

    gpu = getattr(catalog.get(instance_type), "gpu_name", None)
    if not gpu or not any(same_chip(c.gpu_name, gpu) for c in catalog.speed_corrections):
        return catalog
    path = ROOT / "data" / "traces" / "lambda_compiled_single_gpu.csv"
    if path.exists():
        fit = fit_speed_corrections(read_lambda_single_gpu(path)[0], catalog, keep=lambda r: not same_chip(r.gpu, gpu))
    else:
        fit = [c for c in catalog.speed_corrections if not same_chip(c.gpu_name, gpu)]
    return catalog.with_speed_corrections(fit)


def validate(jobs: Sequence[JobProfile], catalog: "Catalog", quick: bool = False,
             splits: Sequence[str] = ("lomo-1gpu", "lomo-1node", "nodes>4", "loio"),
             progress: Callable[[str], None] | None = None, collectives: Sequence[CollectivePoint] = (),
             prefix: str = "", report: ValidationReport | None = None,
             allreduce: Sequence[AllreduceRow] = ()) -> ValidationReport:
    """``allreduce``: measured allreduces for the NVLink/EFA efficiencies (as the product fits them;
    never rows of the held-out model, which has none)."""
    report = report if report is not None else ValidationReport()
    say = progress or (lambda _: None)
    first = len(report.results)
    floor = replicate_floor(jobs, prefix.rstrip("/"))
    if floor:
        report.floors.append(floor)
    models = [j.model for j in jobs]
    for split in splits:
        if split.startswith("lomo"):
            if len(jobs) < 2:
                report.notes.append(f"{prefix}{split}: needs at least 2 models, the corpus has {len(jobs)}.")
                continue
            for held in jobs:
                say(f"{split}: holding out {held.model}")
                view = held.restricted((lambda r: r.world_size == 1) if split == "lomo-1gpu" else (lambda r: r.nodes == 1))
                tested = (lambda j, r: r.world_size >= 2) if split == "lomo-1gpu" else (lambda j, r: r.nodes >= 2)
                res = run_fold(split, held.model, [j for j in jobs if j is not held], [held], {held.model: view},
                               tested, None, catalog, quick, collectives, allreduce)
                if res:
                    report.results.append(res)
        elif split == "loro":
            regimes = model_regimes(jobs, catalog)
            if len(set(regimes.values())) < 2:
                report.notes.append(f"{prefix}loro: " + (
                    f"every model of the corpus with runs across nodes is {next(iter(regimes.values()))}"
                    if regimes else "no model of the corpus has runs across nodes")
                    + "; leaving one network regime out needs two.")
                continue
            for regime in sorted(set(regimes.values())):
                held = [j for j in jobs if regimes[j.model] == regime]
                say(f"loro: holding out the {regime} models ({', '.join(j.model for j in held)})")
                views = {j.model: j.restricted(lambda r: r.world_size == 1) for j in held}
                res = run_fold(split, regime, [j for j in jobs if regimes[j.model] != regime], held, views,
                               lambda j, r: r.world_size >= 2, None, catalog, quick, collectives, allreduce)
                if res:
                    report.results.append(res)
        elif split == "nodes>4":
            say("nodes>4: training on runs with at most 4 nodes")
            views = {j.model: j.restricted(lambda r: r.nodes <= 4) for j in jobs}
            res = run_fold(split, "all models", jobs, jobs, views, lambda j, r: r.nodes > 4,
                           lambda j, r: r.nodes <= 4, catalog, quick, collectives, allreduce)
            if res:
                report.results.append(res)
            else:
                report.notes.append(f"{prefix}nodes>4: no run with more than 4 nodes in the corpus.")
        elif split == "loio":
            types = sorted({t for j in jobs for t in j.instance_types})
            if len(types) < 2:
                report.notes.append(f"{prefix}loio: the corpus has one instance type ({', '.join(types)}); "
                                    "leave-one-instance-type-out needs several (e.g. profiles/emulated).")
                continue
            for t in types:
                say(f"loio: holding out {t}")
                views = {j.model: j.restricted(lambda r, t=t: t not in run_config(r).instance_types) for j in jobs}
                sweeps = [p for p in collectives if t not in p.config]
                res = run_fold(split, t, jobs, jobs, views, lambda j, r, t=t: t in run_config(r).instance_types,
                               lambda j, r, t=t: t not in run_config(r).instance_types,
                               catalog_without_gpu_of(catalog, t), quick, sweeps, allreduce)
                if res:
                    report.results.append(res)
        elif split == "loco":
            configs = sorted({run_config(r).format() for j in jobs for r in j.runs if r.nodes >= 2})
            if not configs:
                report.notes.append(f"{prefix}loco: no multi-node configuration in the corpus.")
                continue
            for c in configs:
                say(f"loco: holding out {c}")

                def other(j: JobProfile, r: Run, c: str = c) -> bool:
                    return run_config(r).format() != c

                views = {j.model: j.restricted(lambda r, j=j, o=other: o(j, r)) for j in jobs}
                sweeps = [p for p in collectives if not _same_config(p.config, c)]
                res = run_fold(split, c, jobs, jobs, views, lambda j, r, o=other: not o(j, r), other,
                               catalog, quick, sweeps, allreduce)
                if res:
                    report.results.append(res)
    for r in report.results[first:]:
        r.split = prefix + r.split
    if len(report.results) == first:
        report.notes.append(f"{prefix}No split could be evaluated on the corpus (models: {', '.join(models)}).")
    return report


def _same_config(sweep_config: str, config: str) -> bool:
    """Whether an allreduce sweep ran on ``config`` (host order and workers per node ignored)."""
    from srifty.configspec import parse_config

    def hosts(text: str) -> list[str]:
        return sorted(g.instance_type for g in parse_config(text).groups for _ in range(g.count))

    try:
        return hosts(sweep_config) == hosts(config)
    except Exception:  # noqa: BLE001 - an unreadable sweep config is not the held-out one
        return False


# --------------------------------------------------------------------------- outputs


def floor_sentence(f: ReplicateFloor) -> str:
    """One paragraph: how far the corpus's repeated measurements of a configuration scatter."""
    models = ", ".join(f"{m} {mape:.1f}%" for m, mape, _ in f.by_model)
    return (f"Noise floor{f' ({f.corpus})' if f.corpus else ''}: {f.rows} multi-GPU rows are repeated measurements "
            f"of {f.configurations} configurations (same model and per-worker batch, same GPUs on each node up to "
            f"the order of the nodes); each lies on average {f.mape:.1f}% from its configuration's mean "
            f"({models}). A model that sees only the configuration cannot expect to predict these rows more "
            "closely; the splits' errors above include this scatter (srifty.validate.replicate_floor).")


def render_markdown(report: ValidationReport, command: str, corpus: Sequence[str], plot: str | None) -> str:
    pooled = report.pooled()
    lines = [
        "# Latency-model accuracy",
        "",
        f"Generated by `{command}` on {dt.date.today().isoformat()} from {', '.join(corpus)}. "
        "Rerun it to reproduce; nothing on this page is typed by hand.",
        "",
        "Absolute percentage error of the predicted iteration time per split (all folds pooled), "
        "for the learned model and the baselines on the same rows. See srifty/validate.py for the splits "
        "and docs/latency-model.md for the model.",
        "",
        "- `lomo-1gpu` / `lomo-1node`: leave one model out; the held-out model is known by its single-GPU "
        "(single-node) runs only, the residual model trains on the other models.",
        "- `nodes>4`: trained on runs with at most 4 nodes, tested on larger ones.",
        "- `loio`: leave one instance type out (its compute transferred from the other types).",
        "- `loco`: leave one configuration out: each multi-host configuration predicted from each model's "
        "single-host profiles and the allreduce sweeps of the other configurations.",
        "- methods: `model` = calibrated simulator × learned residual; `simulator` = the simulator with the "
        "catalog's link figures (emulated: configured rate × tbf framing goodput); `pollux` = Pollux-style "
        "(T_compute^γ + T_sync^γ)^(1/γ) fitted on the training rows; `linear` = the slowest worker's "
        "single-worker step time (perfect scaling).",
        "",
        "| split | rows | method | MAPE % | median % | p90 % | inside the model's 5–95% interval % |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for split, ms in pooled.items():
        for m in METHODS:
            s = ms[m]
            inside = f"{s['inside_interval'] * 100:.0f}" if "inside_interval" in s else ""
            lines.append(f"| {split} | {s['n']} | {m} | {s['mape']:.1f} | {s['median']:.1f} | {s['p90']:.1f} | {inside} |")
    lines += ["", "Per fold (MAPE %):", "", "| split | fold | rows | " + " | ".join(METHODS) + " | model best? |",
              "|---|---|---:|" + "---:|" * len(METHODS) + "---|"]
    for r in report.results:
        st = r.stats()
        best = min(METHODS, key=lambda m: st[m]["mape"])
        lines.append(f"| {r.split} | {r.fold} | {r.n} | " + " | ".join(f"{st[m]['mape']:.1f}" for m in METHODS)
                     + f" | {'yes' if best == 'model' else 'no: ' + best} |")
    not_best = [f"{r.split}/{r.fold}" for r in report.results
                if min(METHODS, key=lambda m: r.stats()[m]["mape"]) != "model"]
    by_nodes = report.grad_known_by_nodes()
    for split, (mape, n) in report.pooled_grad_known().items():
        lines += ["", f"{split}: over the {n} rows whose gradient size the profile states (parameter count or "
                  f"gradient bytes; the others have neither, so their communication cannot be simulated), "
                  f"the model's MAPE is {mape:.1f}%"
                  + (" ({:.1f}% over the {} rows on one node, {:.1f}% over the {} on several).".format(
                      *by_nodes[split][0], *by_nodes[split][1]) if split in by_nodes else ".")]
    for f in report.floors:
        lines += ["", floor_sentence(f)]
    lines += render_breakdown("By regime: each held-out row by its measured share of the step beyond its slowest "
                              "worker's compute alone (exposed communication, and what else data parallelism "
                              "costs). The interval promises 90% inside in every row of this table.",
                              report.by_regime())
    lines += render_breakdown("By node count:", report.by_nodes())
    lines += ["", ("The learned model does **not** beat every baseline on: " + ", ".join(not_best) + ".")
              if not_best else "The learned model beats every baseline on every fold."]
    pooled_losses = []
    for split, by_method in report.pooled().items():
        best = min(METHODS, key=lambda m: by_method[m]["mape"])
        if best != "model":
            pooled_losses.append(f"{split} ({best} {by_method[best]['mape']:.1f}% against the model's "
                                 f"{by_method['model']['mape']:.1f}%)")
    lines += ["", ("Pooled over its folds, a baseline is better on: " + ", ".join(pooled_losses) + ".")
              if pooled_losses else "Pooled over its folds, the learned model beats every baseline on every split."]
    if report.notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in report.notes]
    if plot:
        lines += ["", f"![predicted vs measured]({plot})"]
    return "\n".join(lines) + "\n"


def write_plot(report: ValidationReport, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    splits = list(dict.fromkeys(r.split for r in report.results))
    fig, axes = plt.subplots(1, len(splits), figsize=(4.2 * len(splits), 4.2), squeeze=False)
    for ax, split in zip(axes[0], splits):
        rs = [r for r in report.results if r.split == split]
        y = np.concatenate([r.measured for r in rs])
        for m, style in (("simulator", "x"), ("model", ".")):
            ax.scatter(y, np.concatenate([r.predicted[m] for r in rs]), s=4, marker=style, alpha=0.5, label=m)
        lo, hi = float(y.min()) * 0.8, float(y.max()) * 1.25
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(split)
        ax.set_xlabel("measured iteration ms")
        ax.set_ylabel("predicted ms")
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


# --------------------------------------------------------------------------- allreduce (nccl-tests)

COMM_METHODS = ("fitted", "catalog", "tcp-pcie-fit")


@dataclass
class AllreduceCheck:
    """Measured nccl-tests allreduce times on one instance type and node count against the
    simulator's ring/hierarchical estimate with three sets of link figures."""

    instance_type: str
    nodes: int
    gpus_per_node: int
    sizes: "np.ndarray"
    measured_us: "np.ndarray"
    predicted_us: dict[str, "np.ndarray"]

    def ape(self, method: str) -> "np.ndarray":
        """Absolute percentage error of each size."""
        import numpy as np

        return np.abs(self.predicted_us[method] - self.measured_us) / self.measured_us * 100

    def mape(self, method: str) -> float:
        return float(self.ape(method).mean())


def validate_allreduce(catalog: "Catalog", training_scale: Any, rows: Sequence[AllreduceRow],
                       notes: Sequence[str] = ()) -> tuple[list[AllreduceCheck], list[str]]:
    """Measured allreduces against three sets of link figures: ``fitted`` = the type's own
    NVLink/EFA efficiencies, fitted on every other message size of that type and tested on the
    sizes left out (two folds: alternate sizes); ``catalog`` = the catalog's stated bandwidths;
    ``tcp-pcie-fit`` = the efficiencies the communication model fits on the corpus's TCP/PCIe
    training runs (``training_scale``) applied to NVLink and EFA too — what one efficiency for
    every kind of link would predict."""
    import numpy as np
    from dataclasses import replace

    from srifty.comm import allreduce_us, fit_fast_links, rows_in_catalog

    known, unknown = rows_in_catalog(catalog, rows)
    notes = list(notes) + [f"nccl-tests: {t} is not in the catalog; its rows were left out." for t in unknown]
    base = replace(training_scale, fast_links=())
    checks = []
    for itype in sorted({r.instance_type for r in known}):
        mine = sorted((r for r in known if r.instance_type == itype), key=lambda r: (r.nodes, r.nbytes))
        one_for_all = replace(base, fast_links=((itype, training_scale.intra_efficiency,
                                                 training_scale.inter_efficiency or 1.0),))
        held_out = {}
        for fold in (0, 1):
            train = [r for i, r in enumerate(mine) if i % 2 != fold]
            scale = replace(base, fast_links=fit_fast_links(catalog, train)) if train else base
            test = [r for i, r in enumerate(mine) if i % 2 == fold]
            held_out.update(zip(test, allreduce_us(catalog, test, scale)))
        for nodes, gpn in sorted({(r.nodes, r.gpus_per_node) for r in mine}):
            sub = [r for r in mine if (r.nodes, r.gpus_per_node) == (nodes, gpn)]
            checks.append(AllreduceCheck(
                itype, nodes, gpn, np.array([r.nbytes for r in sub]), np.array([r.us for r in sub]),
                {"fitted": np.array([held_out[r] for r in sub]), "catalog": allreduce_us(catalog, sub, None),
                 "tcp-pcie-fit": allreduce_us(catalog, sub, one_for_all)}))
    return checks, notes


def render_allreduce(checks: Sequence[AllreduceCheck], notes: Sequence[str]) -> str:
    import numpy as np

    if not checks:
        return ""
    lines = ["", "## Allreduce: nccl-tests on EC2", "",
             f"`all_reduce_perf` out-of-place times for messages of at least {NCCL_MIN_BYTES >> 20} MiB "
             "(data/traces/nccl_tests_allreduce_aws.csv) against the simulator's allreduce (best of ring and "
             "hierarchical, as on every NVLink node) with three sets of link figures: `fitted` = the type's own "
             "NVLink/EFA efficiencies, "
             "fitted on the other message sizes of that type and tested on the sizes left out (two folds, alternate "
             "sizes; what srifty uses for a type with measured allreduces); `catalog` = the catalog's stated "
             "bandwidths (what srifty uses for NVLink/EFA types without them); `tcp-pcie-fit` = the efficiencies "
             "fitted on the real corpora's TCP/PCIe training runs applied to NVLink and EFA too (one efficiency "
             "for every kind of link).", "",
             "| instance type | nodes × GPUs | sizes | " + " | ".join(f"{m} MAPE %" for m in COMM_METHODS)
             + " | measured / catalog (median) |",
             "|---|---|---:|" + "---:|" * len(COMM_METHODS) + "---:|"]
    for c in checks:
        ratio = float(np.median(c.measured_us / c.predicted_us["catalog"]))
        lines.append(f"| {c.instance_type} | {c.nodes} × {c.gpus_per_node} | {len(c.sizes)} | "
                     + " | ".join(f"{c.mape(m):.1f}" for m in COMM_METHODS) + f" | {ratio:.2f} |")
    allm = {m: np.concatenate([c.ape(m) for c in checks]) for m in COMM_METHODS}
    lines.append(f"| all | | {len(allm['catalog'])} | " + " | ".join(f"{allm[m].mean():.1f}" for m in COMM_METHODS)
                 + " | |")
    lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- compute transfer across GPUs

TRANSFER_METHODS = ("srifty", "spec", "fp32-flops", "memory-bandwidth")
GAVEL_BATCH = re.compile(r"batch size in job name = (\d+)")
GAVEL_GPUS = re.compile(r"total GPUs=(\d+)")
@dataclass
class TransferCheck:
    """One model measured alone on two GPU types: the target's time per step (or per sample)
    predicted from the source's by each method's speed ratio."""

    dataset: str
    group: tuple[str, ...]
    source_gpu: str
    target_gpu: str
    measured_ratio: float  # target speed / source speed, from the two measured rates
    predicted_ratio: dict[str, float]

    def ape(self, method: str) -> float:
        """Absolute percentage error of the target's predicted time."""
        return abs(self.measured_ratio / self.predicted_ratio[method] - 1.0) * 100


def read_gavel(path: str | Path) -> tuple[dict[tuple[str, str, str], float], dict[tuple[str, str, str, int], float]]:
    """Gavel's isolated throughputs (iterations/s): single GPUs keyed (model, batch, GPU), and
    GPUs consolidated on one server keyed (model, batch, GPU, total GPUs)."""
    import csv

    single, multi = {}, {}
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            notes = r["notes"]
            gpus = GAVEL_GPUS.search(notes)
            if r["throughput_unit"] != "iterations/s" or not gpus or "unconsolidated" in notes:
                continue
            batch = GAVEL_BATCH.search(notes)
            key = (r["model"], batch.group(1) if batch else "-", r["gpu_model"])
            if int(gpus.group(1)) == 1:
                single[key] = float(r["throughput_value"])
            else:
                multi[(*key, int(gpus.group(1)))] = float(r["throughput_value"])
    return single, multi


def _gavel_rates(path: Path) -> tuple[list[SingleGpuRate], list[str]]:
    single, multi = read_gavel(path)
    out = [SingleGpuRate("gavel", (model, batch), gpu, "fp32", rate) for (model, batch, gpu), rate in sorted(single.items())]
    # the multi-GPU rows, read as iterations/s summed over the workers: per-GPU speed against alone
    eff = [v / n / single[(m, b, g)] for (m, b, g, n), v in multi.items() if (m, b, g) in single]
    notes = []
    if eff:
        notes.append(f"Gavel's multi-GPU rows (one server) are not used for iteration time: read as iterations/s "
                     f"summed over the workers, {sum(e > 1.05 for e in eff)} of {len(eff)} run each GPU more than 5% "
                     f"faster than it runs alone (up to {max(eff):.2f}x), which a data-parallel step at a fixed "
                     "per-GPU batch should not do, and the rows spread over servers state neither node count nor "
                     "instance type. Gavel states no precision; FP32 figures are compared.")
    return out, notes


# NVIDIA's DeepLearningExamples READMEs name GPUs by board; the DGX-2's V100-SXM3 (350 W) has no spec row
DLE_GPUS = {"V100-SXM2-16GB": "V100", "V100-SXM2-32GB": "V100-32GB", "A100-SXM4-40GB": "A100",
            "A100-SXM4-80GB": "A100-80GB"}


def read_dle_single_gpu(path: str | Path) -> tuple[list[SingleGpuRate], list[str]]:
    """NVIDIA DeepLearningExamples README tables (DGX-1/DGX-2/DGX A100, on-prem): the median of
    each (model, framework, precision, unit, GPU) over the README's rows, which differ in batch
    and configuration. FP32 on V100 and TF32 on A100 are one class, as the READMEs compare them;
    mixed precision is AMP; the few BF16 rows are left out."""
    import csv
    import statistics

    rates: dict[tuple[str, str, str, str, str], list[float]] = {}
    left = 0
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            gpu = DLE_GPUS.get(r["gpu_model"])
            precision = {"mixed": "amp", "fp32": "tf32", "tf32": "tf32"}.get(r["precision"].lower())
            if gpu is None or precision is None or r["gpus_per_node"] != "1":
                left += 1
                continue
            key = (r["model"], r["framework"], precision, r["throughput_unit"], gpu)
            rates.setdefault(key, []).append(float(r["throughput_value"]))
    out = [SingleGpuRate("nvidia-dle", (model, fw, prec, unit), gpu, prec, statistics.median(v))
           for (model, fw, prec, unit, gpu), v in sorted(rates.items())]
    notes = ["NVIDIA DeepLearningExamples: each GPU's rate is the median over a README's rows (their batch sizes "
             "and configurations differ), a cruder pairing than Gavel's or Lambda's."]
    if left:
        notes.append(f"NVIDIA DeepLearningExamples: {left} rows left out (BF16, more than one GPU, or a GPU "
                     "srifty has no spec for).")
    return out, notes


def validate_gpu_transfer(catalog: "Catalog", gavel: str | Path | None = None,
                          lambda_compiled: str | Path | None = None,
                          dle: str | Path | None = None) -> tuple[list[TransferCheck], list[str]]:
    """Single-GPU rates of the same model on several GPU types (Gavel: K80, P100, V100; Lambda's
    compiled tables: V100 … B200; NVIDIA's DeepLearningExamples: V100, A100): how well does a
    speed ratio transfer a measured time to another GPU? ``spec`` = √(FLOPS of the precision × memory bandwidth) from the spec sheets; ``srifty`` =
    that times the measured factors of srifty.gpuspeed (what srifty uses for a type it has not
    profiled), fitted on Lambda's rates without the network under test (Gavel's and NVIDIA's rates
    are never in the fit); ``fp32-flops`` and ``memory-bandwidth`` take one figure."""
    from srifty.features import transfer_speeds
    from srifty.gpuspeed import fit_speed_corrections, spec_hardware
    from srifty.model import ROOT

    traces = ROOT / "data" / "traces"
    rates: list[SingleGpuRate] = []
    notes: list[str] = []
    for path, reader in ((Path(gavel) if gavel else traces / "gavel_throughputs.csv", _gavel_rates),
                         (Path(lambda_compiled) if lambda_compiled else traces / "lambda_compiled_single_gpu.csv",
                          read_lambda_single_gpu),
                         (Path(dle) if dle else traces / "nvidia_dle_single_gpu.csv", read_dle_single_gpu)):
        if not path.exists():
            notes.append(f"{path}: not found; no cross-GPU check on it.")
            continue
        got, why = reader(path)
        rates += got
        notes += why
    specs, no_spec = {}, set()
    for g in sorted({r.gpu for r in rates}):
        spec = catalog.gpu_spec(g)
        if spec is None or not spec.fp32_tflops or not spec.memory_bandwidth_gbytes_per_s:
            no_spec.add(g)
            continue
        specs[g] = spec
    if no_spec:
        notes.append(f"{', '.join(sorted(no_spec))}: no FP32 TFLOPS and memory bandwidth in srifty's GPU specs; "
                     "their rows were left out.")
    fitted = {}  # network held out of the factors' fit (None: Gavel, every Lambda rate in)

    def factors(held: str | None) -> Any:
        if held not in fitted:
            fitted[held] = fit_speed_corrections(
                rates, catalog, keep=lambda r: r.dataset == "lambda" and (held is None or r.group[1] != held))
        return fitted[held]

    def predicted(src: SingleGpuRate, dst: SingleGpuRate) -> dict[str, float]:
        ss, sd = specs[src.gpu], specs[dst.gpu]
        fit = factors(src.group[1] if src.dataset == "lambda" else None)
        fs, fd = transfer_speeds(spec_hardware(ss, fit), spec_hardware(sd, fit), src.precision)
        return {"srifty": fd / fs,
                "spec": spec_hardware(sd).speed_for(dst.precision) / spec_hardware(ss).speed_for(src.precision),
                "fp32-flops": sd.fp32_tflops / ss.fp32_tflops,
                "memory-bandwidth": sd.memory_bandwidth_gbytes_per_s / ss.memory_bandwidth_gbytes_per_s}

    groups: dict[tuple[str, tuple[str, ...]], list[SingleGpuRate]] = {}
    for r in rates:
        if r.gpu in specs:
            groups.setdefault((r.dataset, r.group), []).append(r)
    checks = [TransferCheck(ds, group, a.gpu, b.gpu, b.rate / a.rate, predicted(a, b))
              for (ds, group), members in sorted(groups.items()) for a in members for b in members if a.gpu != b.gpu]
    return checks, notes


def transfer_spread(checks: Sequence[TransferCheck]) -> "TransferError":
    """The spread of srifty's transfers over ``checks``: 5% and 95% quantiles of the log of
    measured over transferred time (a transfer predicts time × measured / predicted speed ratio)."""
    import numpy as np

    from srifty.gpuspeed import TransferError

    e = np.log([c.predicted_ratio["srifty"] / c.measured_ratio for c in checks])
    return TransferError(float(np.quantile(e, 0.05)), float(np.quantile(e, 0.95)), len(e))


def by_dataset(checks: Sequence[TransferCheck]) -> dict[str, list[TransferCheck]]:
    out: dict[str, list[TransferCheck]] = {}
    for c in checks:
        out.setdefault(c.dataset, []).append(c)
    return dict(sorted(out.items()))


def transfer_errors(checks: Sequence[TransferCheck]) -> dict[str, "np.ndarray"]:
    """Absolute percentage error of every check, per method."""
    import numpy as np

    return {m: np.array([c.ape(m) for c in checks]) for m in TRANSFER_METHODS}


def render_gpu_transfer(checks: Sequence[TransferCheck], notes: Sequence[str]) -> str:
    import numpy as np

    if not checks:
        return "".join(f"\n- {n}" for n in notes) + ("\n" if notes else "")
    lines = ["", "## Compute transfer across GPUs: single-GPU rates from Gavel, Lambda and NVIDIA", "",
             "Each model that Gavel (K80, V100; data/traces/gavel_throughputs.csv), Lambda's compiled benchmark "
             "tables (V100 to B200, within one benchmark release; data/traces/lambda_compiled_single_gpu.csv) or "
             "NVIDIA's DeepLearningExamples READMEs (V100 and A100 in DGX systems, one framework's scripts; "
             "data/traces/nvidia_dle_single_gpu.csv) measured alone on two GPU types: the second GPU's time per "
             "step (Gavel, same batch) or per sample (Lambda and NVIDIA, each GPU at its own batch) predicted from "
             "the first's by a speed ratio. `spec` = √(FLOPS "
             "of the job's precision × memory bandwidth) from the spec sheets; `srifty` = that times each GPU's "
             "measured factor (srifty/gpuspeed.py, `make gpu-speed`), what srifty uses for an instance type it has "
             "not profiled. The factors are fitted on Lambda's rates: for a Lambda transfer, on the other networks "
             "only (leave one network out); Gavel's and NVIDIA's rates are never in the fit. Factors apply only between two GPUs "
             "that both have one, so a transfer from K80 (none) keeps the spec ratio. "
             "`fp32-flops` and `memory-bandwidth` use one figure. Habitat (11.8% across GPUs) does this transfer "
             "kernel by kernel.", "",
             "| data | source → target | transfers | " + " | ".join(f"{m} MAPE % (median)" for m in TRANSFER_METHODS)
             + " | measured speed ratio (min–max) |",
             "|---|---|---:|" + "---:|" * len(TRANSFER_METHODS) + "---|"]

    def row(label: str, pair: str, sub: Sequence[TransferCheck], span: bool = True) -> str:
        cells = [f"{e.mean():.1f} ({np.median(e):.1f})" for e in transfer_errors(sub).values()]
        r = [c.measured_ratio for c in sub]
        return (f"| {label} | {pair} | {len(sub)} | " + " | ".join(cells)
                + (f" | {min(r):.2f}–{max(r):.2f} |" if span else " | |"))

    for ds, mine in by_dataset(checks).items():
        for src, dst in sorted({(c.source_gpu, c.target_gpu) for c in mine}):
            lines.append(row(ds, f"{src} → {dst}", [c for c in mine if (c.source_gpu, c.target_gpu) == (src, dst)]))
        lines.append(row(ds, "all", mine, span=False))
    lines.append(row("all", "all", checks, span=False))
    lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- compute at another batch

BATCH_RATIO_BINS = ((1.0, 2.0), (2.0, 4.0), (4.0, float("inf")))  # larger / smaller batch
BATCH_BOUND_SLACK = 0.02  # a measured time counts as inside the bounds within the profiler's 2% CI target


def _ratio_bin(lo: float, hi: float) -> str:
    return f"{lo:g}-{hi:g}" if hi != float("inf") else f"{lo:g}+"


@dataclass
class BatchCheck:
    """One job's compute measured alone at two per-worker batches on one device: the time at
    ``target_batch`` predicted from the time at ``batch`` alone."""

    dataset: str
    group: str  # model on device
    batch: float
    ms: float
    target_batch: float
    target_ms: float

    @property
    def ratio(self) -> float:
        return max(self.batch, self.target_batch) / min(self.batch, self.target_batch)

    def proportional_ape(self) -> float:
        """|error| (%) of srifty's one-batch rule: time proportional to the batch."""
        return abs(self.ms * self.target_batch / self.batch / self.target_ms - 1.0) * 100

    def inside_bounds(self) -> bool:
        from srifty.features import ComputeCurve

        lo, hi = ComputeCurve.from_points([(self.batch, self.ms)]).bounds(self.target_batch)
        return lo * (1 - BATCH_BOUND_SLACK) <= self.target_ms <= hi * (1 + BATCH_BOUND_SLACK)


def validate_batch_scaling(jobs_by_dataset: dict[str, Sequence[JobProfile]], gavel: str | Path | None = None
                           ) -> list[BatchCheck]:
    """Every pair of batches one job was measured at alone on one device: single-worker compute
    of the corpora's jobs (step minus sync and optimizer, what srifty's compute curve reads) and
    Gavel's single-GPU rates (K80/P100/V100, iterations/s at each batch in the job's name)."""
    from srifty.model import ROOT

    times: dict[tuple[str, str], dict[float, float]] = {}
    for dataset, jobs in jobs_by_dataset.items():
        for job in jobs:
            for t in job.instance_types:
                curve = job.compute_curve(t)
                if curve is not None and any(r.world_size == 1 for r in job.runs if r.instance_type == t):
                    times[(dataset, f"{job.model} on {t}")] = dict(zip(curve.batches, curve.times_ms))
    path = Path(gavel) if gavel else ROOT / "data" / "traces" / "gavel_throughputs.csv"
    if path.exists():
        single, _ = read_gavel(path)
        for (model, batch, gpu), rate in single.items():
            if batch != "-" and rate > 0:
                times.setdefault(("gavel", f"{model} on {gpu}"), {})[float(batch)] = 1e3 / rate
    out = []
    for (dataset, group), by_batch in sorted(times.items()):
        for b in sorted(by_batch):
            for tb in sorted(by_batch):
                if tb != b:
                    out.append(BatchCheck(dataset, group, b, by_batch[b], tb, by_batch[tb]))
    return out


def batch_scaling_summary(checks: Sequence[BatchCheck]) -> dict[str, dict[str, dict[str, float]]]:
    """Per dataset and batch-ratio bin ('1-2', '2-4', '4+'): pairs, the proportional rule's mean and
    median |error| (%) and the share of measured times inside the bounds."""
    import numpy as np

    out: dict[str, dict[str, dict[str, float]]] = {}
    for dataset in sorted({c.dataset for c in checks}):
        for lo, hi in BATCH_RATIO_BINS:
            sub = [c for c in checks if c.dataset == dataset and lo < c.ratio <= hi]
            if sub:
                e = np.array([c.proportional_ape() for c in sub])
                out.setdefault(dataset, {})[_ratio_bin(lo, hi)] = {
                    "pairs": len(sub), "jobs": len({c.group for c in sub}), "proportional_mape": float(e.mean()),
                    "proportional_median": float(np.median(e)),
                    "inside_bounds": sum(c.inside_bounds() for c in sub) / len(sub)}
    return out


def render_batch_scaling(checks: Sequence[BatchCheck]) -> str:
    if not checks:
        return ""
    lines = ["", "## Compute at another batch: one profiled batch, another predicted", "",
             "Every pair of per-worker batches at which a job was measured alone on one device (the corpora's "
             "single-worker runs, the H200 profiles of the examples in profiles/h200, and Gavel's single-GPU rates "
             "per batch): the time at one batch predicted from the other's alone. srifty's point estimate from a "
             "single batch is proportional to the batch; a prediction at a batch outside the profiled ones also "
             "gets the bounds of `ComputeCurve.bounds` in its interval (a larger batch takes no less time, and no "
             f"more per sample), and a warning. 'inside' counts measured times within those bounds (±{BATCH_BOUND_SLACK:.0%}).",
             "",
             "| data | jobs | " + " | ".join(f"batch ×{_ratio_bin(lo, hi)}: pairs, proportional MAPE % (median), inside"
                                           for lo, hi in BATCH_RATIO_BINS) + " |",
             "|---|---:|" + "---|" * len(BATCH_RATIO_BINS)]
    summary = batch_scaling_summary(checks)
    for dataset, bins in summary.items():
        cells = []
        for lo, hi in BATCH_RATIO_BINS:
            b = bins.get(_ratio_bin(lo, hi))
            cells.append(f"{b['pairs']}: {b['proportional_mape']:.0f} ({b['proportional_median']:.0f}), "
                         f"{b['inside_bounds']:.0%}" if b else "–")
        lines.append(f"| {dataset} | {len({c.group for c in checks if c.dataset == dataset})} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the README's summary line

README_START = "<!-- accuracy summary: generated by `srifty validate --readme README.md` (make accuracy); do not edit -->"
README_END = "<!-- end of the generated accuracy summary -->"


def render_readme_summary(report: ValidationReport, command: str) -> str:
    """The README's one-line summary of the accuracy report, between the marker lines: the model's
    pooled held-out error on each corpus's first split (leave one model out on traces, one
    configuration out on the emulated cluster) with what the split holds out, the error over the
    rows whose gradient size is stated where some lack it, and the corpus's noise floor; how many
    folds it wins against every baseline; and the link to docs/ACCURACY.md, which has everything
    else, the allreduce and GPU-transfer checks included."""
    what = {"lomo-1gpu": "a model never seen, from its single-GPU runs",  # what each split holds out
            "lomo-1node": "a model never seen, from its single-node runs",
            "nodes>4": "clusters larger than any trained on",
            "loio": "an instance type never profiled", "loco": "a configuration never run"}
    pooled, known = report.pooled(), report.pooled_grad_known()
    floors = {f.corpus: f for f in report.floors}
    headline: dict[str, str] = {}  # corpus prefix -> its first split
    for split in pooled:
        headline.setdefault(split.rpartition("/")[0], split)
    parts = []
    for corpus, split in headline.items():
        kind = what.get(split.rpartition("/")[2])
        extra = [kind] if kind else []
        if split in known:
            extra.append(f"{known[split][0]:.1f}% on the {known[split][1]} rows whose gradient size is stated")
        if corpus in floors:
            extra.append(f"noise floor {floors[corpus].mape:.1f}%")
        parts.append(f"{split} {pooled[split]['model']['mape']:.1f}%" + (f" ({'; '.join(extra)})" if extra else ""))
    wins = sum(min(METHODS, key=lambda m: r.stats()[m]["mape"]) == "model" for r in report.results)
    line = (f"Latency-model accuracy, held-out iteration-time MAPE with all folds pooled: {', '.join(parts)}; "
            f"the model beats every baseline in {wins} of {len(report.results)} folds. From `{command}` on "
            f"{dt.date.today().isoformat()}; every split, baseline, interval and fold: "
            "[docs/ACCURACY.md](docs/ACCURACY.md).")
    return "\n".join([README_START, line, README_END])


def replace_readme_summary(readme: str, table: str) -> str:
    """``readme`` with the text from README_START to README_END replaced by ``table`` (the
    markers included: ``table`` carries them)."""
    start, end = readme.find(README_START), readme.find(README_END)
    if start < 0 or end < start:
        raise SriftyError("The README has no generated accuracy summary to replace.",
                          f"Put the two marker lines where the summary goes:\n{README_START}\n{README_END}")
    return readme[:start] + table + readme[end + len(README_END):]

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

This module runs the folds and the Pollux-style baseline; the results they yield are in
srifty.validate.results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from srifty.comm import CommModel
from srifty.features import AllreduceRow, CollectivePoint, JobProfile, Run, run_config, with_fitted_overlap
from srifty.gpuspeed import read_lambda_single_gpu
from srifty.model import MIN_RESIDUAL_ROWS, NO_RESIDUAL_HALF_WIDTH, LatencyModel, table_for, unread_overlap_table
from srifty.validate.results import REGIMES, SplitResult, ValidationReport, replicate_floor

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from srifty.catalog import Catalog


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
                     intra_grid=(0.05, 0.2, 0.5, 1.0))
    fit_jobs = comm.fit_with_overlap(fit_jobs, catalog, collectives, allreduce)
    # a held-out job's overlap is read off what the fold lets it see, as Predictor.builder does
    views = {m: with_fitted_overlap(v, catalog, comm.link_scale_) for m, v in views.items()}
    tr = table_for(fit_jobs, catalog, comm.link_scale_)
    te = table_for(test_jobs, catalog, comm.link_scale_, keep=test_keep, views=views)
    if len(te.y_ms) == 0 or len(tr.y_ms) < 3:
        return None
    if len(tr.y_ms) >= MIN_RESIDUAL_ROWS:
        lm = LatencyModel(max_iter=120 if quick else 200).fit(
            tr.X, tr.y_ms, groups=tr.model, unread=unread_overlap_table(fit_jobs, catalog, comm.link_scale_))
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
                       np.clip(1.0 - te.X["compute_ms"].to_numpy(dtype=float) / y, 0.0, 1.0), hi / lo)


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

"""A trained model checked on measurements it never saw: each job's runs across nodes predicted
from its single-node runs alone, as a user who imported only those would get them
(``srifty validate --holdout``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Sequence

from srifty.errors import SriftyError
from srifty.features import FeatureBuilder, JobProfile, run_config, with_estimated_gradient_size
from srifty.validate.results import NODE_BINS, REGIMES

if TYPE_CHECKING:  # pragma: no cover
    from srifty.catalog import Catalog
    from srifty.model import Predictor

ALL_MODELS = "all models"


@dataclass(frozen=True)
class HeldOutRow:
    """One run across nodes: what it measured and what the model predicted from the job's
    single-node runs."""

    model: str
    config: str
    local_batch_size: int
    nodes: int
    measured_ms: float
    predicted_ms: float
    low_ms: float
    high_ms: float
    compute_ms: float  # the slowest worker's compute alone, as the prediction put it
    simulator_ms: float  # the simulator with the catalog's link figures, no residual (a baseline)
    gradient_source: str  # the prediction's parts: where its gradient size came from (GRADIENT_SOURCES)
    overlap_source: str  # ... and how much of the allreduce backward hides (OVERLAP_SOURCES)

    @property
    def error(self) -> float:
        """Signed percentage error of the prediction (negative: predicted too fast)."""
        return (self.predicted_ms / self.measured_ms - 1.0) * 100

    @property
    def inside(self) -> bool:
        return self.low_ms <= self.measured_ms <= self.high_ms

    @property
    def beyond_compute(self) -> float:
        """The measured share of the step beyond its slowest worker's compute alone: its regime."""
        return min(max(1.0 - self.compute_ms / self.measured_ms, 0.0), 1.0)

    @property
    def regime(self) -> str:
        return next(label for label, hi in REGIMES if self.beyond_compute < hi)

    @property
    def node_bin(self) -> str:
        return next(label for label, hi in NODE_BINS if self.nodes <= hi)


@dataclass
class HeldOutCheck:
    """Every held-out row, and their figures pooled per model and per group of rows."""

    rows: list[HeldOutRow]
    seen: tuple[str, ...] = ()  # held-out models whose runs the model was trained on (not a held-out check)
    skipped: tuple[str, ...] = ()  # models left out, each with why (no runs on one node, or none across nodes)

    def cells(self, by: str) -> list[dict[str, Any]]:
        """Per model (and all models) and per group of rows (``by`` = "nodes" or "regime"): rows,
        the model's MAPE and signed median error, the share inside its interval and the interval's
        median width (high end over low end), and the MAPE of the simulator with the catalog's
        links and of the slowest worker's compute alone."""
        import numpy as np

        labels = [label for label, _ in (NODE_BINS if by == "nodes" else REGIMES)]
        models = sorted({r.model for r in self.rows})
        out = []
        for model in models + ([ALL_MODELS] if len(models) > 1 else []):
            mine = [r for r in self.rows if model in (ALL_MODELS, r.model)]
            for label in labels + ["all"]:
                rs = [r for r in mine if label in ("all", r.node_bin if by == "nodes" else r.regime)]
                if not rs:
                    continue
                err = np.array([r.error for r in rs])
                out.append({"model": model, "group": label, "rows": len(rs), "mape": float(np.mean(np.abs(err))),
                            "signed_median": float(np.median(err)),
                            "inside_interval": float(np.mean([r.inside for r in rs])),
                            "interval_ratio": float(np.median([r.high_ms / r.low_ms for r in rs])),
                            "simulator_mape": float(np.mean([abs(r.simulator_ms / r.measured_ms - 1) * 100
                                                             for r in rs])),
                            "linear_mape": float(np.mean([abs(r.compute_ms / r.measured_ms - 1) * 100 for r in rs]))})
        return out

    def sources(self) -> list[tuple[str, str, str, int]]:
        """(model, gradient source, overlap source, rows) for each pair the predictions took: how
        each model's single-node runs were read (a trace without param_count: its size off its sync
        times; its overlap read, checked or left at the default)."""
        counts = Counter((r.model, r.gradient_source, r.overlap_source) for r in self.rows)
        return [(*key, n) for key, n in sorted(counts.items())]

    def to_dict(self) -> dict[str, Any]:
        return {"seen": list(self.seen), "skipped": list(self.skipped), "by_nodes": self.cells("nodes"),
                "by_regime": self.cells("regime"),
                "sources": [{"model": m, "gradient_source": g, "overlap_source": o, "rows": n}
                            for m, g, o, n in self.sources()],
                "rows": [asdict(r) for r in self.rows]}


def check_held_out(jobs: Sequence[JobProfile], predictor: "Predictor", catalog: "Catalog") -> HeldOutCheck:
    """Each job's runs across nodes (of one instance type or several) predicted by ``predictor``
    from the job's single-node runs alone, through :meth:`Predictor.predict` as ``srifty predict``
    answers. A job without both kinds of run is skipped (and named); none with both is refused."""
    rows: list[HeldOutRow] = []
    skipped: list[str] = []
    for job in jobs:
        view = job.restricted(lambda r: r.nodes == 1)
        tested = [r for r in job.runs if r.nodes >= 2]
        if not view.runs or not tested:
            skipped.append(f"{job.model} ({len(view.runs)} run(s) on one node, {len(tested)} across nodes)")
            continue
        configs = [(run_config(r).resolved(catalog), r.local_batch_size) for r in tested]
        # the catalog's link figures, no fitted efficiency
        simulator = FeatureBuilder(with_estimated_gradient_size(view, catalog, None), catalog)
        for r, (config, b), p in zip(tested, configs, predictor.predict(view, catalog, configs)):
            rows.append(HeldOutRow(job.model, p.config, b, r.nodes, r.step_ms, p.iteration_ms, *p.interval_ms,
                                   float(p.parts["compute_ms"]), simulator.row_estimate(config, b).sim_ms,
                                   p.parts["gradient_source"], p.parts["overlap_source"]))
    if not rows:
        raise SriftyError(
            f"A held-out check needs, for some model, runs on one node (to predict from) and runs across nodes "
            f"(to predict); {'; '.join(skipped)}.",
            "Give a trace with both, e.g. the 1-4 GPU rows of one node and the multi-node rows of a model.")
    seen = tuple(sorted({r.model for r in rows} & set(predictor.meta.get("models", []))))
    return HeldOutCheck(rows, seen, tuple(skipped))

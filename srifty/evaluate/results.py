"""What an evaluation found: each case's pick, oracle, regret and baselines (:class:`CaseResult`)
and the whole evaluation (:class:`Evaluation`) with its summary figures (prediction error,
intervals, measurement noise, verdicts against the baselines) and its JSON form. The
:class:`~srifty.evaluate.runner.Evaluator` produces it; the report renders it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from srifty.evaluate.choice import Savings, Verdict, against_baseline
from srifty.evaluate.drift import RecordingDrift
from srifty.evaluate.space import Candidate, Case


@dataclass
class CaseResult:
    case: Case
    pick: Candidate | None
    oracle: Candidate | None
    pick_regret: float | None
    pick_note: str
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class Evaluation:
    model: str
    script: str
    batch_size: int
    types: list[str]
    max_hosts: int
    candidates: list[Candidate]
    cases: list[CaseResult]
    profiling_seconds: float
    profiling_usd: float
    oracle_seconds: float
    oracle_usd: float
    predictor: dict[str, Any]
    drift: "RecordingDrift | None" = None  # against an earlier recording of the same space (compare_recordings)

    @property
    def prediction_errors(self) -> list[float]:
        """Errors of the configurations that were predicted (not measured while profiling)."""
        return [e for c in self.candidates if c.source != "measured" and (e := c.prediction_error) is not None]

    def interval_hits(self) -> tuple[int, int]:
        """(predicted configurations whose measured throughput lies in the predicted interval, those with one)."""
        with_interval = [c for c in self.candidates if c.source != "measured" and c.predicted_interval
                         and c.measured_samples_per_s]
        hits = sum(1 for c in with_interval
                   if c.predicted_interval[0] <= c.measured_samples_per_s <= c.predicted_interval[1])
        return hits, len(with_interval)

    def measurement_noise(self) -> tuple[float | None, int, int]:
        """Over the predicted configurations: the median relative 95% CI of their measured medians,
        and (predictions inside their measurement's CI, configurations with a CI)."""
        from srifty import stats

        cis = [c.measured_rel_ci for c in self.candidates if c.source != "measured" and c.measured_rel_ci is not None]
        inside = [w for c in self.candidates if c.source != "measured" and (w := c.within_measurement_ci) is not None]
        return (stats.median(cis) if cis else None), sum(inside), len(inside)

    def against_baselines(self) -> list[dict[str, Savings]]:
        """For each case, srifty's pick against each of its baselines (:func:`against_baseline`)."""
        return [{name: against_baseline(r.pick, r.pick_regret, b, self.profiling_usd)
                 for name, b in r.baselines.items()} for r in self.cases]

    def baseline_verdicts(self) -> dict[str, Any]:
        """How often the pick beats, ties or loses to each baseline, and in how many cases it is at
        least as good as every baseline / better than every one."""
        per_case = self.against_baselines()
        names = list(per_case[0]) if per_case else []
        counts = {n: {v.value: sum(1 for c in per_case if c[n].verdict == v) for v in Verdict} for n in names}
        return {
            "per_baseline": counts,
            "cases": len(per_case),
            "at_least_as_good_as_every_baseline": sum(1 for c in per_case
                                                      if all(x.verdict != Verdict.WORSE for x in c.values())),
            "better_than_every_baseline": sum(1 for c in per_case
                                              if c and all(x.verdict == Verdict.BETTER for x in c.values())),
        }

    def mixes(self) -> dict[str, int]:
        """How often the pick and the oracle are mixes of types, and, where the pick is a mix, how
        it fares against the best homogeneous configuration (verdicts by measured figures)."""
        homogeneous = "best homogeneous configuration"
        against = [a.get(homogeneous) for r, a in zip(self.cases, self.against_baselines()) if r.pick and r.pick.mixed]
        return {"cases": len(self.cases), "pick_mixed": sum(1 for r in self.cases if r.pick and r.pick.mixed),
                "oracle_mixed": sum(1 for r in self.cases if r.oracle and r.oracle.mixed),
                **{f"mix_{v.value}_than_homogeneous": sum(1 for x in against if x and x.verdict == v) for v in Verdict}}

    def summary(self) -> dict[str, Any]:
        errs = self.prediction_errors
        from srifty import stats

        noise, in_ci, with_ci = self.measurement_noise()
        hits, checked = self.interval_hits()
        return {
            "configurations": len(self.candidates),
            "measured": sum(1 for c in self.candidates if c.measured_samples_per_s),
            "prediction_mape": sum(errs) / len(errs) if errs else None,
            "prediction_median_ape": stats.median(errs) if errs else None,
            "prediction_max_ape": max(errs) if errs else None,
            "interval_hits": hits, "interval_checked": checked,
            "oracle_median_rel_ci": noise, "within_measurement_ci": in_ci, "measurement_ci_checked": with_ci,
            "profiling_seconds": self.profiling_seconds,
            "oracle_seconds": self.oracle_seconds,
            "profiling_share_of_oracle": self.profiling_seconds / self.oracle_seconds if self.oracle_seconds else None,
            "against_baselines": self.baseline_verdicts(),
            "mixes": self.mixes(),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "model": self.model,
            "script": self.script,
            "batch_size": self.batch_size,
            "types": self.types,
            "max_hosts": self.max_hosts,
            "summary": self.summary(),
            "profiling_usd": self.profiling_usd,
            "oracle_usd": self.oracle_usd,
            "predictor": self.predictor,
            "drift": asdict(self.drift) if self.drift else None,
            "candidates": [{**asdict(c), "prediction_error": c.prediction_error} for c in self.candidates],
            "cases": [
                {
                    "case": asdict(r.case) | {"objective": r.case.resolved_objective, "label": r.case.label()},
                    "pick": r.pick.config if r.pick else None,
                    "oracle": r.oracle.config if r.oracle else None,
                    "pick_regret": r.pick_regret,
                    "pick_note": r.pick_note,
                    "baselines": r.baselines,
                    "against_baselines": {name: {**asdict(x), "verdict": x.verdict.value}
                                          for name, x in against.items()},
                }
                for r, against in zip(self.cases, self.against_baselines())
            ],
        }

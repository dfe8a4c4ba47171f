"""Choosing under constraints and judging the choice: which candidates are feasible, the best
one by predicted or measured figures (:func:`best`), the regret of a pick against the oracle,
the baselines a user might pick instead, and srifty's pick against each baseline on the same
training job (:class:`Verdict`, :class:`Savings`, :func:`against_baseline`). Pure functions of
the candidates, with no runs behind them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, Sequence

from srifty.evaluate.space import Candidate, Case


def _value(c: Candidate, measured: bool) -> float | None:
    return c.measured_samples_per_s if measured else c.predicted_samples_per_s


def feasible(c: Candidate, case: Case, measured: bool) -> bool:
    thr = _value(c, measured)
    if thr is None or not c.within_limits(case.limits):
        return False
    if case.budget_per_hour is not None and c.usd_per_hour > case.budget_per_hour + 1e-12:
        return False
    if case.min_throughput is not None and thr < case.min_throughput:
        return False
    return True


def score(c: Candidate, case: Case, measured: bool) -> float:
    """Lower is better, for every objective."""
    thr = _value(c, measured) or 0.0
    obj = case.resolved_objective
    if obj == "throughput":
        return -thr
    if obj == "cost":
        return c.usd_per_hour
    return c.usd_per_hour / thr if thr > 0 else math.inf  # cost per sample


def best(cands: Sequence[Candidate], case: Case, measured: bool) -> Candidate | None:
    ok = [c for c in cands if feasible(c, case, measured)]
    if not ok:
        return None
    # ties (equal price under the cost objective) go to the faster configuration
    return min(ok, key=lambda c: (score(c, case, measured), -(_value(c, measured) or 0.0)))


def regret(pick: Candidate | None, oracle: Candidate | None, case: Case) -> tuple[float | None, str]:
    """Relative loss of ``pick`` against the oracle, by measured figures, and a note.

    throughput: 1 - thr(pick)/thr(oracle); cost: $/h(pick)/$/h(oracle) - 1;
    cost-per-sample: the same on $ per sample. A pick that breaks a constraint when
    measured has no regret figure: the note says which constraint it breaks.
    """
    if oracle is None:
        return None, "nothing in the space meets the constraints"
    if pick is None:
        return None, "no pick"
    if not feasible(pick, case, measured=True):
        thr = pick.measured_samples_per_s or 0.0
        if case.budget_per_hour is not None and pick.usd_per_hour > case.budget_per_hour:
            return None, f"over budget (${pick.usd_per_hour:.2f}/h)"
        return None, f"misses the throughput floor when measured ({thr:.1f} < {case.min_throughput:g} samples/s)"
    obj = case.resolved_objective
    if obj == "throughput":
        return 1.0 - pick.measured_samples_per_s / oracle.measured_samples_per_s, ""
    if obj == "cost":
        return pick.usd_per_hour / oracle.usd_per_hour - 1.0, ""
    per = lambda c: c.usd_per_hour / c.measured_samples_per_s  # noqa: E731
    return per(pick) / per(oracle) - 1.0, ""


def baselines(cands: Sequence[Candidate], case: Case, max_hosts: int) -> dict[str, Candidate | None]:
    """Common choices, judged on the measured table, among the hosts that can be had and at the
    evaluation's batch on every worker (no batch split: that is srifty's)."""
    cands = [c for c in cands if c.within_limits(case.limits) and not c.batch_by_type]
    singles = [c for c in cands if len(c.hosts) == 1 and c.measured_samples_per_s]
    cheapest = min(singles, key=lambda c: (c.usd_per_hour, -c.measured_samples_per_s), default=None)
    fastest_type = max(singles, key=lambda c: c.measured_samples_per_s, default=None)
    at_max = None
    if fastest_type is not None:
        same = [c for c in cands if c.homogeneous and c.hosts[0] == fastest_type.hosts[0] and c.measured_samples_per_s
                and (case.budget_per_hour is None or c.usd_per_hour <= case.budget_per_hour + 1e-12)]
        at_max = max(same, key=lambda c: len(c.hosts), default=None)
    homo = best([c for c in cands if c.homogeneous], case, measured=True)
    return {
        "cheapest type per hour (SkyPilot's default)": cheapest,
        "fastest type at the most hosts": at_max,
        "best homogeneous configuration": homo,
    }


class Verdict(str, Enum):
    """srifty's pick against a baseline, on the case's objective (both judged by measured figures)."""

    BETTER = "better"
    SAME = "same"
    WORSE = "worse"


@dataclass(frozen=True)
class Savings:
    """srifty's pick against one baseline, by measured figures, on the same training job (a fixed
    number of samples): which is the better choice for the case's objective, what the job costs
    and how long it takes on the pick relative to the baseline, and when the pick's saving has
    paid for the cheap profiling."""

    verdict: Verdict  # the pick's regret against the baseline's
    job_cost_change: float | None = None  # pick's $ per sample / the baseline's - 1 (negative: the job is cheaper)
    job_time_change: float | None = None  # pick's time for the job / the baseline's - 1 (negative: it is faster)
    # hours of training on the pick after which what it saves on the job has paid for the
    # profiling; None where the pick does not save money on the job (or is the baseline itself)
    payback_hours: float | None = None


REGRET_TIE = 1e-9


def against_baseline(pick: Candidate | None, pick_regret: float | None, baseline: dict[str, Any],
                     profiling_usd: float) -> Savings:
    """Compare the pick with one baseline entry of a case (``CaseResult.baselines``): the verdict
    reads both regrets against the same oracle (a baseline with none, or one that breaks the
    constraints when measured, loses to a pick that keeps them); the job figures need both
    measured."""
    b_regret = baseline.get("regret") if baseline.get("config") else None
    if pick_regret is None and b_regret is None:
        verdict = Verdict.SAME  # neither meets the constraints
    elif pick_regret is None:
        verdict = Verdict.WORSE
    elif b_regret is None or pick_regret < b_regret - REGRET_TIE:
        verdict = Verdict.BETTER
    else:
        verdict = Verdict.SAME if pick_regret <= b_regret + REGRET_TIE else Verdict.WORSE
    thr_b, usd_b = baseline.get("measured_samples_per_s"), baseline.get("usd_per_hour")
    if pick is None or not pick.measured_samples_per_s or not thr_b or usd_b is None or b_regret is None:
        return Savings(verdict)
    if baseline.get("config") == pick.config:
        return Savings(verdict, 0.0, 0.0)
    thr_p, usd_p = pick.measured_samples_per_s, pick.usd_per_hour
    cost_change = (usd_p / thr_p) / (usd_b / thr_b) - 1.0
    time_change = thr_b / thr_p - 1.0
    # per hour of training on the pick: what the baseline would charge for the same samples, less the pick's price
    saved_per_hour = usd_b * thr_p / thr_b - usd_p
    payback = profiling_usd / saved_per_hour if saved_per_hour > 0 else None
    return Savings(verdict, cost_change, time_change, payback)

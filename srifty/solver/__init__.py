"""Recommend cluster configurations: enumerate, predict, constrain, rank, Pareto.

:func:`solve` (``search``, which also describes the flow) is the library's entry point;
``srifty recommend`` only formats what it returns. The rest, by step:

- ``constraints``: what the person asks (:class:`Constraints`, :class:`Objective`,
  :func:`choose_objective`) and :class:`InfeasibleError`.
- ``offers``: instance types × markets with prices (:class:`Offers`, :func:`build_offers`), the
  homogeneous grid the latency model predicts once, and spot goodput.
- ``space``: per-offer figures, exact pruning of dominated offers (:func:`dominance`), the
  composed candidates, capacity limits (:func:`exceeded_limits`).
- ``rows``: a candidate as a configuration and a :class:`Recommendation`; the Pareto front.
- ``infeasible``: which constraint rules everything out, and its nearest relaxation
  (:func:`explain_infeasible`).
- ``results``: what a solve returns (:class:`Recommendation`, :class:`Result`, its findings
  :class:`NearTie` and :class:`SlowEnd`), :func:`measurement_advice`, and what ``srifty recommend``
  found (:class:`RecommendOutcome`).
"""

from srifty.solver.constraints import (DEFAULT_CHECKPOINT_INTERVAL_H, DEFAULT_RESTART_OVERHEAD_H, Constraints,
                                       InfeasibleError, Objective, choose_objective)
from srifty.solver.infeasible import FLAG, explain_infeasible
from srifty.solver.offers import Offers, build_offers
from srifty.solver.results import (SOURCES, MeasurementAdvice, NearTie, Recommendation, RecommendOutcome, Result,
                                   SlowEnd, SlowEndMiss, measurement_advice)
from srifty.solver.search import solve
from srifty.solver.space import dominance, exceeded_limits

__all__ = [
    "DEFAULT_CHECKPOINT_INTERVAL_H", "DEFAULT_RESTART_OVERHEAD_H", "Constraints", "InfeasibleError", "Objective",
    "choose_objective", "FLAG", "explain_infeasible", "Offers", "build_offers", "SOURCES", "MeasurementAdvice",
    "NearTie", "Recommendation", "RecommendOutcome", "Result", "SlowEnd", "SlowEndMiss", "measurement_advice", "solve",
    "dominance", "exceeded_limits",
]

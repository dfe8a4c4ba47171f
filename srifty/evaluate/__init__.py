"""Recommendations checked against measured reality, on the emulated cluster.

``srifty evaluate SCRIPT`` closes the loop where every candidate can actually be run:

1. **srifty's way**: profile SCRIPT cheaply (one host of each type, plus one allreduce
   sweep across two hosts), predict every configuration of the space with the latency
   model (trained on the shipped corpora *without* this model's emulated runs), and pick
   for each constraint setting exactly as ``srifty recommend`` does (the solver: mixes with
   their batch split, availability limits, this machine's cores as a capacity limit); the
   profiling time is recorded.
2. **the oracle**: run every configuration of the space (homogeneous and mixes of two
   types, up to ``max_hosts`` hosts whose CPU shares fit this machine's cores, at the
   evaluation's batch on every worker) and each mix srifty picked at its own batch split (as
   its plan runs it), long enough for a stable median, and find the truly best one.
3. **baselines** on the same measured table: the cheapest type per hour (SkyPilot's
   default), the fastest single type at the most hosts allowed, the best homogeneous
   configuration.
4. **report**: regret of each pick against the oracle, prediction error of every
   configuration, and what the cheap profiling cost against what it saved.

Every run is cached in the work directory (``<work>/profiles/...``), so an interrupted
evaluation resumes and several constraint settings share one oracle table.

The package: ``space`` (the constraint settings, the candidates and the space), ``choice``
(feasibility, the best pick, regret, baselines and the pick against each baseline), ``drift``
(the oracle's repeatability against an earlier recording), ``results`` (what an evaluation
found, its summary and JSON), ``runner`` (the :class:`Evaluator` that runs the four steps) and
``report`` (markdown, plot, JSON file).
"""

from srifty.evaluate.choice import (REGRET_TIE, Savings, Verdict, against_baseline, baselines, best, feasible, regret,
                                    score)
from srifty.evaluate.drift import RecordingDrift, compare_recordings, recording_label, same_recording
from srifty.evaluate.report import (_duration, _pct, baseline_cell, drift_line, mixes_line, plot, pool_verdicts,
                                    render_markdown, save_json, savings_cell, verdicts_line)
from srifty.evaluate.results import CaseResult, Evaluation
from srifty.evaluate.runner import Evaluator, ProgressFn
from srifty.evaluate.space import OBJECTIVES, Candidate, Case, candidate_space

__all__ = [
    "REGRET_TIE", "Savings", "Verdict", "against_baseline", "baselines", "best", "feasible", "regret", "score",
    "RecordingDrift", "compare_recordings", "recording_label", "same_recording",
    "_duration", "_pct", "baseline_cell", "drift_line", "mixes_line", "plot", "pool_verdicts", "render_markdown", "save_json",
    "savings_cell", "verdicts_line", "CaseResult", "Evaluation", "Evaluator", "ProgressFn", "OBJECTIVES", "Candidate",
    "Case", "candidate_space",
]

"""What the person asks of a recommendation: constraints and the objective.

:class:`Constraints` (budgets, throughput, deadline, job size, node and type limits, markets,
region, batch, capacity limits) with their validation; :class:`Objective` and
:func:`choose_objective`, which picks one (and says why) when none is given;
:class:`InfeasibleError`, raised when no configuration meets every constraint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from srifty.capacity import CapacityLimit
from srifty.configspec import MAX_SEARCH_NODES
from srifty.errors import SriftyError

DEFAULT_CHECKPOINT_INTERVAL_H = 0.5
DEFAULT_RESTART_OVERHEAD_H = 0.1


def hours_text(hours: float, asked: bool = False) -> str:
    """A duration for a message or a table: minutes under an hour (41.3 min), else hours (2.55 h,
    1,234 h; a limit the person ``asked`` for as they gave it, 2 h)."""
    if hours < 1:
        return f"{hours * 60:.3g} min"
    if asked:
        return f"{hours:g} h"
    return f"{hours:.2f} h" if hours < 100 else f"{hours:,.0f} h"


def deadline_at_least(hours: float) -> str:
    """What --deadline takes that allows ``hours``: whole minutes under an hour (41m), else
    hundredths of an hour (2.56), rounded up."""
    if hours < 1:
        return f"{math.ceil(hours * 60 - 1e-9)}m"
    return f"{math.ceil(hours * 100 - 1e-9) / 100:g}"


class Objective(str, Enum):
    """What to optimise among the configurations that meet every constraint."""

    THROUGHPUT = "throughput"  # most samples/s
    COST = "cost"  # least $ (to finish, when the job size is known; else $/h)
    COST_PER_SAMPLE = "cost-per-sample"  # least $ per sample


class InfeasibleError(SriftyError):
    """No configuration meets every constraint (the message names the one to relax)."""


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

    @property
    def mixes(self) -> bool:
        """Whether the search composes mixes of two types (each on its own nodes)."""
        return self.heterogeneous and self.max_types >= 2 and self.max_nodes >= 2

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

"""Why nothing is feasible: the constraint that rules everything out, and its nearest relaxation.

:func:`explain_infeasible` tries each constraint alone relaxed (the others kept) and names the
least change of each that would leave a configuration (:data:`FLAG`: the option behind each).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from srifty.solver.constraints import Constraints, InfeasibleError, deadline_at_least, hours_text
from srifty.solver.space import exceeded_limits

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


FLAG = {"budget": "--budget", "total_budget": "--total-budget", "min_throughput": "--min-throughput",
        "deadline": "--deadline", "spot": "--no-spot", "max_interruption": "--max-interruption",
        "capacity": "--available/--quotas", "memory": "--batch-size/--global-batch-size",
        "workers": "--global-batch-size"}


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
            lines.append(f"--deadline {hours_text(c.deadline_hours, asked=True)} rules everything out: the fastest configuration "
                         f"meeting the others ({config_of(j)}) needs {hours_text(hours[j])}; extend --deadline to "
                         f"{deadline_at_least(hours[j])}")
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
        elif k == "memory":
            j = pick(idx, price, -thr, rate)
            lines.append(f"GPU memory rules everything out: {config_of(j)} meets every other constraint at "
                         f"${price[j]:.2f}/h but one of its workers cannot hold its per-worker batch; give a "
                         "smaller --batch-size, or a --global-batch-size spread over "
                         "more GPUs, or allow types with larger GPUs")
        elif k == "workers":
            j = pick(idx, cat["gpus"], price, -thr)
            lines.append(f"--global-batch-size {c.global_batch_size} gives every configuration meeting the others "
                         f"a worker without a sample: the fewest GPUs among them is {int(cat['gpus'][j])} "
                         f"({config_of(j)}); raise --global-batch-size to {int(cat['gpus'][j])}")
    hint = "Relax one of these (each alone is enough)." if len(lines) > 1 else "Relax it as shown."
    if "spot" not in masks and any(k == "budget" for k, _ in blockers) and not c.spot:
        hint += " Allowing --spot may also help."
    return InfeasibleError("No configuration meets every constraint. " + "; or ".join(lines) + ".", hint)

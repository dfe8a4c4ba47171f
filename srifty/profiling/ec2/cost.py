"""What a run's plans may cost, and the consent a launch needs before any AWS call.

Both figures bill each instance for the whole time cap plus boot; the worst case adds the
on-demand retry after a lost spot run. Above the cost limit a launch is refused; under it, or
with ``--yes``, or confirmed on a terminal, it goes ahead (:meth:`CostEstimate.approve`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from srifty.errors import SriftyError
from srifty.profiling.ec2.config import CostLimit, Ec2Config, cost_limit
from srifty.profiling.ec2.plans import TypePlan
from srifty.profiling.launcher import ProfileRequest


@dataclass(frozen=True)
class CostEstimate:
    """The cost of ``plans`` at catalog prices in ``region``, each instance billed ``hours``."""

    request: ProfileRequest
    plans: list[TypePlan]
    region: str
    hours: float  # time cap plus boot, in hours
    time_cap_s: float
    boot_overhead_s: float
    on_demand_price: Callable[[str], float | None]  # per hour, of an instance type, for the worst case

    def estimate(self) -> tuple[float | None, float | None]:
        """(planned cost, worst case including the on-demand retry after a lost spot run)."""
        costs = [p.estimate(self.hours) for p in self.plans]
        if any(c is None for c in costs):
            return None, None
        planned = sum(c for c in costs if c is not None)
        worst = planned
        if self.request.spot:
            worst += sum((self.on_demand_price(p.instance_type) or 0.0) * p.nodes * self.hours for p in self.plans)
        return planned, worst

    def table(self) -> str:
        lines = [f"# estimated cost (catalog prices in {self.region}, "
                 f"{self.hours:.2f} h per instance = time cap {self.time_cap_s:.0f} s + boot {self.boot_overhead_s:.0f} s)"]
        for p in self.plans:
            cost = p.estimate(self.hours)
            price = "unknown" if p.price_per_hour is None else f"${p.price_per_hour:.4f}/h"
            lines.append(f"#   {p.instance_type:<16} {p.market:<9} x{p.nodes}  {price:>14}  "
                         f"{'unknown' if cost is None else f'${cost:.2f}'}")
        planned, worst = self.estimate()
        if planned is not None:
            lines.append(f"#   total ${planned:.2f}" + (f" (worst case with on-demand retries ${worst:.2f})" if self.request.spot else ""))
        return "\n".join(lines)

    def line(self) -> str:
        """The one line every launch prints before it asks: both figures bill the whole time cap."""
        planned, worst = self.estimate()
        count = f"{sum(p.nodes for p in self.plans)} instance(s), at most {self.hours:.2f} h each"
        if planned is None or worst is None:
            return f"estimated cost unknown (the catalog lacks a price): {count}"
        return f"estimated cost ${planned:.2f} (worst case ${worst:.2f}): {count}"

    def check(self, limit: CostLimit | None) -> None:
        """Refuse, before any AWS call, a run whose worst case is above the limit (or unknown)."""
        if limit is None:
            return
        planned, worst = self.estimate()
        if worst is None:
            raise SriftyError(f"{limit.source} cannot be enforced: the catalog has no price for some of the instance types.",
                              "Run `srifty catalog refresh`, or lift the limit and launch with --yes.")
        if worst > limit.dollars:
            raise SriftyError(
                f"This run could cost up to ${worst:.2f}, above {limit.source} ${limit.dollars:.2f} "
                f"({len(self.plans)} type(s) x {self.request.nodes} node(s) x {self.hours:.2f} h"
                f"{', including an on-demand retry if spot capacity is lost' if self.request.spot else ''}). Nothing was launched.",
                "Raise --max-cost, profile fewer or cheaper --instance-types, lower --max-seconds/--time-cap, "
                "or see the breakdown with --dry-run.",
            )

    def approve(self, config: Ec2Config, log: Callable[[str], None]) -> None:
        """Every real launch prints its cost and has consent before any AWS call.

        Above the cost limit: refused. Then ``--yes`` is consent; else, with someone to ask
        (``request.confirm``, which the CLI sets when stdin is a terminal), their answer;
        else (scripts, CI) a cost limit the estimate is under, given as --max-cost or in the
        config file, is the consent: the user set the most they will pay. Nothing at all:
        refused, since nobody agreed to the spend."""
        request = self.request
        log(self.table())
        log(self.line())
        limit = cost_limit(request, config)
        self.check(limit)
        if request.yes:
            return
        if request.confirm is not None:
            if request.confirm(self.question()):
                return
            raise SriftyError("Not confirmed: nothing was launched.")
        if limit is not None:
            return
        planned, worst = self.estimate()
        cost = "an unknown cost" if planned is None else f"an estimated ${planned:.2f} (worst case ${worst:.2f})"
        raise SriftyError(
            f"Launching {sum(p.nodes for p in self.plans)} EC2 instance(s) for {cost} needs consent, and stdin is not "
            "a terminal to ask on. Nothing was launched.",
            f"Add --yes to launch it, or --max-cost DOLLARS (or `ec2: {{max_cost: DOLLARS}}` in {config.path}) "
            "to launch only runs estimated below it.",
        )

    def question(self) -> str:
        """What a terminal is asked before a launch."""
        _, worst = self.estimate()
        cost = "an unknown cost" if worst is None else f"up to ${worst:.2f}"
        what = ", ".join(f"{p.nodes} x {p.instance_type} ({p.market})" for p in self.plans)
        return f"Launch {what} in {self.region}, for {cost}?"

    def consent_note(self, limit: CostLimit | None) -> str:
        """For the dry run: what a real launch of this plan would need."""
        if limit is None:
            return ("no cost limit: a launch asks to confirm on a terminal, and needs --yes (or a --max-cost) "
                    "elsewhere")
        _, worst = self.estimate()
        if worst is None or worst > limit.dollars:
            return f"cost limit ${limit.dollars:.2f} ({limit.source}): a launch would be refused"
        return (f"cost limit ${limit.dollars:.2f} ({limit.source}): the estimate is under it; a launch asks to "
                "confirm on a terminal (unless --yes) and goes ahead elsewhere")

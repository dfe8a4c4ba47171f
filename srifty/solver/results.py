"""What a solve returns: ranked rows, the Pareto front, and advice on what to measure.

:class:`Recommendation` is one configuration with its figures (and where each came from);
:class:`Result` holds the ranking, the Pareto front and the notes of one solve, and what the solve
found about its own choice: a row that ties it on the objective within less than a measurement
tells apart and is better on the other figure (:class:`NearTie`), or constraints it meets at its
figure and not at its interval's slow end (:class:`SlowEnd`);
:func:`measurement_advice` names the one EC2 profile that would make the chosen row's compute
measured rather than transferred, or else its network measured rather than a prior
(:class:`MeasurementAdvice`), what it costs, and which ranked rows it could reorder;
:class:`RecommendOutcome` is what ``srifty recommend`` found: the result with the job, the model,
the advice and AWS's spot placement scores.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from srifty.capacity import SpotScore
from srifty.catalog import Catalog
from srifty.configspec import parse_config
from srifty.features import hardware_of
from srifty.features.job import profile_command
from srifty.profiling.ec2 import billed_hours
from srifty.profiling.launcher import ProfileRequest
from srifty.solver.constraints import Constraints, Objective, hours_text

if TYPE_CHECKING:  # pragma: no cover
    from srifty.features import JobProfile

SOURCES = ("measured", "predicted", "transferred")


@dataclass
class Recommendation:
    """One configuration with its figures (every figure says where it came from)."""

    config: str
    market: str  # on-demand | spot | mixed
    gpus: int
    nodes: int
    batch_split: dict[str, float]  # per-worker batch on each instance type
    global_batch: float
    iteration_ms: float
    interval_ms: tuple[float, float]
    throughput_samples_per_s: float  # expected goodput (interruptions discounted)
    raw_throughput_samples_per_s: float
    usd_per_hour: float
    usd_per_million_samples: float
    interruptions_per_hour: float
    source: str
    mixed: bool
    hours_to_finish: float | None = None
    usd_to_finish: float | None = None
    rank: int | None = None
    chosen: bool = False
    # the step split into the slowest worker's compute alone and the rest, with where each came
    # from where the oracle says (srifty.model.PredictionTable.parts; a mix: its equalised compute,
    # and the less certain source of its two types' rows)
    parts: dict[str, Any] = field(default_factory=dict)
    # the types of a configuration across nodes whose network between nodes nobody measured (its
    # parts' network_source is then "prior"): of a mix, those of its two types whose own rows say so
    network_prior_types: list[str] = field(default_factory=list)
    # one worker's tensor memory on each instance type at its per-worker batch (GiB; the profile's
    # count, or the floor of parameters and gradients), where the job's memory is known
    memory_gib: dict[str, float] = field(default_factory=dict)
    # a mix whose figures are composed of its two types' rows, not its own prediction (srifty
    # predicts the mixes among the rows shown as they are; one a note names past them is not)
    composed: bool = False
    # what `srifty predict` warns of this configuration, less what the result's notes say (filled
    # by srifty.api.recommend for the ranked rows and the front; empty with the simulator alone)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["interval_ms"] = [round(self.interval_ms[0], 3), round(self.interval_ms[1], 3)]
        for k in ("iteration_ms", "throughput_samples_per_s", "raw_throughput_samples_per_s", "global_batch"):
            d[k] = round(d[k], 3)
        for k in ("usd_per_hour", "usd_per_million_samples", "usd_to_finish"):
            if d[k] is not None:
                d[k] = round(d[k], 4)
        d["batch_split"] = {k: round(v, 2) for k, v in self.batch_split.items()}
        if d["hours_to_finish"] is not None:
            d["hours_to_finish"] = round(d["hours_to_finish"], 4)
        d["interruptions_per_hour"] = round(d["interruptions_per_hour"], 6)
        if self.hours_to_finish is None:
            d.pop("hours_to_finish")
            d.pop("usd_to_finish")
        return d


class MeasuredPart(str, Enum):
    """What a :class:`MeasurementAdvice` would measure."""

    COMPUTE = "compute"  # the step on a type nobody profiled (an EC2 training profile on one instance)
    NETWORK = "network"  # the network between nodes of a type nobody measured (a collectives sweep on two)


# instances of the type a network measurement runs on (`srifty profile --collectives --nodes 2`)
NETWORK_SWEEP_NODES = 2


def nccl_tests_command(instance_type: str, gpus_per_node: int, placement_group: bool = False) -> str:
    """nccl-tests' all_reduce_perf across NETWORK_SWEEP_NODES nodes of ``instance_type`` (one rank
    per GPU, NCCL saying which network it used) and its import as a collectives profile."""
    n = NETWORK_SWEEP_NODES
    log = f"{instance_type}-nccl.log"
    return (f"mpirun -np {n * gpus_per_node} -N {gpus_per_node} -x NCCL_DEBUG=INFO all_reduce_perf -b 8 -e 2G -f 2 "
            f"> {log} && srifty import-nccl {log} --instance-type {instance_type} --out {instance_type}-nccl.json"
            + (" --placement-group" if placement_group else ""))


@dataclass(frozen=True)
class MeasurementAdvice:
    """What would turn the chosen configuration's predicted compute on a type nobody profiled, or
    its network nobody measured, into a measured one, what it costs, and which of the ranked rows
    it could reorder."""

    config: str
    instance_type: str
    command: str
    hours: float  # the most each instance of the EC2 profile is billed for
    usd: float | None  # on demand, in the region recommended for, all its instances
    interval_ratio: tuple[float, float]  # the chosen row's interval over its point
    overlapping: tuple[str, ...]  # ranked configurations whose throughput interval overlaps the chosen one's
    part: MeasuredPart = MeasuredPart.COMPUTE
    instances: int = 1  # instances of ``instance_type`` the profile runs on
    # the chosen row's overlap is DDP's usual because the profile's ready times were recorded on a
    # CPU (parts' overlap_source "recorded-on-cpu"): a profile on the GPU type records them there too
    records_ready_times: bool = False
    # the network is EFA, which srifty's EC2 backend cannot measure (it attaches no EFA interface):
    # the command runs nccl-tests on the user's own nodes and imports its log (srifty import-nccl)
    by_nccl_tests: bool = False

    def sentence(self) -> str:
        lo, hi = self.interval_ratio
        billed = (f"{self.hours:.2f} h of one {self.instance_type}" if self.instances == 1
                  else f"{self.hours:.2f} h each of {self.instances} {self.instance_type}")
        cost = (f"at most ${self.usd:.2f} ({billed} on demand)" if self.usd is not None
                else f"{billed} (no price in the catalog)")
        shown = ", ".join(self.overlapping[:3]) + (f" and {len(self.overlapping) - 3} more"
                                                   if len(self.overlapping) > 3 else "")
        settle = (f"; the chosen row's throughput interval overlaps those of {shown} in the ranking, whose order "
                  "against it the measurement would settle" if self.overlapping else
                  "; no other ranked row's interval overlaps the chosen one's, so the choice stands either way")
        spans = f"the interval spans x{lo:.2f} to x{hi:.2f} of {self.config}'s figure"
        if self.part is MeasuredPart.NETWORK and self.by_nccl_tests:
            about = (f"about ${self.usd:.2f} ({billed} on demand)" if self.usd is not None
                     else f"about {billed} (no price in the catalog)")
            return (f"the network between {self.instance_type} nodes is EFA and a prior, not measured ({spans}); "
                    "srifty's EC2 backend cannot measure it (it attaches no EFA interface), but nccl-tests on two "
                    f"of your nodes with the aws-ofi-nccl plugin can: `{self.command}`, {about}, for a model "
                    f"fitted with that profile in its corpus (`srifty fit`){settle}.")
        if self.part is MeasuredPart.NETWORK:
            return (f"the network between {self.instance_type} nodes is a prior, not measured ({spans}): "
                    f"`{self.command}` measures it, {cost}, for a model fitted with that profile in its corpus "
                    f"(`srifty fit`){settle}.")
        ready = (", and records when the gradients become ready on that GPU (a CPU's ready times do not carry "
                 "to one)" if self.records_ready_times else "")
        return (f"compute on {self.instance_type} is predicted, not measured ({spans}): `{self.command}` "
                f"measures it, {cost}{ready}{settle}.")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["usd"] = None if self.usd is None else round(self.usd, 2)
        d["hours"] = round(self.hours, 3)
        d["interval_ratio"] = [round(x, 3) for x in self.interval_ratio]
        d["overlapping"] = list(self.overlapping)
        d["part"] = self.part.value
        d["sentence"] = self.sentence()
        return d


def _throughput_interval(r: "Recommendation") -> tuple[float, float]:
    lo_ms, hi_ms = r.interval_ms
    return r.throughput_samples_per_s * r.iteration_ms / hi_ms, r.throughput_samples_per_s * r.iteration_ms / lo_ms


@dataclass(frozen=True)
class SlowEndMiss:
    """One constraint the chosen row meets at its figure and misses at its interval's slow end."""

    constraint: str  # the Constraints field: min_throughput | deadline_hours | total_budget
    limit: float  # what was asked
    at_slow_end: float  # the row's figure there (samples/s, hours, or $ to finish)

    def text(self) -> str:
        if self.constraint == "min_throughput":
            return f"--min-throughput {self.limit:g} ({self.at_slow_end:,.1f} samples/s)"
        if self.constraint == "deadline_hours":
            return f"--deadline {hours_text(self.limit, asked=True)} ({hours_text(self.at_slow_end)})"
        return f"--total-budget {self.limit:g} (${self.at_slow_end:,.2f})"


def _misses(r: "Recommendation", c: Constraints) -> list[SlowEndMiss]:
    """What ``r`` misses of --min-throughput, --deadline and --total-budget at its interval's slow end."""
    slow = r.interval_ms[1] / r.iteration_ms if r.iteration_ms > 0 else 1.0  # the step's slow end, over its figure
    out = []
    if c.min_throughput is not None and r.throughput_samples_per_s / slow < c.min_throughput - 1e-9:
        out.append(SlowEndMiss("min_throughput", c.min_throughput, r.throughput_samples_per_s / slow))
    if c.deadline_hours is not None and r.hours_to_finish is not None \
            and r.hours_to_finish * slow > c.deadline_hours + 1e-12:
        out.append(SlowEndMiss("deadline_hours", c.deadline_hours, r.hours_to_finish * slow))
    if c.total_budget is not None and r.usd_to_finish is not None and r.usd_to_finish * slow > c.total_budget + 1e-9:
        out.append(SlowEndMiss("total_budget", c.total_budget, r.usd_to_finish * slow))
    return out


def _named(r: "Recommendation", shown: int) -> dict[str, Any]:
    """A ranked row a finding names, as --json gives it: its rank, whether it is among the rows
    shown, and its figures."""
    return {"rank": r.rank, "config": r.config, "shown": r.rank is not None and r.rank <= shown, "row": r.to_dict()}


def _composed(r: "Recommendation") -> str:
    return " (its figures composed of its two types', not yet its own prediction)" if r.composed else ""


@dataclass(frozen=True)
class SlowEnd:
    """The chosen row meets --min-throughput, --deadline or --total-budget at its figure but not at
    the slow end of its 5-95% interval: what it misses there, and the first ranked row that meets
    them there too (None: none of the first ``looked`` ranked, of ``feasible``)."""

    chosen: "Recommendation"
    missed: tuple[SlowEndMiss, ...]
    held: "Recommendation | None"
    shown: int  # ranked rows shown
    looked: int  # ranked rows looked through
    feasible: int  # configurations meeting every constraint at their figure

    def sentence(self) -> str:
        held = self.held
        where = (f"#{held.rank} {held.config} meets them there too, at ${held.usd_per_hour:,.2f}/h{_composed(held)}"
                 + (f" (--top {held.rank} shows it)" if held.rank > self.shown else "") if held is not None
                 else "no other configuration meets them there" if self.looked >= self.feasible
                 else f"none of the first {self.looked:,} ranked meets them there")
        return (f"{self.chosen.config} meets the constraints at its figure, not at its interval's slow end "
                f"({self.chosen.interval_ms[1]:,.1f} ms an iteration): there it misses "
                f"{'; '.join(m.text() for m in self.missed)}; {where}")

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.chosen.config, "slow_end_ms": round(self.chosen.interval_ms[1], 3),
                "missed": [{"constraint": m.constraint, "limit": m.limit, "at_slow_end": round(m.at_slow_end, 4)}
                           for m in self.missed],
                "met_there_by": None if self.held is None else _named(self.held, self.shown),
                "ranked_looked_through": self.looked, "feasible": self.feasible, "sentence": self.sentence()}


def slow_end(recs: "Sequence[Recommendation]", c: Constraints,
             further: "Callable[[], Iterable[Recommendation]]", feasible: int) -> SlowEnd | None:
    """Where the chosen row (``recs[0]``) meets --min-throughput, --deadline or --total-budget at its
    figure but not at the slow end of its 5-95% interval, what it misses there and the first ranked
    row that meets them there too: among those shown, else among ``further()``, the ranked rows after
    them in order, of ``feasible`` in all (None where the chosen row meets them there, or none is asked)."""
    missed = _misses(recs[0], c)
    if not missed:
        return None
    held = next((r for r in recs[1:] if not _misses(r, c)), None)
    looked = len(recs)
    if held is None:
        for r in further():
            looked = r.rank
            if not _misses(r, c):
                held = r
                break
    return SlowEnd(recs[0], tuple(missed), held, len(recs), looked, feasible)


@dataclass(frozen=True)
class NearTie:
    """A ranked row within ``within`` of the chosen one on the objective and better on the other
    figure by more than that: cheaper where the objective is throughput, faster where it is a cost."""

    objective: Objective
    chosen: "Recommendation"
    row: "Recommendation"
    shown: int  # ranked rows shown
    within: float

    def sentence(self) -> str:
        chosen, alt, within = self.chosen, self.row, self.within
        where = f"#{alt.rank} {alt.config}" + (f" (--top {alt.rank} shows it)" if alt.rank > self.shown else "")
        if self.objective is Objective.THROUGHPUT:
            trade = (f"throughput ({alt.throughput_samples_per_s:,.1f} samples/s against "
                     f"{chosen.throughput_samples_per_s:,.1f}) at ${alt.usd_per_hour:,.2f}/h against "
                     f"${chosen.usd_per_hour:,.2f}/h")
        else:
            if self.objective is Objective.COST and chosen.usd_to_finish is not None and alt.usd_to_finish is not None:
                cost = f"cost (${alt.usd_to_finish:,.2f} to finish against ${chosen.usd_to_finish:,.2f})"
            elif self.objective is Objective.COST:
                cost = f"cost (${alt.usd_per_hour:,.2f}/h against ${chosen.usd_per_hour:,.2f}/h)"
            else:
                cost = (f"cost per sample (${alt.usd_per_million_samples:,.3f} per 1M samples against "
                        f"${chosen.usd_per_million_samples:,.3f})")
            trade = (f"{cost} and runs {alt.throughput_samples_per_s / chosen.throughput_samples_per_s:.2f}x as fast "
                     f"({alt.throughput_samples_per_s:,.1f} samples/s)")
        return (f"{where} comes within {within:.0%} of the chosen row's {trade}{_composed(alt)}; a difference under "
                f"{within:.0%} is less than a measurement tells apart")

    def to_dict(self) -> dict[str, Any]:
        return {**_named(self.row, self.shown), "within": self.within, "sentence": self.sentence()}


def measurement_advice(result: "Result", job: "JobProfile", catalog: Any) -> MeasurementAdvice | None:
    """The one measurement that would make the chosen row's compute measured, or where it is, the
    network between its nodes where that is a prior (of a mix, the first such type's that srifty's
    EC2 backend can measure; an EFA one only where none is, since the backend attaches no EFA
    interface and its allreduces run over TCP: nccl-tests on the user's own nodes then, imported
    with `srifty import-nccl`); None when neither applies."""
    chosen = result.chosen
    unprofiled = [t for t in chosen.batch_split if t not in job.instance_types]
    by_nccl_tests = False
    if chosen.source == "transferred" and unprofiled:
        itype = unprofiled[0]
        batch = chosen.batch_split[itype]
        command = profile_command(job, f"--backend ec2 --instance-types {itype}", batch)
        part, instances, hours = MeasuredPart.COMPUTE, 1, billed_hours(ProfileRequest(script=job.script))
    elif chosen.nodes > 1 and chosen.network_prior_types:
        efa = [t for t in chosen.network_prior_types if hardware_of(catalog, t).inter_kind == "efa"]
        sweepable = [t for t in chosen.network_prior_types if t not in efa]
        itype = (sweepable or efa)[0]
        part, instances, by_nccl_tests = MeasuredPart.NETWORK, NETWORK_SWEEP_NODES, not sweepable
        pg = result.constraints.placement_group
        command = (nccl_tests_command(itype, hardware_of(catalog, itype).slots, pg) if by_nccl_tests else
                   f"srifty profile --collectives --backend ec2 --nodes {instances} --instance-types {itype}"
                   + (" --placement-group" if pg else ""))
        # nccl-tests on two nodes takes about what the EC2 backend's sweep is billed for
        hours = billed_hours(ProfileRequest(script=None, collectives=True, nodes=instances))
    else:
        return None
    price = catalog.ondemand_price(itype, result.constraints.region)
    lo, hi = _throughput_interval(chosen)
    overlapping = tuple(r.config for r in result.recommendations[1:]
                        if _throughput_interval(r)[1] >= lo and _throughput_interval(r)[0] <= hi)
    return MeasurementAdvice(chosen.config, itype, command, hours,
                             None if price is None else price * hours * instances,
                             (chosen.interval_ms[0] / chosen.iteration_ms, chosen.interval_ms[1] / chosen.iteration_ms),
                             overlapping, part, instances,
                             part is MeasuredPart.COMPUTE and chosen.parts.get("overlap_source") == "recorded-on-cpu",
                             by_nccl_tests)


@dataclass
class Result:
    objective: Objective
    objective_reason: str
    constraints: Constraints
    candidates_evaluated: int
    model_rows: int
    pruned_offers: list[str]
    solve_seconds: float
    model_seconds: float
    recommendations: list[Recommendation]
    pareto: list[Recommendation]
    feasible: int
    notes: list[str] = field(default_factory=list)
    # what the solve found about its own answer (each also the first notes' sentence)
    near_tie: NearTie | None = None
    slow_end: SlowEnd | None = None

    @property
    def chosen(self) -> Recommendation:
        return self.recommendations[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "objective": self.objective.value,
            "objective_reason": self.objective_reason,
            "constraints": {k: ([lim["what"] for lim in v] if k == "capacity" else v)
                            for k, v in asdict(self.constraints).items() if v is not None and v != ()},
            "candidates_evaluated": self.candidates_evaluated,
            "feasible": self.feasible,
            "model_rows": self.model_rows,
            "pruned_offers": self.pruned_offers,
            "solve_seconds": round(self.solve_seconds, 4),
            "model_seconds": round(self.model_seconds, 4),
            "recommendations": [r.to_dict() for r in self.recommendations],
            "pareto": [r.to_dict() for r in self.pareto],
            "notes": self.notes,
            "near_tie": None if self.near_tie is None else self.near_tie.to_dict(),
            "slow_end": None if self.slow_end is None else self.slow_end.to_dict(),
        }


@dataclass
class RecommendOutcome:
    """What ``srifty recommend`` found: the ranked result (each row with what predict warns of
    it), the job it was for, the model used, and the measurement that would settle a
    transferred pick."""

    result: Result
    job: JobProfile
    catalog: Catalog
    model_file: str | None  # None: the simulator alone
    advice: MeasurementAdvice | None
    # AWS's spot placement scores of the spot groups of the first rows (``spot_scores=True``)
    spot_scores: list[SpotScore] | None = None

    def row_spot_score(self, config: str) -> int | None:
        """The lowest score among ``config``'s spot groups (None: none of them was scored)."""
        by_group = {(s.instance_type, s.nodes): s.score for s in self.spot_scores or []}
        found = [by_group[(g.instance_type, g.count)] for g in parse_config(config).groups
                 if g.spot and by_group.get((g.instance_type, g.count)) is not None]
        return min(found) if found else None

    def spot_score_sentence(self) -> str | None:
        """What the scores say, for the terminal: every group scored, and for a chosen row with a
        low score, what to do about it."""
        if not self.spot_scores:
            return None
        region = self.spot_scores[0].region
        parts = ", ".join(f"{s.nodes} x {s.instance_type} {s.score if s.score is not None else 'none'}"
                          for s in self.spot_scores)
        text = f"spot placement scores in {region} (AWS, 1 = unlikely to be filled now, 10 = highly likely): {parts}."
        chosen = self.result.chosen
        low = [s for s in self.spot_scores if s.low and any(
            g.spot and (g.instance_type, g.count) == (s.instance_type, s.nodes) for g in parse_config(chosen.config).groups)]
        if low:
            limits = ",".join(f"{s.instance_type}@spot={s.nodes - 1}" for s in low)
            text += (f" The chosen {chosen.config} needs {', '.join(f'{s.nodes} x {s.instance_type}' for s in low)} "
                     f"on spot, which scores low: `--available {limits}` ranks what a smaller request would give, "
                     "and `--no-spot` ranks on demand only.")
        return text

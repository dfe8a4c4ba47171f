"""Recommendations checked against measured reality, on the emulated cluster.

``srifty evaluate SCRIPT`` closes the loop where every candidate can actually be run:

1. **srifty's way**: profile SCRIPT cheaply (one host of each type, plus one allreduce
   sweep across two hosts), predict every configuration of the space with the latency
   model (trained on the shipped corpora *without* this model's emulated runs), and pick
   the best one for the constraints; the profiling time is recorded.
2. **the oracle**: run every configuration of the space (homogeneous and mixes of two
   types, up to ``max_hosts`` hosts whose CPU shares fit this machine's cores) long
   enough for a stable median, and find the truly best one.
3. **baselines** on the same measured table: the cheapest type per hour (SkyPilot's
   default), the fastest single type at the most hosts allowed, the best homogeneous
   configuration.
4. **report**: regret of each pick against the oracle, prediction error of every
   configuration, and what the cheap profiling cost against what it saved.

Every run is cached in the work directory (``<work>/profiles/...``), so an interrupted
evaluation resumes and several constraint settings share one oracle table.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Sequence

from srifty.errors import SriftyError
from srifty.outputs import save_figure

OBJECTIVES = ("throughput", "cost", "cost-per-sample")


@dataclass(frozen=True)
class Case:
    """One constraint setting: what the user asks of the recommendation."""

    budget_per_hour: float | None = None
    min_throughput: float | None = None
    objective: str | None = None

    @classmethod
    def parse(cls, text: str) -> "Case":
        """``budget=0.4``, ``min_throughput=50``, ``objective=cost`` joined by commas."""
        kw: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, _, value = part.partition("=")
            key = key.strip().replace("-", "_")
            if key == "budget":
                key = "budget_per_hour"
            if key not in ("budget_per_hour", "min_throughput", "objective") or not value:
                raise SriftyError(f"--case {text!r}: {part!r} is not budget=N, min_throughput=N or objective=NAME.")
            if key == "objective":
                if value not in OBJECTIVES:
                    raise SriftyError(f"--case {text!r}: objective must be one of {', '.join(OBJECTIVES)}.")
                kw[key] = value
            else:
                try:
                    kw[key] = float(value)
                except ValueError:
                    raise SriftyError(f"--case {text!r}: {key} needs a number, got {value!r}.") from None
        return cls(**kw)

    @property
    def resolved_objective(self) -> str:
        """As ``srifty recommend`` decides: cheapest meeting a throughput floor, else fastest."""
        if self.objective:
            return self.objective
        return "cost" if self.min_throughput is not None else "throughput"

    def label(self) -> str:
        parts = []
        if self.budget_per_hour is not None:
            parts.append(f"budget ${self.budget_per_hour:g}/h")
        if self.min_throughput is not None:
            parts.append(f"at least {self.min_throughput:g} samples/s")
        parts.append(f"objective {self.resolved_objective}")
        return ", ".join(parts)


@dataclass
class Candidate:
    """One configuration of the space, with its prediction and (once run) its measurement."""

    config: str
    hosts: list[str]  # host type per node, in order
    usd_per_hour: float
    cpu_share: float
    predicted_samples_per_s: float | None = None
    predicted_interval: tuple[float, float] | None = None
    source: str | None = None
    measured_samples_per_s: float | None = None
    measured_rel_ci: float | None = None
    measure_seconds: float | None = None
    measured_at: str | None = None  # when the run that measured it was recorded (its profile's created_at)

    @property
    def homogeneous(self) -> bool:
        return len(set(self.hosts)) == 1

    @property
    def prediction_error(self) -> float | None:
        if self.predicted_samples_per_s is None or not self.measured_samples_per_s:
            return None
        return abs(self.predicted_samples_per_s - self.measured_samples_per_s) / self.measured_samples_per_s

    @property
    def within_measurement_ci(self) -> bool | None:
        """Whether the prediction lies inside the measured throughput's own 95% CI (the run's median
        iteration time ± its relative half-width, as throughput); None without both figures."""
        if self.predicted_samples_per_s is None or not self.measured_samples_per_s or self.measured_rel_ci is None:
            return None
        c = min(self.measured_rel_ci, 0.999)
        lo, hi = self.measured_samples_per_s / (1 + c), self.measured_samples_per_s / (1 - c)
        return lo <= self.predicted_samples_per_s <= hi


def candidate_space(spec: Any, types: Sequence[str], max_hosts: int, cores: float) -> list[Candidate]:
    """Homogeneous configurations and mixes of two types, up to ``max_hosts`` hosts, whose
    CPU shares add up to at most ``cores`` (what this machine can run without oversubscribing)."""
    from srifty.profiling.emulated import config_string

    out: list[Candidate] = []

    def add(hosts: list[str]) -> None:
        share = sum(spec.instance_types[t].cpu_share for t in hosts)
        if share <= cores + 1e-9:
            price = sum(spec.instance_types[t].price_per_hour for t in hosts)
            out.append(Candidate(config_string(hosts), hosts, round(price, 6), round(share, 6)))

    for t in types:
        for n in range(1, max_hosts + 1):
            add([t] * n)
    for a, b in itertools.combinations(types, 2):
        for na in range(1, max_hosts):
            for nb in range(1, max_hosts - na + 1):
                add([a] * na + [b] * nb)
    return out


# ----- choosing under constraints -----------------------------------------------------


def _value(c: Candidate, measured: bool) -> float | None:
    return c.measured_samples_per_s if measured else c.predicted_samples_per_s


def feasible(c: Candidate, case: Case, measured: bool) -> bool:
    thr = _value(c, measured)
    if thr is None:
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
    """Common choices, judged on the measured table."""
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


# ----- the evaluation ------------------------------------------------------------------


@dataclass(frozen=True)
class RecordingDrift:
    """How far this recording's measured throughputs lie from an earlier recording of the same
    space (same model, per-worker batch and configurations): the oracle's own repeatability from
    one recording to another, which bounds how closely a prediction can be checked against it."""

    previous: str  # which recording it was compared with
    configurations: int  # configurations measured in both
    single_host_mape: float  # mean |now / before - 1| over the single-host configurations
    multi_host_mape: float  # the same over the multi-host configurations
    # the earlier figure of each multi-host configuration, scaled by how this recording's single
    # hosts changed (geometric mean of its hosts' now/before ratios), taken as a prediction of
    # the figure now: what a predictor that knew the earlier recording exactly would miss by
    replay_mape: float
    replay_worst: float
    replayed: int  # multi-host configurations whose every host type was measured alone in both


def same_recording(previous: dict[str, Any], ev: "Evaluation") -> bool:
    """Whether ``previous`` (an evaluation's JSON) holds the very runs of ``ev`` (regenerated from
    the cache): every configuration carries the same recording time."""
    before = {c["config"]: c.get("measured_at") for c in previous.get("candidates", [])}
    return bool(ev.candidates) and all(c.measured_at and before.get(c.config) == c.measured_at for c in ev.candidates)


def recording_label(previous: dict[str, Any], where: str, fallback_date: str | None = None) -> str:
    """How the report names an earlier recording: the day of its first run (older JSONs do not
    record it: ``fallback_date``, e.g. when the file was committed) and where it was read."""
    days = sorted(c["measured_at"][:10] for c in previous.get("candidates", []) if c.get("measured_at"))
    if days:
        return f"the recording of {days[0]} ({where})"
    return f"the earlier recording in {where}" + (f" (committed {fallback_date})" if fallback_date else "")


def compare_recordings(previous: dict[str, Any], ev: "Evaluation", label: str) -> RecordingDrift | None:
    """``ev``'s measured figures against an earlier evaluation's JSON (see :class:`RecordingDrift`).

    None when the two share no multi-host configuration with both its host types measured alone,
    or when ``previous`` is another model or per-worker batch. When ``previous`` is the same
    recording (regenerated from cached runs), its own comparison is kept."""
    if previous.get("model") != ev.model or previous.get("batch_size") != ev.batch_size:
        return None
    if same_recording(previous, ev):
        kept = previous.get("drift")
        return RecordingDrift(**kept) if kept else None
    before = {c["config"]: c.get("measured_samples_per_s") for c in previous.get("candidates", [])}
    pairs = [(c, before[c.config]) for c in ev.candidates if c.measured_samples_per_s and before.get(c.config)]
    change = {c.config: c.measured_samples_per_s / b - 1 for c, b in pairs}
    host_ratio = {c.hosts[0]: 1 + change[c.config] for c, _ in pairs if len(c.hosts) == 1}
    single = [abs(change[c.config]) for c, _ in pairs if len(c.hosts) == 1]
    multi = [abs(change[c.config]) for c, _ in pairs if len(c.hosts) > 1]
    replay = []
    for c, b in pairs:
        if len(c.hosts) > 1 and all(h in host_ratio for h in c.hosts):
            scale = math.exp(sum(math.log(host_ratio[h]) for h in c.hosts) / len(c.hosts))
            replay.append(abs(b * scale - c.measured_samples_per_s) / c.measured_samples_per_s)
    if not replay:
        return None
    return RecordingDrift(label, len(pairs), sum(single) / len(single), sum(multi) / len(multi),
                          sum(replay) / len(replay), max(replay), len(replay))


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


ProgressFn = Callable[[str], None]


class Evaluator:
    """Runs the four steps; ``profile_fn(hosts, out, collectives)`` runs one emulated job."""

    def __init__(self, script: str, spec_path: str, work_dir: str, batch_size: int, types: Sequence[str] | None = None,
                 max_hosts: int = 3, max_seconds: float = 8.0, min_iterations: int = 8, target_ci: float = 0.03,
                 corpus: Sequence[str] = (), say: ProgressFn | None = None,
                 profile_fn: Callable[[str, Path, bool], dict[str, Any]] | None = None) -> None:
        from srifty import cluster

        self.script = script
        self.spec_path = spec_path
        self.spec = cluster.load_spec(spec_path)
        self.types = list(types) if types else sorted(self.spec.instance_types)
        for t in self.types:
            self.spec.host_type(t)  # unknown type: SriftyError with suggestions
        self.work = Path(work_dir)
        self.batch_size = batch_size
        self.max_hosts = max_hosts
        self.max_seconds = max_seconds
        self.min_iterations = min_iterations
        self.target_ci = target_ci
        self.corpus = list(corpus)
        self.say = say or (lambda msg: None)
        self.profile_fn = profile_fn or self._profile
        self.model = Path(script).stem

    # one emulated run, cached in the work directory
    def _profile(self, hosts: str, out: Path, collectives: bool) -> dict[str, Any]:
        from srifty.profiling.emulated import EmulatedBackend
        from srifty.profiling.launcher import ProfileRequest

        req = ProfileRequest(
            script=None if collectives else self.script, batch_size=None if collectives else self.batch_size,
            max_seconds=self.max_seconds, min_iterations=self.min_iterations, target_rel_ci=self.target_ci,
            hosts=hosts, spec=self.spec_path, collectives=collectives, max_bytes=16 << 20, repeats=5,
            model_name=None if collectives else self.model, startup_timeout=240, hang_timeout=120,
        )
        return EmulatedBackend().profile(req, str(out))

    def _run(self, hosts: Sequence[str], collectives: bool = False) -> tuple[dict[str, Any], float, bool]:
        """(profile document, its workers' wall seconds, whether it came from the cache).

        The seconds are the profile's own ``measurement.wall_seconds`` (workers started to
        workers ended), the same whether the run is fresh or cached; bringing the emulated
        hosts up and down is not counted.
        """
        from srifty import profile as profile_mod
        from srifty.profiling.emulated import config_string

        cfg = config_string(list(hosts))
        sub = "collectives" if collectives else self.model
        name = f"{cfg}.json" if collectives else f"{cfg}-b{self.batch_size}.json"
        out = self.work / "profiles" / sub / name
        if out.exists():
            doc = profile_mod.load(out).doc
            if doc.get("status") == "complete":
                return doc, float(doc["measurement"].get("wall_seconds") or 0.0), True
            self.say(f"running {sub} on {cfg} again: the cached run is partial ({doc.get('partial_reason')})")
        else:
            self.say(f"running {sub} on {cfg}")
        from srifty.profiling.emulated import hosts_arg

        doc = self.profile_fn(hosts_arg(hosts), out, collectives)
        return doc, float(doc["measurement"].get("wall_seconds") or 0.0), False

    def _price(self, hosts: Sequence[str]) -> float:
        return sum(self.spec.instance_types[t].price_per_hour for t in hosts)

    def sweep_pair(self) -> list[str]:
        """Two hosts of the type with the most CPU share (then the fastest link): the sweep is
        there to measure the links, and a CPU-throttled host would time its own throttling."""
        t = max(self.types, key=lambda t: (self.spec.instance_types[t].cpu_share,
                                           self.spec.instance_types[t].bandwidth_mbit))
        return [t, t]

    def cheap_profiles(self) -> tuple[list[Path], Path, float, float]:
        """Step 1: one host of each type, and an allreduce sweep across two hosts: (profile paths,
        sweep path, workers' seconds, $)."""
        from srifty.profiling.emulated import config_string

        seconds = usd = 0.0
        paths = []
        for t in self.types:
            doc, s, _ = self._run([t])
            seconds += s
            usd += s / 3600 * self._price([t])
            paths.append(self.work / "profiles" / self.model / f"1x{t}-b{self.batch_size}.json")
        pair = self.sweep_pair()
        _, s, _ = self._run(pair, collectives=True)
        seconds += s
        usd += s / 3600 * self._price(pair)
        return paths, self.work / "profiles" / "collectives" / f"{config_string(pair)}.json", seconds, usd

    def predict(self, cands: list[Candidate], profile_paths: list[Path], sweep: Path) -> dict[str, Any]:
        """Step 2: the latency model, trained without this model's emulated multi-host runs; the
        emulated links fitted on the allreduce sweeps (the corpus's and the one just measured)."""
        from srifty import model as m
        from srifty import profile as profile_mod
        from srifty.catalog import Catalog
        from srifty.configspec import parse_config
        from srifty.features import job_from_profiles, load_collectives, load_corpus

        job = job_from_profiles(profile_mod.load_many([str(p) for p in profile_paths]))
        paths = m.corpus_paths(self.corpus)
        corpus = [j for j in load_corpus(paths) if j.model != job.model]
        catalog = m.catalog_for_jobs([job], Catalog.from_emulated_spec(self.spec_path))
        collectives = load_collectives(paths) + load_collectives([sweep])
        predictor = m.Predictor.train(corpus, m.catalog_for_jobs(corpus), quick=True, collectives=collectives)
        rows = [(parse_config(c.config).resolved(catalog), self.batch_size) for c in cands]
        for c, p in zip(cands, predictor.predict(job, catalog, rows)):
            c.predicted_samples_per_s = p.throughput_samples_per_s
            world = sum(self.spec.instance_types[t].workers for t in c.hosts)
            lo_ms, hi_ms = p.interval_ms
            c.predicted_interval = (world * self.batch_size / (hi_ms / 1e3), world * self.batch_size / (lo_ms / 1e3))
            c.source = p.source
        return {"trained_on": sorted({j.model for j in corpus}), "rows": predictor.meta.get("rows"),
                "excluded_model": job.model, "sweep_points": predictor.meta.get("sweep_points"),
                "link_scale": predictor.meta.get("link_scale")}

    def measure(self, cands: list[Candidate]) -> tuple[float, float]:
        """Step 3: run every configuration (cached runs are reused)."""
        seconds = usd = 0.0
        for i, c in enumerate(cands, 1):
            doc, s, cached = self._run(c.hosts)
            s_block = doc.get("summary") or {}
            c.measured_samples_per_s = s_block.get("throughput_samples_per_s")
            c.measured_rel_ci = doc["measurement"].get("achieved_rel_ci")
            c.measure_seconds = s
            c.measured_at = doc.get("created_at")
            seconds += s
            usd += s / 3600 * c.usd_per_hour
            self.say(f"[{i}/{len(cands)}] {c.config}: {c.measured_samples_per_s or 0:.1f} samples/s"
                     + (" (cached)" if cached else ""))
        return seconds, usd

    def run(self, cases: Sequence[Case]) -> Evaluation:
        from srifty import cluster

        cores = cluster.core.system.machine_cores()
        cands = candidate_space(self.spec, self.types, self.max_hosts, cores)
        if not cands:
            raise SriftyError("The evaluation space is empty: no configuration fits this machine's cores.",
                              "Give --types with smaller CPU shares or a smaller --max-hosts.")
        self.say(f"{len(cands)} configurations in the space ({', '.join(self.types)}; up to {self.max_hosts} hosts, "
                 f"CPU shares within {cores:g} cores)")
        paths, sweep, prof_s, prof_usd = self.cheap_profiles()
        predictor = self.predict(cands, paths, sweep)
        oracle_s, oracle_usd = self.measure(cands)
        results = []
        for case in cases:
            pick = best(cands, case, measured=False)
            oracle = best(cands, case, measured=True)
            r, note = regret(pick, oracle, case)
            base = {}
            for name, b in baselines(cands, case, self.max_hosts).items():
                br, bnote = regret(b, oracle, case)
                base[name] = {"config": b.config if b else None, "regret": br, "note": bnote,
                              "measured_samples_per_s": b.measured_samples_per_s if b else None,
                              "usd_per_hour": b.usd_per_hour if b else None}
            results.append(CaseResult(case, pick, oracle, r, note, base))
        return Evaluation(self.model, self.script, self.batch_size, self.types, self.max_hosts, cands, results,
                          prof_s, prof_usd, oracle_s, oracle_usd, predictor)


# ----- the report ------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def baseline_cell(b: dict[str, Any]) -> str:
    """A baseline's config and regret (or why it has none) for the report."""
    if not b.get("config"):
        return "none within the constraints"
    return f"{b['config']}: " + (_pct(b["regret"]) if b["regret"] is not None else (b["note"] or "-"))


def _duration(hours: float) -> str:
    if hours < 1 / 60:
        return f"{hours * 3600:.0f} s"
    return f"{hours * 60:.0f} min" if hours < 1 else f"{hours:.1f} h"


def savings_cell(x: Savings, b: dict[str, Any]) -> str:
    """The report's cell for the pick against one baseline (:func:`against_baseline`)."""
    if not b.get("config"):
        return f"{x.verdict.value}: none within the constraints"
    if b.get("regret") is None:
        return f"{x.verdict.value}: {b['config']} {b.get('note') or 'breaks the constraints'}"
    if x.job_cost_change is None or x.job_time_change is None:
        return x.verdict.value
    if x.job_cost_change == 0.0 and x.job_time_change == 0.0:
        return f"{x.verdict.value}: the same configuration"
    cost = f"{abs(x.job_cost_change) * 100:.0f}% {'cheaper' if x.job_cost_change < 0 else 'dearer'}"
    time = f"{1 + x.job_time_change:.2f}× the time"
    repaid = f"; profiling repaid after {_duration(x.payback_hours)} of training" if x.payback_hours is not None else ""
    return f"{x.verdict.value}: job {cost}, {time}{repaid}"


def pool_verdicts(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """:meth:`Evaluation.baseline_verdicts` of several evaluations, summed."""
    per: dict[str, dict[str, int]] = {}
    for v in parts:
        for name, c in v["per_baseline"].items():
            acc = per.setdefault(name, {v.value: 0 for v in Verdict})
            for k in acc:
                acc[k] += c[k]
    keys = ("cases", "at_least_as_good_as_every_baseline", "better_than_every_baseline")
    return {"per_baseline": per, **{k: sum(v[k] for v in parts) for k in keys}}


def verdicts_line(v: dict[str, Any]) -> str:
    """The report's bullet on how the pick fares against the baselines across the cases."""
    per = "; ".join(f"{name}: " + ", ".join(f"{v.value} in {c[v.value]}" for v in Verdict)
                    for name, c in v["per_baseline"].items())
    return (f"- Against the baselines (by measured figures): srifty's pick is at least as good as every baseline in "
            f"{v['at_least_as_good_as_every_baseline']} of {v['cases']} cases and better than every one in "
            f"{v['better_than_every_baseline']} ({per}).")


def drift_line(d: RecordingDrift) -> str:
    """The report's bullet on how far the oracle's own figures moved since an earlier recording."""
    return (f"- Repeatability of the oracle itself: against {d.previous}, the {d.configurations} configurations "
            f"measured in both moved by {_pct(d.multi_host_mape)} on average (multi-host; single hosts "
            f"{_pct(d.single_host_mape)}). Each earlier multi-host figure scaled by how its hosts changed alone "
            f"still misses today's by {_pct(d.replay_mape)} (MAPE over {d.replayed}, worst {_pct(d.replay_worst)}): "
            "what carrying the earlier recording over to this recording would get, against which to read the "
            "prediction error above; when the machine is unchanged, it is about the floor for a predictor built "
            "from single-host profiles.")


def render_markdown(ev: Evaluation, command: str, plot: str | None = None) -> str:
    s = ev.summary()
    lines = [
        f"## {ev.model} (per-worker batch {ev.batch_size})",
        "",
        f"Command: `{command}`",
        "",
        f"Space: {s['configurations']} configurations of {', '.join(ev.types)} (homogeneous and mixes of two "
        f"types, up to {ev.max_hosts} hosts), every one measured. Latency model trained on "
        f"{', '.join(ev.predictor['trained_on']) or 'nothing'} (this model's own runs excluded).",
        "",
        f"- Prediction error over the {len(ev.prediction_errors)} predicted configurations (the single hosts were "
        f"measured while profiling): MAPE {_pct(s['prediction_mape'])}, "
        f"median {_pct(s['prediction_median_ape'])}, worst {_pct(s['prediction_max_ape'])}; the measured figure lies "
        f"inside the predicted 5–95% interval for {s['interval_hits']} of "
        f"{s['interval_checked']}.",
        *([f"- The oracle's own figures are not exact: each is the median iteration of a run cut at `--max-seconds`, "
           f"whose 95% CI is ±{_pct(s['oracle_median_rel_ci'])} (median over the predicted "
           f"configurations). {s['within_measurement_ci']} of {s['measurement_ci_checked']} predictions lie inside "
           "their measurement's CI, where an exact prediction would be about 95% of the time: the error above is "
           "mostly the model's where this share is low."]
          if s["oracle_median_rel_ci"] is not None else []),
        f"- Cheap profiling: {ev.profiling_seconds:.0f} s (${ev.profiling_usd:.4f} at catalog prices) against "
        f"{ev.oracle_seconds:.0f} s (${ev.oracle_usd:.4f}) to run every configuration: "
        f"{_pct(s['profiling_share_of_oracle'])} of the oracle's time (workers' wall time; hosts' set-up not counted).",
        "- The single-host configurations are measured by the profiling step itself (the oracle reuses those runs), "
        "so srifty knows them exactly; regret can only come from the multi-host configurations it predicts.",
        *([verdicts_line(s["against_baselines"])] if ev.cases else []),
        *([drift_line(ev.drift)] if ev.drift else []),
        "",
        "| constraints | srifty's pick | oracle | regret | " + " | ".join(
            ev.cases[0].baselines) + " |" if ev.cases else "",
        "|---|---|---|---|" + "---|" * (len(ev.cases[0].baselines) if ev.cases else 0),
    ]
    for r in ev.cases:
        cells = [r.case.label(), r.pick.config if r.pick else "-", r.oracle.config if r.oracle else "-",
                 _pct(r.pick_regret) if r.pick_regret is not None else (r.pick_note or "-")]
        for b in r.baselines.values():
            cells.append(baseline_cell(b))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Regret: throughput lost (objective throughput) or extra $/h paid (objective cost) against the "
              "oracle's pick, by measured figures.", ""]
    if ev.cases:
        lines += [f"Profiling cost against what srifty's pick saves: the same training job (a fixed number of samples) "
                  f"on the pick against each baseline, by measured figures, and how long the pick must train before "
                  f"its saving has paid for the cheap profiling (${ev.profiling_usd:.4f}); better / same / worse is "
                  f"the verdict on the case's objective.", "",
                  "| constraints | " + " | ".join(ev.cases[0].baselines) + " |",
                  "|---|" + "---|" * len(ev.cases[0].baselines)]
        for r, against in zip(ev.cases, ev.against_baselines()):
            cells = [savings_cell(against[n], b) for n, b in r.baselines.items()]
            lines.append("| " + " | ".join([r.case.label()] + cells) + " |")
        lines.append("")
    lines += ["| configuration | $/h | predicted samples/s | measured samples/s | error | source |",
              "|---|---:|---:|---:|---:|---|"]
    for c in sorted(ev.candidates, key=lambda c: -(c.measured_samples_per_s or 0)):
        lines.append(f"| {c.config} | {c.usd_per_hour:.2f} | {c.predicted_samples_per_s or 0:.1f} | "
                     f"{c.measured_samples_per_s or 0:.1f} | {_pct(c.prediction_error)} | {c.source or '-'} |")
    if plot:
        lines += ["", f"![predicted vs measured; cost vs throughput]({plot})"]
    return "\n".join(lines) + "\n"


def plot(ev: Evaluation, path: str) -> None:
    """Predicted vs measured throughput; $/h vs measured throughput with the picks marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cands = [c for c in ev.candidates if c.measured_samples_per_s and c.predicted_samples_per_s]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.5))
    meas = [c.measured_samples_per_s for c in cands]
    pred = [c.predicted_samples_per_s for c in cands]
    a.scatter(meas, pred, c=["tab:blue" if c.homogeneous else "tab:orange" for c in cands], s=22)
    hi = max(meas + pred) * 1.1
    a.plot([0, hi], [0, hi], "k--", lw=0.8)
    a.set_xlabel("measured samples/s")
    a.set_ylabel("predicted samples/s")
    a.set_title(f"{ev.model}: prediction (blue homogeneous, orange mixed)")
    b.scatter(meas, [c.usd_per_hour for c in cands], s=18, color="0.6")
    markers = ["*", "P", "X", "D", "s", "^"]
    for i, r in enumerate(ev.cases):
        color = f"C{i}"
        if r.oracle is not None and r.oracle.measured_samples_per_s:  # hollow ring: the oracle's choice
            b.scatter([r.oracle.measured_samples_per_s], [r.oracle.usd_per_hour], s=260, facecolors="none",
                      edgecolors=color, linewidths=1.5, label=f"case {i + 1} oracle: {r.oracle.config}")
        if r.pick is not None and r.pick.measured_samples_per_s:  # filled marker: srifty's pick
            b.scatter([r.pick.measured_samples_per_s], [r.pick.usd_per_hour], marker=markers[i % 6], s=80,
                      color=color, label=f"case {i + 1} srifty: {r.pick.config}")
        if r.case.budget_per_hour is not None:
            b.axhline(r.case.budget_per_hour, ls=":", lw=0.8, color="tab:red")
        if r.case.min_throughput is not None:
            b.axvline(r.case.min_throughput, ls=":", lw=0.8, color="tab:green")
    b.set_xlabel("measured samples/s")
    b.set_ylabel("$ per hour")
    b.set_title("cost vs throughput (dotted: constraints)")
    b.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def save_json(ev: Evaluation, path: str) -> None:
    from srifty.profile import atomic_write_text

    atomic_write_text(path, json.dumps(ev.to_dict(), indent=1) + "\n")

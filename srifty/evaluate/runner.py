"""The evaluation run (:class:`Evaluator`): cheap profiles of one host of each type and an
allreduce sweep, the latency model's predictions for every configuration, each case's pick made
by the solver exactly as ``srifty recommend`` makes it (:func:`srifty.solver.solve` over
:class:`srifty.oracle.ModelOracle`: mixes with their batch split, the case's availability limits,
this machine's cores as a capacity limit), every configuration measured on the emulated cluster
and each pick run as its plan (each run cached in the work directory), and each case's pick,
oracle and baselines gathered into an :class:`~srifty.evaluate.results.Evaluation`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from srifty.capacity import CapacityLimit, parse_available
from srifty.catalog import Market
from srifty.errors import SriftyError
from srifty.evaluate.choice import baselines, best, regret
from srifty.evaluate.results import CaseResult, Evaluation
from srifty.evaluate.space import Candidate, Case, candidate_space
from srifty.oracle import ModelOracle
from srifty.plan import make_plan
from srifty.solver import Constraints, InfeasibleError, Objective, Recommendation, solve

ProgressFn = Callable[[str], None]


class Evaluator:
    """Runs the four steps; ``profile_fn(hosts, out, collectives, batch_by_type)`` runs one
    emulated job (``batch_by_type``: per-worker batch of each host type, None: the evaluation's)."""

    def __init__(self, script: str, spec_path: str, work_dir: str, batch_size: int, types: Sequence[str] | None = None,
                 max_hosts: int = 3, max_seconds: float = 8.0, min_iterations: int = 8, target_ci: float = 0.03,
                 corpus: Sequence[str] = (), say: ProgressFn | None = None,
                 profile_fn: Callable[[str, Path, bool, dict[str, int] | None], dict[str, Any]] | None = None) -> None:
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
        self.oracle: Any = None  # the solver's ModelOracle, once predict() has trained the model
        self.offers: Any = None  # the emulated catalog the solver picks from, likewise

    # one emulated run, cached in the work directory
    def _profile(self, hosts: str, out: Path, collectives: bool,
                 batch_by_type: dict[str, int] | None = None) -> dict[str, Any]:
        from srifty.profiling.emulated import EmulatedBackend
        from srifty.profiling.launcher import ProfileRequest

        req = ProfileRequest(
            script=None if collectives else self.script, batch_size=None if collectives else self.batch_size,
            max_seconds=self.max_seconds, min_iterations=self.min_iterations, target_rel_ci=self.target_ci,
            hosts=hosts, spec=self.spec_path, collectives=collectives, max_bytes=16 << 20, repeats=5,
            model_name=None if collectives else self.model, startup_timeout=240, hang_timeout=120,
            batch_by_type=dict(batch_by_type or {}),
        )
        return EmulatedBackend().profile(req, str(out))

    def _run(self, hosts: Sequence[str], collectives: bool = False,
             batch_by_type: dict[str, int] | None = None) -> tuple[dict[str, Any], float, bool]:
        """(profile document, its workers' wall seconds, whether it came from the cache).

        The seconds are the profile's own ``measurement.wall_seconds`` (workers started to
        workers ended), the same whether the run is fresh or cached; bringing the emulated
        hosts up and down is not counted.
        """
        from srifty import profile as profile_mod
        from srifty.profiling.emulated import config_string

        cfg = config_string(list(hosts))
        sub = "collectives" if collectives else self.model
        batches = "-".join(f"{batch_by_type[t]}" for t in dict.fromkeys(hosts)) if batch_by_type else self.batch_size
        name = f"{cfg}.json" if collectives else f"{cfg}-b{batches}.json"
        out = self.work / "profiles" / sub / name
        if out.exists():
            doc = profile_mod.load(out).doc
            if doc.get("status") == "complete":
                return doc, float(doc["measurement"].get("wall_seconds") or 0.0), True
            self.say(f"running {sub} on {cfg} again: the cached run is partial ({doc.get('partial_reason')})")
        else:
            self.say(f"running {sub} on {cfg}")
        from srifty.profiling.emulated import hosts_arg

        doc = self.profile_fn(hosts_arg(hosts), out, collectives, batch_by_type)
        return doc, float(doc["measurement"].get("wall_seconds") or 0.0), False

    @property
    def workers(self) -> dict[str, int]:
        """Workers per host of each type."""
        return {t: self.spec.instance_types[t].workers for t in self.types}

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
        self.oracle = ModelOracle(job, catalog, predictor)  # what srifty recommend's solver reads
        self.offers = Catalog.from_emulated_spec(self.spec_path)
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

    def choose(self, case: Case, cores: float) -> Recommendation | None:
        """The case's pick as ``srifty recommend`` makes it: :func:`srifty.solver.solve` over the
        predictions (mixes of two types with their batch split), the case's constraints and
        objective, on demand, at most ``max_hosts`` hosts of the evaluation's types, and what can be
        had: the case's availability limits and this machine's cores (a capacity limit on the hosts'
        CPU shares). None where nothing is predicted to meet the constraints."""
        shares = {t: float(self.spec.instance_types[t].cpu_share) for t in self.types}
        limits = (CapacityLimit(f"this machine's {cores:g} cores", Market.ON_DEMAND, cores, shares),
                  *parse_available(",".join(case.available), self.types))
        constraints = Constraints(budget_per_hour=case.budget_per_hour, min_throughput=case.min_throughput,
                                  max_nodes=self.max_hosts, max_types=2, heterogeneous=True, spot=False,
                                  instance_types=",".join(self.types), capacity=limits)
        try:
            return solve(self.oracle, self.offers, constraints, Objective(case.resolved_objective), top=1).chosen
        except InfeasibleError:
            return None

    def as_candidate(self, rec: Recommendation, cands: list[Candidate]) -> Candidate:
        """The candidate of the space a pick is (same hosts, the evaluation's batch on each), or a
        new one for a mix whose batch split differs: that one is run as the pick's plan would run it."""
        from srifty.profiling.emulated import config_string

        plan = make_plan(self.model, self.script, [], rec, 1, None, self.offers)  # as `recommend --plan` writes it
        hosts = [n.instance_type for n in plan.nodes]
        split = {n.instance_type: n.local_batch_size for n in plan.nodes}
        if all(b == self.batch_size for b in split.values()):
            same = [c for c in cands if sorted(c.hosts) == sorted(hosts) and not c.batch_by_type]
            if same:
                return same[0]
        label = f"{config_string(hosts)} at " + " / ".join(f"{t} {b}" for t, b in split.items())
        for c in cands:
            if c.config == label:
                return c
        c = Candidate(label, hosts, round(self._price(hosts), 6),
                      round(sum(self.spec.instance_types[t].cpu_share for t in hosts), 6), batch_by_type=split)
        gb = c.global_batch(self.batch_size, self.workers)
        lo_ms, hi_ms = rec.interval_ms
        c.predicted_samples_per_s = gb / (rec.iteration_ms / 1e3)
        c.predicted_interval = (gb / (hi_ms / 1e3), gb / (lo_ms / 1e3))
        c.source = rec.source
        cands.append(c)
        return c

    def measure(self, cands: list[Candidate]) -> tuple[float, float]:
        """Step 3: run every configuration (cached runs are reused); the throughput is the global
        batch as the hosts ran it over the median step."""
        seconds = usd = 0.0
        for i, c in enumerate(cands, 1):
            doc, s, cached = self._run(c.hosts, batch_by_type=c.batch_by_type)
            median = ((doc.get("summary") or {}).get("iteration_ms") or {}).get("median")
            c.measured_samples_per_s = c.global_batch(self.batch_size, self.workers) / (median / 1e3) if median else None
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

        for case in cases:  # before any run: a case naming a type outside the space would fail after them
            unknown = [t for t in case.limits if t not in self.types]
            if unknown:
                raise SriftyError(f"--case {','.join(case.available)}: {unknown[0]!r} is not a host type of this "
                                  f"evaluation ({', '.join(self.types)}). Nothing was run.",
                                  "Name one of those types in available=TYPE=N.")
        cores = cluster.core.system.machine_cores()
        cands = candidate_space(self.spec, self.types, self.max_hosts, cores)
        if not cands:
            raise SriftyError("The evaluation space is empty: no configuration fits this machine's cores.",
                              "Give --types with smaller CPU shares or a smaller --max-hosts.")
        self.say(f"{len(cands)} configurations in the space ({', '.join(self.types)}; up to {self.max_hosts} hosts, "
                 f"CPU shares within {cores:g} cores)")
        paths, sweep, prof_s, prof_usd = self.cheap_profiles()
        predictor = self.predict(cands, paths, sweep)
        picks = []
        for case in cases:
            rec = self.choose(case, cores)
            picks.append(self.as_candidate(rec, cands) if rec else None)
        oracle_s, oracle_usd = self.measure(cands)
        results = []
        for case, pick in zip(cases, picks):
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

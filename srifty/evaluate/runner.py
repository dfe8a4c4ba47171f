"""The evaluation run (:class:`Evaluator`): cheap profiles of one host of each type and an
allreduce sweep, the latency model's predictions for every configuration, every configuration
measured on the emulated cluster (each run cached in the work directory), and each case's pick,
oracle and baselines gathered into an :class:`~srifty.evaluate.results.Evaluation`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from srifty.errors import SriftyError
from srifty.evaluate.choice import baselines, best, regret
from srifty.evaluate.results import CaseResult, Evaluation
from srifty.evaluate.space import Candidate, Case, candidate_space

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

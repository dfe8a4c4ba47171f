"""srifty as a library: what each command does, as functions that take values and return result
objects. The click commands (srifty.commands) parse options into these calls and print what they
return; scripts and notebooks call them directly::

    from srifty import api

    outcome = api.recommend(["profiles/local/cnn_resnet.json"], api.Constraints(budget_per_hour=12))
    print(outcome.result.chosen.config, outcome.result.chosen.throughput_samples_per_s)
    api.write_plan(outcome, "plan/")
    [p] = api.predict(["profiles/local/cnn_resnet.json"], ["2xg5.12xlarge"])
    predictor = api.fit(["profiles/pollux"], "model.npz")

Errors are :class:`srifty.errors.SriftyError` (a message and a hint).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from srifty import importer, model
from srifty import profile as profile_file
from srifty.capacity import capacity_limits, read_spot_scores, spot_groups
from srifty.catalog import Catalog
from srifty.comm import CommModel, measured_allreduce
from srifty.configspec import ClusterConfig, parse_config
from srifty.errors import SriftyError, sentence
from srifty.features import (JobProfile, accumulation_note, default_batch, default_batch_note, load_allreduce_rows,
                             load_collectives, load_corpus, with_type_batches)
from srifty.importer import ImportResult
from srifty.launch import LaunchReport, launch
from srifty.model import Prediction, Predictor
from srifty.nccltests import import_log as import_nccl_tests
from srifty.outputs import Input, Output, check_writable, refuse_clobbering
from srifty.plan import Plan, make_plan
from srifty.plan import write_plan as write_plan_files
from srifty.profile import Profile
from srifty.profiling.ec2.cleanup import Cleanup
from srifty.profiling.ec2.cleanup import cleanup as ec2_cleanup
from srifty.profiling.launcher import ProfileRequest, get_backend
from srifty.oracle import (PREDICTION_CODE, CachedOracle, ModelOracle, default_model_path, file_identity,
                           load_inputs, load_predictor)
from srifty.solver import Constraints, Objective, RecommendOutcome, measurement_advice, solve

if TYPE_CHECKING:  # pragma: no cover
    from srifty.validate import HeldOutCheck

__all__ = ["Constraints", "Objective", "RecommendOutcome", "LaunchReport", "ValidationOutcome", "profile",
           "profile_outputs", "profile_batches", "import_trace", "import_nccl_tests", "fit", "predict", "recommend",
           "write_plan", "launch", "validate", "validate_holdout", "evaluate", "cleanup_ec2"]

Say = Callable[[str], None]


def _quiet(msg: str) -> None:
    pass


def profile(script: str | None, out: str, backend: str = "local", **options: Any) -> Profile:
    """Profile ``script`` (``srifty profile``; ``options`` are :class:`ProfileRequest`'s fields)
    and write the profile to ``out``."""
    request = ProfileRequest(script=script, **options)
    doc = get_backend(backend).profile(request, out)
    return Profile(doc, out)


def profile_outputs(requests: Sequence[ProfileRequest], out: str | None, label: str) -> list[str]:
    """Where each request's profile goes: ``out`` (default ``<model>.profile.json``) for one; for
    several batch sizes one file each, ``<label>-b<batch>.json`` in the directory ``out``
    (default ``<model>/``)."""
    if len(requests) == 1:
        return [out or f"{requests[0].model}.profile.json"]
    folder = Path(out or requests[0].model)
    if folder.suffix == ".json" or (folder.exists() and not folder.is_dir()):
        raise SriftyError(f"--out {folder}: several batch sizes write one profile each, into a directory.",
                          f"Give a directory, e.g. --out {folder.with_suffix('')}/.")
    return [str(folder / f"{label}-b{r.batch_size}.json") for r in requests]


def profile_batches(requests: Sequence[ProfileRequest], outs: Sequence[str], backend: str = "local",
                    progress: Callable[[ProfileRequest], tuple[Any, Callable[[], None]]] | None = None,
                    say: Say = _quiet) -> list[Profile]:
    """Run each request (one per batch size) and write its profile to its ``outs`` entry (one
    profile per type beside it for several EC2 types, all of them returned), refusing
    first an output that would overwrite the script, the requirements or the emulated spec. When
    one fails, the profiles already measured are kept and the error says so. ``progress(request)``
    gives a progress callback for the backend and a function that ends it."""
    first = requests[0]
    out_files = [Output(path, "--out") for request, out in zip(requests, outs) for path in request.outs(out)]
    refuse_clobbering(out_files, [Input(first.script or "", "the script"), Input(first.requirements or "", "--requirements"),
                                  Input(first.spec if backend == "emulated" else "", "--spec")])
    for o in out_files:
        check_writable(o)
    chosen = get_backend(backend)
    profiles: list[Profile] = []
    for i, (request, path) in enumerate(zip(requests, outs)):
        if len(requests) > 1:
            say(f"batch size {request.batch_size} ({i + 1} of {len(requests)}) -> {path}")
        report_progress, stop = progress(request) if progress else (None, lambda: None)
        try:
            doc = chosen.profile(request, path, report_progress)
        except SriftyError as exc:
            if profiles:  # the batches already measured stay, and say so
                exc.hint = (exc.hint or "") + \
                    f" The profiles already measured are kept: {', '.join(str(p.path) for p in profiles)}."
            raise
        finally:
            stop()
        written = request.outs(path)  # several EC2 types: one file each (the first type's returned)
        profiles += [Profile(doc, path)] if written == [path] else [profile_file.load(p) for p in written]
    return profiles


def import_trace(trace: str, out_dir: str, skip_bad: bool = False, replace: bool = False) -> ImportResult:
    """A CSV trace of measured runs as profiles in ``out_dir`` (``srifty import``): one per model
    and instance type, one worker per GPU on the GPU types the catalog knows."""
    cat = Catalog.default()

    def gpu_slots(instance_type: str) -> int | None:
        it = cat.get(instance_type) if cat.has(instance_type) else None
        return it.workers_per_node if it is not None and (it.gpu_count or it.accelerator_count) else None

    return importer.import_trace(trace, out_dir, skip_bad=skip_bad, replace=replace, slots=gpu_slots)


def fit(corpora: Sequence[str], out: str | Path, quick: bool = False) -> Predictor:
    """The latency model trained on ``corpora`` (default: the shipped ones) and saved to ``out``
    (``srifty fit``); an ``out`` that is one of the corpora's files is refused."""
    paths = model.corpus_paths(corpora)
    if not paths:
        raise SriftyError("No training corpus given and none shipped found.", "Give profile directories to fit on.")
    out_file = Output(str(out), "--out")
    refuse_clobbering([out_file], [Input(p, "the corpus") for p in paths])
    check_writable(out_file)
    jobs = load_corpus(paths)
    predictor = Predictor.train(jobs, model.catalog_for_jobs(jobs), quick=quick, collectives=load_collectives(paths),
                                allreduce=measured_allreduce()[0] + load_allreduce_rows(paths))
    model.save(predictor, out)
    return predictor


def predict(profiles: Sequence[str], configs: Sequence[str | ClusterConfig | tuple[str | ClusterConfig, int]],
            local_batch_size: int | None = None, model_path: str | None = None, catalog_path: str | None = None,
            placement_group: bool = False, say: Say = _quiet, where: Sequence[str] = (),
            type_batches: Mapping[str, float] | None = None,
            row_type_batches: Sequence[Mapping[str, float] | None] = ()) -> list[Prediction]:
    """Iteration time, interval and throughput of a profiled job on each configuration (a
    configuration alone, or with its own per-worker batch), as ``srifty predict`` gives them.
    ``where``: per configuration, what an error about it should add (e.g. " (configs.csv line 3)").
    ``type_batches``: the per-worker batch of every worker of these instance types, in place of the
    row's (a mix whose types train at their own batches, as a plan of ``recommend`` starts them);
    ``row_type_batches``: per configuration, such batches of its own (over ``type_batches``)."""
    job, cat = load_inputs(list(profiles), Catalog.default(catalog_path) if catalog_path else None, with_emulated=True)
    for w in getattr(cat, "warnings", []) or []:
        say(f"warning: {w}")
    default_b = default_batch(r.local_batch_size for r in job.runs)
    rows = []
    for i, item in enumerate(configs):
        config, b = item if isinstance(item, tuple) else (item, None)
        batch = next((x for x in (b, local_batch_size, default_b) if x is not None), 0.0)
        try:
            config = (parse_config(config) if isinstance(config, str) else config).resolved(cat)
            if not 0 < float(batch) < float("inf"):
                raise SriftyError(f"A per-worker batch is a number above 0, not {batch!r}.")
        except SriftyError as exc:
            raise SriftyError(f"{exc.message}{where[i] if i < len(where) else ''}", exc.hint) from None
        rows.append((config, batch))
    rows = with_type_batches(rows, type_batches, cat, row_type_batches, where)
    defaulted = local_batch_size is None and any(not isinstance(c, tuple) or c[1] is None for c in configs)
    measured = [r.local_batch_size for r in job.runs]
    note = default_batch_note(default_b, measured, "--local-batch-size (-b)") if defaulted and default_b else None
    for n in (note, accumulation_note(job.model, job.accumulation)):
        if n:
            say(f"note: {n}")
    predictor = load_predictor(model_path, lambda msg: say(f"note: {msg}"))
    if predictor is None:
        raise SriftyError("--model simulator is for `srifty recommend`; predict needs a trained model.",
                          "Drop --model to use the cached one, or give a file from `srifty fit`.")
    return predictor.in_placement_group(placement_group).predict(job, cat, rows)


def recommend(profiles: Sequence[str], constraints: Constraints, objective: Objective | str | None = None,
              top: int = 10, catalog_path: str | None = None, model_path: str | None = None,
              available: str | None = None, quotas: str | None = None, quotas_client: Any = None,
              spot_scores: bool = False, ec2_client: Any = None, say: Say = _quiet) -> RecommendOutcome:
    """The configurations that meet ``constraints``, ranked (``srifty recommend``). ``available``:
    ``--available`` text; ``quotas="aws"``: the account's EC2 vCPU quotas, read with boto3 in the
    constraints' region (``quotas_client``: a ``service-quotas`` client to read them with instead).
    ``spot_scores``: also AWS's spot placement score of the spot groups of the first ranked rows
    (``ec2_client``: an ``ec2`` client to read them with); a hint that never changes the ranking,
    so a failure to read them is a warning. The latency model's figures are cached on disk per
    (model, profiles, catalog, code, placement group)."""
    cat = Catalog.default(catalog_path)
    region = constraints.region or cat.default_region
    if spot_scores and cat.source.kind == "emulated":
        raise SriftyError("--spot-scores asks AWS about EC2 spot capacity; the catalog is emulated.",
                          "Leave out --spot-scores, or use the EC2 catalog.")
    if quotas == "aws" and quotas_client is None:
        import boto3

        quotas_client = boto3.session.Session(region_name=region).client("service-quotas")
    capacity = tuple(capacity_limits(cat, available, quotas_client))
    if capacity:
        constraints = replace(constraints, capacity=constraints.capacity + capacity)
    constraints.validate()
    for w in cat.warnings:
        say(f"warning: {w}")
    job, model_cat = load_inputs(list(profiles), cat)
    model_file = None if model_path == "simulator" else str(model_path or default_model_path())
    identity: dict[str, Any] | None = {
        "model": file_identity([model_file]) if model_file else "simulator", "profiles": file_identity(profiles),
        "catalog": file_identity([cat.path]), "code": [sha for _, _, sha in file_identity(PREDICTION_CODE)],
        "placement_group": constraints.placement_group}
    if model_file and not file_identity([model_file]):
        identity = None  # no model yet: train it and do not cache under a missing file

    @cache
    def placed_predictor() -> Predictor | None:  # loaded once: on a cache miss, and for the rows' warnings
        predictor = load_predictor(model_path, say)
        return predictor.in_placement_group(constraints.placement_group) if predictor else None

    def make() -> Any:
        return ModelOracle(job, model_cat, placed_predictor())

    probe = ModelOracle(job, model_cat, None)
    oracle: Any = make() if identity is None else CachedOracle(make, identity, probe.default_local_batch())
    chosen_objective = Objective(objective) if isinstance(objective, str) else objective
    result = solve(oracle, cat, constraints, chosen_objective, top=top)
    if not (constraints.local_batch_size or constraints.global_batch_size):  # every row at the default batch
        note = default_batch_note(probe.default_local_batch(), [r.local_batch_size for r in job.runs], "--batch-size")
        result.notes[sum(x is not None for x in (result.near_tie, result.slow_end)):0] = [note] if note else []
    if note := accumulation_note(job.model, job.accumulation):
        result.notes.append(note)
    scores = None
    groups = spot_groups(r.config for r in result.recommendations) if spot_scores else []
    if spot_scores and not groups:
        say("note: --spot-scores: no ranked row runs on spot, so nothing was asked of AWS.")
    if groups:
        if ec2_client is None:
            import boto3

            ec2_client = boto3.session.Session(region_name=region).client("ec2")
        try:
            scores = read_spot_scores(ec2_client, region, groups)
        except SriftyError as exc:
            say(f"warning: {sentence(str(exc))} The ranking stands; it never depends on these scores.")
    predictor = placed_predictor()  # None: the simulator alone, whose figures have no caveats
    if predictor is not None:  # each row's warnings, as predict gives them (each type at its batch)
        shown = result.recommendations + result.pareto
        rows = [with_type_batches([(parse_config(r.config).resolved(model_cat), 1.0)], r.batch_split, model_cat)[0]
                for r in shown]
        said = predictor.predict(job, model_cat, rows)
        for r, p in zip(shown, said):
            r.warnings = [w for w in p.warnings if w not in result.notes]
    return RecommendOutcome(result, job, cat, model_file, measurement_advice(result, job, cat), scores)


def write_plan(outcome: RecommendOutcome, directory: str | Path, rank: int = 1) -> tuple[Plan, list[Path]]:
    """The plan of the ``rank``-th ranked row (1: the chosen one) written into ``directory``."""
    rows = outcome.result.recommendations
    if not 1 <= rank <= len(rows):
        raise SriftyError(f"--rank {rank}: only {len(rows)} configurations meet the constraints.",
                          f"Give --rank {len(rows)} or less.")
    region = outcome.result.constraints.region or outcome.catalog.default_region
    plan = make_plan(outcome.job.model, outcome.job.script, outcome.job.script_args, rows[rank - 1], rank, region,
                     outcome.catalog, outcome.result.constraints.placement_group, outcome.job.accumulation,
                     outcome.job.module, outcome.job.batch_arg)
    return plan, write_plan_files(plan, directory)


@dataclass
class ValidationOutcome:
    """Everything ``srifty validate`` measured: the grouped cross-validation of every corpus, the
    communication model against measured allreduces, compute across GPUs, compute at another
    batch, and the CPU-to-GPU operator model."""

    report: Any  # srifty.validate.ValidationReport
    allreduce: list[Any]
    allreduce_notes: list[str]
    gpu_transfer: list[Any]
    gpu_transfer_notes: list[str]
    batch_scaling: list[Any]
    cpu_to_gpu: Any  # srifty.cpu_to_gpu.CpuToGpuCheck, None without CPU and GPU profiles
    corpora: list[str]
    # srifty.validate.TimelineCheck per model with a CPU profile's ready times (not with --quick)
    cpu_timeline: list[Any] = field(default_factory=list)

    def markdown(self, command: str, plot_ref: str | None = None) -> str:
        """docs/ACCURACY.md: every table, headed by the ``command`` that produced it and linking
        the plot at ``plot_ref`` (relative to the page)."""
        from srifty import cpu_to_gpu
        from srifty import validate as v
        from srifty.opmodel import shipped_step_model

        rel = [str(Path(p).resolve().relative_to(model.ROOT)) if Path(p).resolve().is_relative_to(model.ROOT) else p
               for p in self.corpora]
        return (v.render_markdown(self.report, command, rel, plot_ref)
                + v.render_allreduce(self.allreduce, self.allreduce_notes)
                + v.render_gpu_transfer(self.gpu_transfer, self.gpu_transfer_notes)
                + (cpu_to_gpu.render(self.cpu_to_gpu, shipped_step_model(), command) if self.cpu_to_gpu else "")
                + v.render_cpu_timeline(self.cpu_timeline)
                + v.render_batch_scaling(self.batch_scaling))

    def to_dict(self) -> dict[str, Any]:
        """The pooled figures of every check (``srifty validate --json``)."""
        from srifty import cpu_to_gpu
        from srifty import validate as v

        report = self.report
        allreduce = [{"instance_type": c.instance_type, "nodes": c.nodes, "gpus_per_node": c.gpus_per_node,
                      "sizes": len(c.sizes), **{f"{k}_mape": c.mape(k) for k in v.COMM_METHODS}}
                     for c in self.allreduce]
        known = {k: {"mape": mape, "n": n} for k, (mape, n) in report.pooled_grad_known().items()}
        gpu_transfer = {ds: {"transfers": len(mine), **{f"{k}_mape": float(e.mean())
                                                         for k, e in v.transfer_errors(mine).items()}}
                        for ds, mine in v.by_dataset(self.gpu_transfer).items()}
        floors = {f.corpus: {"rows": f.rows, "configurations": f.configurations, "mape": f.mape,
                             "by_model": {name: {"mape": mape, "rows": n} for name, mape, n in f.by_model}}
                  for f in report.floors}
        return {"splits": report.pooled(), "grad_known": known, "by_regime": report.by_regime(),
                "by_nodes": report.by_nodes(), "by_fold_and_regime": report.by_fold_and_regime(),
                "by_fold_and_nodes": report.by_fold_and_nodes(),
                "noise_floor": floors, "allreduce": allreduce,
                "gpu_transfer": gpu_transfer, "batch_scaling": v.batch_scaling_summary(self.batch_scaling),
                "cpu_to_gpu": cpu_to_gpu.summary(self.cpu_to_gpu) if self.cpu_to_gpu else None,
                "cpu_timeline": v.timeline_summary(self.cpu_timeline), "notes": self.notes}

    @property
    def notes(self) -> list[str]:
        return self.report.notes + self.allreduce_notes + self.gpu_transfer_notes


def validate(corpora: Sequence[str] = (), quick: bool = False, say: Say = _quiet) -> ValidationOutcome:
    """Validate on ``corpora`` (default: the shipped ones), each corpus on its own (models of
    different corpora never share a fold); ``say`` gets a line per fold as it starts."""
    from srifty import cpu_to_gpu
    from srifty import model as m
    from srifty import validate as v
    from srifty.features import hardware_of, load_collectives, load_corpus

    paths = m.corpus_paths(corpora)
    if not paths:
        raise SriftyError("No corpus to validate on.", "Import the Pollux trace: see data/traces/PROVENANCE.md.")
    report = v.ValidationReport()
    real_jobs: list[JobProfile] = []
    batch_jobs: dict[str, list[JobProfile]] = {}  # compute at another batch: every corpus, by name
    allreduce, allreduce_notes = measured_allreduce()
    cpu = m.ROOT / "profiles" / "cpu"
    timeline: list[Any] = []
    for path in paths:
        jobs = load_corpus([path])
        batch_jobs[Path(path).name] = jobs
        cat = m.catalog_for_jobs(jobs)
        emulated = all(hardware_of(cat, t).emulated for j in jobs for t in j.instance_types)
        if emulated:
            splits: tuple[str, ...] = ("loco", "lomo-1node") if quick else ("loco", "lomo-1node", "loio")
        else:
            real_jobs += jobs
            splits = ("lomo-1gpu", "nodes>4") if quick else ("lomo-1gpu", "lomo-1node", "loro", "nodes>4", "loio")
        prefix = f"{Path(path).name}/" if len(paths) > 1 else ""
        v.validate(jobs, cat, quick=quick, splits=splits, progress=lambda line, p=prefix: say(p + line),
                   collectives=load_collectives([path]), prefix=prefix, report=report,
                   allreduce=() if emulated else allreduce)
        if not emulated and not quick and cpu.exists():  # CPU profiles' gradient timelines on the GPUs
            timeline += v.validate_cpu_timeline(jobs, cat, cpu, quick, load_collectives([path]), allreduce,
                                                progress=lambda line, p=prefix: say(p + line))
    checks, comm_notes = [], []
    if real_jobs:  # the communication model of real clusters, checked on measured nccl-tests allreduces
        say("allreduce: nccl-tests rows against the communication model")
        cat = Catalog.default()
        comm = CommModel(max_rows=200 if quick else 300)
        comm.fit_with_overlap(real_jobs, cat)
        scale = comm.link_scale_
        checks, comm_notes = v.validate_allreduce(cat, scale, allreduce, allreduce_notes)
    transfer, transfer_notes = v.validate_gpu_transfer(Catalog.default())  # compute across GPUs
    h200 = m.ROOT / "profiles" / "h200"
    if h200.exists():  # the examples on an H200 (make gpu-check), three batches each
        batch_jobs["h200"] = load_corpus([str(h200)])
    batch_checks = v.validate_batch_scaling(batch_jobs)
    cpu_gpu = None
    if cpu.exists() and h200.exists():
        say("cpu-to-gpu: GPU steps from CPU profiles of the same models, leave one model out")
        shipped = m.shipped_model()
        cpu_gpu = cpu_to_gpu.validate_cpu_to_gpu(cpu, h200, Catalog.default(),
                                                 m.load(shipped) if shipped else m.default_predictor(), real_jobs)
    return ValidationOutcome(report, checks, comm_notes, transfer, transfer_notes, batch_checks, cpu_gpu, paths,
                             timeline)


def validate_holdout(paths: Sequence[str], model_path: str | None = None, say: Say = _quiet) -> HeldOutCheck:
    """``srifty validate --holdout``: each job's runs across nodes predicted from its single-node
    runs alone, by the model ``srifty predict`` uses (or ``model_path``), as a
    :class:`srifty.validate.HeldOutCheck`. ``paths``: a CSV trace (``srifty import``'s columns,
    imported into a temporary directory) or profile files and directories."""
    import tempfile

    from srifty import validate as v

    predictor = load_predictor(model_path, lambda msg: say(f"note: {msg}"))
    if predictor is None:
        raise SriftyError("--model simulator has nothing to check; give a model file from `srifty fit`, or none.")
    with tempfile.TemporaryDirectory(prefix="srifty-holdout-") as tmp:
        profile_paths: list[str] = []
        for p in paths:
            if Path(p).suffix.lower() == ".csv":
                out = Path(tmp) / f"trace-{len(profile_paths)}"
                import_trace(p, str(out))
                profile_paths.append(str(out))
            else:
                profile_paths.append(p)
        jobs = load_corpus(profile_paths)
        if not jobs:
            raise SriftyError(f"No training profiles in {', '.join(paths)}.",
                              "Give a CSV trace with srifty import's columns, or profile directories.")
        check = v.check_held_out(jobs, predictor, model.catalog_for_jobs(jobs))
    if check.skipped:
        say(f"warning: left out, without runs both on one node and across nodes: {', '.join(check.skipped)}")
    if check.seen:
        say(f"warning: the model was trained on runs of {', '.join(check.seen)}: this is not a held-out check for "
            "them; fit one without them (`srifty fit` on the other profiles) and pass it with --model")
    return check


def evaluate(script: str, spec: str, cases: Sequence[str], batch_size: int, types: Sequence[str] | None = None,
             max_hosts: int = 3, max_seconds: float = 8.0, work_dir: str = "runs/evaluate",
             corpora: Sequence[str] = (), compare_path: str | None = None, say: Say = _quiet) -> Any:
    """``srifty evaluate``: every configuration of the emulated catalog ``spec`` (up to
    ``max_hosts`` hosts of ``types``) run for real with ``script`` at ``batch_size`` per worker,
    and the recommendation of each case (``budget=N,min_throughput=N,objective=...`` texts)
    checked against them; with ``compare_path`` (an earlier evaluation's JSON), how far the
    measured figures moved since. Returns a :class:`srifty.evaluate.Evaluation`."""
    import json
    import os

    from srifty import evaluate as ev

    if os.geteuid() != 0:
        raise SriftyError("srifty evaluate runs jobs on the emulated cluster, which needs root "
                          "(network namespaces, tc, cgroups).", "Run it as root (e.g. with sudo).")
    if max_hosts < 1:
        raise SriftyError(f"max_hosts must be at least 1 (got {max_hosts}).")
    parsed = [ev.Case.parse(c) for c in cases] or [ev.Case()]
    previous = None
    if compare_path:
        try:
            previous = json.loads(Path(compare_path).read_text(encoding="utf-8"))
            if not isinstance(previous, dict) or not isinstance(previous.get("candidates"), list):
                raise ValueError("no candidates list")
        except (OSError, ValueError) as e:
            raise SriftyError(f"--compare {compare_path}: not an evaluation's JSON ({e}).",
                              "Give the file that `srifty evaluate --json` printed for an earlier run.") from None
    evaluator = ev.Evaluator(script, spec, work_dir, batch_size, list(types) if types else None, max_hosts=max_hosts,
                             max_seconds=max_seconds, corpus=tuple(corpora), say=say)
    result = evaluator.run(parsed)
    if previous is not None:
        result.drift = ev.compare_recordings(previous, result, ev.recording_label(previous, compare_path))
        if result.drift is None:
            say(f"--compare {compare_path}: nothing to compare (another model or batch size, or no multi-host "
                "configuration measured in both with its hosts alone).")
    return result


def cleanup_ec2(run_id: str | None = None, region: str | None = None, dry_run: bool = False,
                client: Any = None) -> Cleanup:
    """Terminate the instances srifty's EC2 runs left alive (``run_id``: one run's) and delete
    their placement groups (``srifty ec2 cleanup``); ``client``: an ``ec2`` client to use instead
    of one from the standard AWS credential chain."""
    import os

    from botocore.exceptions import BotoCoreError, ClientError

    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    try:
        if client is None:
            import boto3

            client = boto3.session.Session(region_name=region).client("ec2")
        return ec2_cleanup(client, region, run_id, dry_run)
    except (ClientError, BotoCoreError) as exc:
        raise SriftyError(f"Could not list or terminate srifty's instances in {region}: {exc}",
                          "Check your AWS credentials and that they allow ec2:DescribeInstances and "
                          "ec2:TerminateInstances (docs/aws-permissions.md).") from None

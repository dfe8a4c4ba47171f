"""``srifty recommend``: which configurations to rent (a thin shell over srifty.solver)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from srifty.commands import params
from srifty.errors import SriftyError
from srifty.outputs import Input, Output, check_plot_format, check_writable, refuse_clobbering, save_figure

EPILOG = """\b
Examples:
  srifty recommend --profile profiles/local/cnn_resnet.json --budget 12
  srifty recommend --profile profiles/local/cnn_resnet.json --min-throughput 800 --budget 12
  srifty recommend --profile P --samples 50M --deadline 10h --objective cost
  srifty recommend --profile P --epochs 90 --dataset-size 1281167 --total-budget 500 --no-spot
  srifty recommend --profile P --instance-types 'g5.*,g6.*' --max-nodes 8 --pareto --plot front.png
  srifty recommend --profile profiles/emulated/cnn_resnet --catalog configs/emulated.yaml --json
  srifty recommend --profile P --budget 20 --plan plan/            # torchrun per node, sky.yaml, README
  srifty recommend --profile P --budget 12 --available p4d.24xlarge@spot=1 --quotas aws
  srifty recommend --profile P --budget 12 --spot-scores          # AWS's 1-10 spot placement scores
  srifty recommend --profile P --budget 20 --top 5 --rank 3 --plan plan3/

\b
Figures: `source` says measured (the profile has this exact run), predicted (latency
model) or transferred (compute carried over from another instance type by GPU/CPU
specs; wider interval). Spot throughput is expected goodput: interruptions per hour
× (restart overhead + half a checkpoint interval) is taken off. With --json each row
has `parts` as `srifty predict --json` gives them: compute_ms (the slowest worker's compute
alone; a mix: its equalised compute) and communication_ms (the rest), with compute_source,
compute_transfer, network_source, overlap_source and gradient_source (a mix: the less
certain of its two types'); `srifty predict --help` lists their values.
"""


def _money(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"${x:,.{digits}f}"


def _split(r: Any) -> str:
    return " / ".join(f"{t} {b:.1f}" for t, b in r.batch_split.items())


def _hours(h: float | None) -> str:
    from srifty.solver.constraints import hours_text  # as recommend() imports the solver: not for --help

    return "-" if h is None else hours_text(h)


def _table(rows: list[Any], with_job: bool, title: str, spot_score: Any = None) -> Any:
    """``spot_score``: config -> AWS's spot placement score (RecommendOutcome.row_spot_score), a column when given."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col, just in [("#", "right"), ("config", "left"), ("market", "left"), ("GPUs", "right"),
                      ("batch/worker", "left"), ("iter ms [interval]", "right"), ("samples/s", "right"),
                      ("$/h", "right"), ("$/1M samples", "right")]:
        t.add_column(col, justify=just)
    if with_job:
        t.add_column("time", justify="right")
        t.add_column("$ to finish", justify="right")
    if spot_score:
        t.add_column("spot score", justify="right")
    t.add_column("source")
    for r in rows:
        mark = "★" if r.chosen else ""
        cells = [f"{mark}{r.rank or ''}", r.config, r.market, str(r.gpus), _split(r),
                 f"{r.iteration_ms:.1f} [{r.interval_ms[0]:.0f}–{r.interval_ms[1]:.0f}]",
                 f"{r.throughput_samples_per_s:,.1f}", _money(r.usd_per_hour), _money(r.usd_per_million_samples, 3)]
        if with_job:
            cells += [_hours(r.hours_to_finish), _money(r.usd_to_finish)]
        if spot_score:
            score = spot_score(r.config)
            cells.append("-" if score is None else f"{score}/10")
        cells.append(r.source)
        t.add_row(*cells, style="bold" if r.chosen else None)
    return t


def _csv(rows: list[Any]) -> str:
    import csv
    import io

    buf = io.StringIO()
    fields = ["rank", "chosen", "config", "market", "gpus", "nodes", "batch_split", "iteration_ms", "interval_low_ms",
              "interval_high_ms", "throughput_samples_per_s", "usd_per_hour", "usd_per_million_samples",
              "hours_to_finish", "usd_to_finish", "interruptions_per_hour", "source"]
    w = csv.DictWriter(buf, fieldnames=fields)
    w.writeheader()
    for r in rows:
        d = r.to_dict()
        d["batch_split"] = ";".join(f"{k}={v}" for k, v in d["batch_split"].items())
        d["interval_low_ms"], d["interval_high_ms"] = d.pop("interval_ms")
        w.writerow({k: d.get(k, "") for k in fields})
    return buf.getvalue()


def plot_front(result: Any, path: str) -> None:
    """Pareto front of throughput vs $/h, the constraints and the chosen point (matplotlib Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = result.constraints
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [p.usd_per_hour for p in result.pareto]
    ys = [p.throughput_samples_per_s for p in result.pareto]
    ax.step(xs, ys, where="post", color="tab:blue", alpha=0.6)
    ax.scatter(xs, ys, s=14, color="tab:blue", label="Pareto front (feasible)")
    if c.budget_per_hour:
        ax.axvline(c.budget_per_hour, color="tab:red", ls="--", label=f"--budget ${c.budget_per_hour:g}/h")
    need = c.required_throughput
    if need:
        ax.axhline(need, color="tab:orange", ls="--", label=f"required {need:,.0f} samples/s")
    ch = result.chosen
    ax.scatter([ch.usd_per_hour], [ch.throughput_samples_per_s], s=120, marker="*", color="black", zorder=5,
               label=f"chosen: {ch.config}")
    ax.set_xlabel("$ per hour")
    ax.set_ylabel("samples/s (expected)")
    ax.set_title(f"srifty recommend — objective: {result.objective.value}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


@click.command("recommend", epilog=EPILOG)
@click.option("--profile", "profiles", multiple=True, required=True, metavar="PATH",
              help="Profile file(s) or a directory of one model's profiles.")
@click.option("--catalog", "catalog_path", metavar="FILE", help="Catalog CSV or emulated YAML (default: the EC2 catalog).")
@click.option("--model", "model_path", metavar="FILE|simulator",
              help="Latency model (a file from `srifty fit`), or 'simulator' for the analytical simulator "
                   "alone. Default: the cached model, trained once on the shipped corpus.")
@click.option("--budget", type=params.positive(), help="Most $ per hour.")
@click.option("--total-budget", type=params.positive(), help="Most $ for the whole job (needs --samples or --epochs).")
@click.option("--min-throughput", type=params.count(),
              help="Least samples/s (expected, interruptions discounted); 20k is 20,000.")
@click.option("--deadline", type=params.hours(),
              help="Time to finish the job, in hours or with a unit: 36, 90m, 36h, 2d (needs --samples or --epochs).")
@click.option("--samples", type=params.count(), help="Job size in samples: 5e7, 50M.")
@click.option("--epochs", type=params.positive(), help="Job size in epochs (with --dataset-size).")
@click.option("--dataset-size", type=params.count(), help="Samples per epoch: 1281167, 1.28M.")
@click.option("--objective", type=click.Choice(["throughput", "cost", "cost-per-sample"]),
              help="What to optimise (default: throughput within budget, or cost when a throughput/deadline is required).")
@click.option("--max-nodes", type=params.SEARCH_NODES, default=16, show_default=True,
              help="Most nodes in a configuration (up to 128).")
@click.option("--max-types", type=params.whole(1, 2), default=2, show_default=True, help="Instance types per configuration (1 or 2).")
@click.option("--heterogeneous/--homogeneous", default=True, show_default=True, help="Consider mixes of types.")
@click.option("--spot/--no-spot", default=True, show_default=True, help="Allow spot instances.")
@click.option("--max-interruption", type=params.non_negative(), help="Most expected interruptions per hour of the whole cluster.")
@click.option("--checkpoint-interval", type=params.hours(zero=True), default=0.5, show_default=True,
              help="Time between checkpoints, in hours or with a unit (30m).")
@click.option("--restart-overhead", type=params.hours(zero=True), default=0.1, show_default=True,
              help="Time to restart after an interruption, in hours or with a unit (6m).")
@click.option("--region", help="Catalog region (default: the catalog's default).")
@click.option("--available", metavar="TYPE[@spot]=N,...", help="At most N nodes of TYPE (on demand; TYPE@spot: spot) "
              "can be had, e.g. p4d.24xlarge=1,g5.12xlarge@spot=4. Mixes of types then fill what one type cannot.")
@click.option("--quotas", type=click.Choice(["aws"]), help="Respect the account's EC2 vCPU quotas (G and VT, P; "
              "on demand and spot), read through the Service Quotas API with your AWS credentials.")
@click.option("--spot-scores", is_flag=True, help="Also ask AWS (EC2 GetSpotPlacementScores, your credentials) how "
              "likely each spot group of the first rows is to be filled now, 1-10: a hint that never changes the ranking.")
@click.option("--placement-group", is_flag=True, help="Nodes in a cluster placement group: each TCP flow between "
              "them carries 10 Gbit/s, not 5 (AWS's limits), which speeds networks without EFA.")
@click.option("--instance-types", metavar="GLOB[,GLOB]", help="Only these instance types, e.g. 'g5.*,p3.*'.")
@click.option("--global-batch-size", type=params.whole(1, params.MAX_BATCH * params.MAX_NODES), help="Keep this global batch (split across workers by speed; no configuration of more GPUs than samples).")
@click.option("--batch-size", "local_batch", type=params.BATCH, help="Per-worker batch (default: the profiled batch; of several, the one most runs measured).")
@click.option("--top", type=params.whole(), default=10, show_default=True, help="Rows in the ranked table.")
@click.option("--pareto", "show_pareto", is_flag=True, help="Also print the Pareto front of throughput vs $/h.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV of the ranked rows (and the front with --pareto) on stdout.")
@click.option("--plot", metavar="FILE.png", help="Draw the Pareto front, the constraints and the chosen point.")
@click.option("--plan", "plan_dir", metavar="DIR", help="Write what starts the chosen configuration into DIR: a torchrun "
              "script per node, a SkyPilot task (one type), and a README with the prediction to compare against.")
@click.option("--rank", type=params.whole(),
              default=1, show_default=True, help="With --plan: the ranked row to plan (1 = the chosen one).")
def recommend(profiles: tuple[str, ...], catalog_path: str | None, model_path: str | None, budget: float | None,
              total_budget: float | None, min_throughput: float | None, deadline: float | None,
              samples: float | None, epochs: float | None, dataset_size: float | None, objective: str | None,
              max_nodes: int, max_types: int, heterogeneous: bool, spot: bool, max_interruption: float | None,
              checkpoint_interval: float, restart_overhead: float, region: str | None, instance_types: str | None,
              global_batch_size: int | None, local_batch: int | None, top: int, show_pareto: bool, as_json: bool,
              as_csv: bool, plot: str | None, placement_group: bool, plan_dir: str | None, rank: int,
              available: str | None, quotas: str | None, spot_scores: bool) -> None:
    """Recommend cluster configurations that meet a budget, throughput or deadline, ranked."""
    t0 = time.perf_counter()
    from srifty import api, solver

    def say(msg: str) -> None:
        click.echo(msg, err=True)

    if as_json and as_csv:
        raise SriftyError("Choose one of --json and --csv.")
    if plot:
        check_plot_format(plot)
    if plot or plan_dir:
        refuse_clobbering([Output(plot or "", "--plot"), Output(plan_dir or "", "--plan")],
                          [*(Input(p, "--profile") for p in profiles), Input(catalog_path or "", "--catalog"),
                           Input("" if model_path == "simulator" else model_path or "", "--model")])
    if plot:
        check_writable(Output(plot, "--plot"))
    if plan_dir and Path(plan_dir).exists() and not Path(plan_dir).is_dir():
        raise SriftyError(f"--plan {plan_dir} is a file; a plan is a directory of files.",
                          "Give --plan a new or existing directory.")
    holding = [p for p in profiles if plan_dir and Path(p).resolve().is_relative_to(Path(plan_dir).resolve())]
    if holding:
        raise SriftyError(f"--plan {plan_dir} holds the profile {holding[0]}: the plan's files would mix with the "
                          "profiles read from there. Nothing was written.", "Give --plan a directory of its own.")
    if rank > top:
        raise SriftyError(f"--rank {rank} asks for a row the ranking does not show (--top {top}).",
                          f"Raise --top to {rank} or more.")
    if epochs is not None or dataset_size is not None:
        if epochs is None or dataset_size is None:
            raise SriftyError("--epochs and --dataset-size go together.", "Give both, or give --samples instead.")
        if samples is not None:
            raise SriftyError("Give the job size once: --samples, or --epochs with --dataset-size.")
        samples = epochs * dataset_size
    cons = solver.Constraints(
        budget_per_hour=budget, total_budget=total_budget, min_throughput=min_throughput, deadline_hours=deadline,
        samples=samples, max_nodes=max_nodes, max_types=max_types, heterogeneous=heterogeneous and max_types >= 2,
        spot=spot, max_interruption=max_interruption, region=region, instance_types=instance_types,
        checkpoint_interval_h=checkpoint_interval, restart_overhead_h=restart_overhead,
        global_batch_size=global_batch_size, local_batch_size=local_batch, placement_group=placement_group)
    cons.validate()
    outcome = api.recommend(profiles, cons, objective, top, catalog_path, model_path, available, quotas,
                            spot_scores=spot_scores, say=say)
    result, job, advice, model_file = outcome.result, outcome.job, outcome.advice, outcome.model_file
    if plot:
        plot_front(result, plot)
    written = api.write_plan(outcome, plan_dir, rank)[1] if plan_dir else None
    total = time.perf_counter() - t0
    if as_json:
        doc = result.to_dict()
        if outcome.spot_scores is not None:
            doc["spot_placement_scores"] = [s.to_dict() for s in outcome.spot_scores]
            for row in doc["recommendations"]:
                row["spot_placement_score"] = outcome.row_spot_score(row["config"])
        doc["measure_next"] = advice.to_dict() if advice else None
        doc["plan"] = {"dir": plan_dir, "rank": rank, "files": [str(p) for p in written]} if written else None
        doc["model"] = model_file or "simulator"
        doc["profile"] = {"model": job.model, "instance_types": job.instance_types}
        click.echo(json.dumps(doc, indent=2))
        return
    if as_csv:
        rows = result.recommendations + (result.pareto if show_pareto else [])
        sys.stdout.write(_csv(rows))
        return
    from rich.console import Console

    con = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 200)
    with_job = samples is not None
    con.print(f"[bold]{job.model}[/] (profiled on {', '.join(job.instance_types)}) — objective: "
              f"{result.objective.value}: {result.objective_reason}")
    scored = outcome.row_spot_score if outcome.spot_scores else None
    con.print(_table(result.recommendations, with_job,
                     f"{result.feasible:,} of {result.candidates_evaluated:,} configurations meet the constraints; "
                     f"top {len(result.recommendations)} (★ = chosen)", scored))
    if show_pareto:
        con.print(_table(result.pareto, with_job, "Pareto front: throughput vs $/h (feasible configurations)"))
    ch = result.chosen
    con.print(f"Chosen: [bold]{ch.config}[/] — {ch.throughput_samples_per_s:,.1f} samples/s at "
              f"{_money(ch.usd_per_hour)}/h ({ch.source}).")
    for w in ch.warnings:
        say(f"warning: {ch.config}: {w}")
    for n in result.notes:
        say(f"note: {n}")
    if advice:
        say(f"measure: {advice.sentence()}")
    spot = outcome.spot_score_sentence()
    if spot:
        say(f"spot: {spot}")
    if written:
        say(f"plan for #{rank} ({result.recommendations[rank - 1].config}) written to {plan_dir}: "
            + ", ".join(p.name for p in written))
    say(f"solved in {result.solve_seconds:.2f} s (latency model {result.model_seconds:.2f} s over "
        f"{result.model_rows:,} distinct rows); {total:.2f} s in this command"
        + (f"; plot written to {plot}" if plot else ""))

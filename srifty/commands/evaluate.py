"""`srifty evaluate`: recommendations checked against measured reality on the emulated cluster."""

from __future__ import annotations

import json
import shlex
import sys

import click

from srifty.commands import params
from srifty.outputs import Input, Output, check_plot_format, check_writable, refuse_clobbering


@click.command("evaluate", epilog="""\b
Examples (root; every configuration of the space is really run, so this takes a while):
  srifty evaluate examples/mlp_recsys.py --batch-size 128 --case budget=0.45 --case min_throughput=2500
  srifty evaluate examples/cnn_resnet.py --batch-size 16 --types emu.small,emu.net --max-hosts 2
  srifty evaluate examples/cnn_resnet.py --batch-size 16 --case objective=cost-per-sample --json
  srifty evaluate examples/conv_heavy.py --batch-size 16 --max-hosts 2 --case budget=1,available=emu.large=1
  srifty evaluate examples/cnn_resnet.py --batch-size 16 --compare docs/evaluation/cnn_resnet.json

Each case's pick is made as `srifty recommend` makes it (mixes with their batch split, the
case's availability limits, this machine's cores); a mix picked at a batch split is run as its
plan. Runs are cached in --work-dir, so an interrupted evaluation resumes and further --case
settings reuse the measured table.""")
@click.argument("script", type=click.Path(exists=True, dir_okay=False))
@click.option("--spec", default="configs/emulated.yaml", show_default=True, type=click.Path(exists=True, dir_okay=False),
              help="The emulated instance catalog.")
@click.option("--case", "cases", multiple=True,
              help="A constraint setting: budget=N ($/h), min_throughput=N (samples/s), objective=throughput|cost|"
                   "cost-per-sample, available=TYPE=N (at most N hosts of TYPE; any number of them), joined by "
                   "commas. Repeat for several. Default: highest throughput.")
@click.option("--batch-size", type=params.BATCH, required=True, help="Per-worker batch size to evaluate at.")
@click.option("--types", help="Comma-separated host types to consider (default: every type in --spec).")
@click.option("--max-hosts", type=params.whole(1, 64), default=3, show_default=True, help="Most hosts in a configuration.")
@click.option("--max-seconds", type=params.positive(), default=8.0, show_default=True, help="Measuring time per run.")
@click.option("--work-dir", default="runs/evaluate", show_default=True, type=click.Path(file_okay=False),
              help="Where runs are cached.")
@click.option("--corpus", multiple=True, help="Training corpora for the latency model (default: the shipped ones).")
@click.option("--report", type=click.Path(dir_okay=False), help="Write the Markdown report here.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write the PNG plot here.")
@click.option("--compare", "compare_path", type=click.Path(exists=True, dir_okay=False),
              help="An earlier evaluation of the same model and batch (its --json output): report how far the "
                   "measured figures moved since, the oracle's own repeatability.")
@click.option("--json", "as_json", is_flag=True, help="Print the evaluation as one JSON document.")
def evaluate(script: str, spec: str, cases: tuple[str, ...], batch_size: int, types: str | None, max_hosts: int,
             max_seconds: float, work_dir: str, corpus: tuple[str, ...], report: str | None, plot_path: str | None,
             compare_path: str | None, as_json: bool) -> None:
    """Check srifty's recommendation against every configuration actually run (emulated cluster)."""
    import os

    from srifty import api
    from srifty import evaluate as ev_mod
    from srifty.profile import atomic_write_text

    if plot_path:
        check_plot_format(plot_path)
    outputs = [o for o in (Output(report or "", "--report"), Output(plot_path or "", "--plot")) if o.path]
    refuse_clobbering(outputs, [Input(script, "the script"), Input(spec, "--spec"), Input(compare_path or "", "--compare"),
                                *(Input(c, "--corpus") for c in corpus)])
    for o in outputs:
        check_writable(o)
    say = (lambda m: click.echo(m, err=True)) if not as_json else (lambda m: None)
    result = api.evaluate(script, spec, cases, batch_size, [t.strip() for t in types.split(",")] if types else None,
                          max_hosts=max_hosts, max_seconds=max_seconds, work_dir=work_dir, corpora=corpus,
                          compare_path=compare_path, say=say)
    command = "srifty evaluate " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 2 else "srifty evaluate"
    if plot_path:
        ev_mod.plot(result, plot_path)
    text = ev_mod.render_markdown(result, command, os.path.relpath(plot_path, os.path.dirname(report) or ".")
                                  if (plot_path and report) else plot_path)
    if report:
        atomic_write_text(report, text)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1))
    else:
        click.echo(text)


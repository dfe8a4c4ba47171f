"""``srifty launch``: run a plan for a bounded time and set its measured step against the prediction."""

from __future__ import annotations

import json

import click

from srifty.commands import params
from srifty.errors import SriftyError
from srifty.outputs import Input, Output, check_writable, refuse_clobbering


@click.command("launch", epilog="""\b
Examples:
  srifty recommend --profile profiles/emulated/cnn_resnet --catalog configs/emulated.yaml --budget 1 --plan plan/
  sudo srifty launch plan/ --backend emulated
  srifty launch plan/ --backend ec2 --instance-profile srifty-profiler --max-cost 5

The plan's configuration trains for at most --max-seconds of measuring under `srifty profile`
(its workers, hosts and instances removed on every exit path; on EC2 the cost shown first),
and the measured iteration is set against the plan's predicted one and interval. emulated runs
any plan, a mix included, each host type at its per-worker batch; ec2 runs a plan of one type.
""")
@click.argument("plan_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--backend", type=click.Choice(["emulated", "ec2"]), required=True, help="Where the plan runs.")
@click.option("--max-seconds", type=params.positive(), default=20.0, show_default=True,
              help="Cap on measuring time (after start-up).")
@click.option("--out", type=click.Path(dir_okay=False), help="The run's profile (default: PLAN_DIR/run.profile.json).")
@click.option("--spec", default="configs/emulated.yaml", show_default=True, type=click.Path(dir_okay=False),
              help="With --backend emulated: the emulated host types.")
@click.option("--instance-profile", help="With --backend ec2: the instances' IAM instance profile (docs/aws-permissions.md).")
@click.option("--s3-uri", help="With --backend ec2: where the run's inputs and profile go (default: a private bucket).")
@click.option("--max-cost", type=params.non_negative(), help="With --backend ec2: refuse to launch above this estimate (USD).")
@click.option("--yes", is_flag=True, help="With --backend ec2: launch without asking.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def launch(plan_dir: str, backend: str, max_seconds: float, out: str | None, spec: str, instance_profile: str | None,
           s3_uri: str | None, max_cost: float | None, yes: bool, as_json: bool) -> None:
    """Run a plan from `srifty recommend --plan` and compare its measured step with the prediction."""
    from pathlib import Path

    from srifty.commands.ec2 import launch_prompt
    from srifty.launch import launch as run_plan

    out = out or str(Path(plan_dir) / "run.profile.json")
    refuse_clobbering([Output(out, "--out")], [Input(str(Path(plan_dir) / "plan.json"), "the plan"),
                                               Input(spec if backend == "emulated" else "", "--spec")])
    check_writable(Output(out, "--out"))
    options = {"spec": spec} if backend == "emulated" else {
        "instance_profile": instance_profile, "s3_uri": s3_uri, "max_cost": max_cost, "yes": yes,
        "confirm": launch_prompt()}
    if backend == "ec2" and not instance_profile:
        raise SriftyError("--backend ec2 needs --instance-profile (the instances upload their profile with its role).",
                          "Create one as docs/aws-permissions.md shows, then add --instance-profile srifty-profiler.")
    report = run_plan(plan_dir, backend, out, max_seconds, **options)
    for note in report.notes:
        click.echo(f"warning: {note}", err=True)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=1))
        return
    click.echo(report.sentence())
    click.echo(f"profile written to {out}", err=True)

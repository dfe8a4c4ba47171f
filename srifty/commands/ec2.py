"""``srifty ec2``: housekeeping for the EC2 profiling backend (``srifty ec2 cleanup``), and the
prompt with which ``srifty profile --backend ec2`` asks to launch."""

from __future__ import annotations

import sys
from typing import Callable

import click


EPILOG = """\b
Examples:
  srifty ec2 cleanup --dry-run                 # list what srifty left running
  srifty ec2 cleanup                           # terminate it
  srifty ec2 cleanup --run-id 3f2a9c1b7e4d --region us-west-2

Only instances tagged srifty:managed=true (and srifty:run-id, with --run-id) are
touched; credentials come from the standard AWS chain (env, profile, SSO, role).
"""


def launch_prompt() -> Callable[[str], bool] | None:
    """How ``srifty profile --backend ec2`` asks for consent to a launch's cost: a yes/no
    question (default no) on stderr when stdin and stderr are terminals; None otherwise, for
    nobody would see the question or answer it (the backend then wants --yes or a cost
    limit). The library never prompts."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None
    return lambda question: click.confirm(question, default=False, err=True)


@click.group("ec2", epilog=EPILOG)
def ec2() -> None:
    """Find and terminate EC2 instances that srifty's ec2 profiling backend launched."""


@ec2.command("cleanup", epilog=EPILOG)
@click.option("--run-id", help="Only this run's instances (the id srifty printed when it launched them).")
@click.option("--region", help="AWS region (default: AWS_REGION / AWS_DEFAULT_REGION, else us-east-1).")
@click.option("--dry-run", is_flag=True, help="List what would be terminated, terminate nothing.")
def cleanup(run_id: str | None, region: str | None, dry_run: bool) -> None:
    """Terminate every instance tagged srifty:managed=true that is still pending, running or stopped."""
    from srifty import api

    done = api.cleanup_ec2(run_id, region, dry_run)
    region, found, groups, busy = done.region, done.instances, done.placement_groups, done.busy_groups
    if done.groups_error:  # placement groups cost nothing: failing to list them does not fail the clean-up
        click.echo(f"warning: could not list or delete srifty's placement groups in {region} ({done.groups_error}); "
                   "they cost nothing, and need ec2:DescribePlacementGroups and ec2:DeletePlacementGroup "
                   "(docs/aws-permissions.md)", err=True)
    scope = f"run {run_id}" if run_id else "any srifty run"
    for name in groups:
        click.echo(f"{'would delete' if dry_run else 'deleted'} placement group {name}", err=True)
    for name in busy:
        click.echo(f"placement group {name} still holds instances that are shutting down: run cleanup again in a "
                   "minute to delete it", err=True)
    if not found:
        click.echo(f"No instances of {scope} left in {region}.", err=True)
        return
    for f in found:
        click.echo(f"{f['id']}\t{f['type']}\t{f['state']}\trun {f['run_id']}\tlaunched {f['launched']}")
    verb = "would terminate" if dry_run else "terminated"
    click.echo(f"{verb} {len(found)} instance(s) of {scope} in {region}.", err=True)

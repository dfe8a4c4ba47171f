"""``srifty ec2``: housekeeping for the EC2 profiling backend (``srifty ec2 cleanup``), and the
prompt with which ``srifty profile --backend ec2`` asks to launch."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

import click

from srifty.errors import SriftyError

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


def cleanup_instances(client: Any, run_id: str | None, dry_run: bool) -> list[dict[str, Any]]:
    """The srifty-tagged instances still alive (terminated unless ``dry_run``)."""
    from srifty.profiling.ec2 import find_leftovers

    found = find_leftovers(client, run_id)
    ids = [f["id"] for f in found]
    if ids and not dry_run:
        for i in range(0, len(ids), 500):
            client.terminate_instances(InstanceIds=ids[i:i + 500])
    return found


def cleanup_placement_groups(client: Any, run_id: str | None, dry_run: bool) -> tuple[list[str], list[str]]:
    """srifty's cluster placement groups: (deleted, or listed when ``dry_run``; still holding
    instances, to delete once those have terminated)."""
    from botocore.exceptions import ClientError

    from srifty.profiling.ec2 import find_placement_groups

    done, busy = [], []
    for name in find_placement_groups(client, run_id):
        if dry_run:
            done.append(name)
            continue
        try:
            client.delete_placement_group(GroupName=name)
            done.append(name)
        except ClientError:  # instances still in it (shutting down): a later cleanup deletes it
            busy.append(name)
    return done, busy


@ec2.command("cleanup", epilog=EPILOG)
@click.option("--run-id", help="Only this run's instances (the id srifty printed when it launched them).")
@click.option("--region", help="AWS region (default: AWS_REGION / AWS_DEFAULT_REGION, else us-east-1).")
@click.option("--dry-run", is_flag=True, help="List what would be terminated, terminate nothing.")
def cleanup(run_id: str | None, region: str | None, dry_run: bool) -> None:
    """Terminate every instance tagged srifty:managed=true that is still pending, running or stopped."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError
    from botocore.parsers import ResponseParserError

    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    try:
        client = boto3.session.Session(region_name=region).client("ec2")
        found = cleanup_instances(client, run_id, dry_run)
    except (ClientError, BotoCoreError) as exc:
        raise SriftyError(f"Could not list or terminate srifty's instances in {region}: {exc}",
                          "Check your AWS credentials and that they allow ec2:DescribeInstances and "
                          "ec2:TerminateInstances (docs/aws-permissions.md).") from None
    groups, busy = [], []
    try:  # placement groups cost nothing: failing to list them must not fail the instances' clean-up
        groups, busy = cleanup_placement_groups(client, run_id, dry_run)
    except (ClientError, BotoCoreError, ResponseParserError) as exc:
        click.echo(f"warning: could not list or delete srifty's placement groups in {region} ({exc}); they cost "
                   "nothing, and need ec2:DescribePlacementGroups and ec2:DeletePlacementGroup "
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

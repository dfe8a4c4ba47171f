"""``srifty ec2 cleanup``: terminate the instances srifty's runs left alive and delete their
placement groups, found by srifty's tags (srifty.profiling.ec2.groups)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from srifty.profiling.ec2.groups import find_leftovers, find_placement_groups


@dataclass
class Cleanup:
    """What a clean-up found: live instances (terminated unless a dry run), placement groups
    (deleted, or listed on a dry run), groups that still hold instances shutting down, and why
    the groups could not be listed, if they could not."""

    region: str
    run_id: str | None
    dry_run: bool
    instances: list[dict[str, Any]] = field(default_factory=list)
    placement_groups: list[str] = field(default_factory=list)
    busy_groups: list[str] = field(default_factory=list)
    groups_error: str | None = None


def cleanup_instances(client: Any, run_id: str | None, dry_run: bool) -> list[dict[str, Any]]:
    """The srifty-tagged instances still alive (terminated unless ``dry_run``)."""
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


def cleanup(client: Any, region: str, run_id: str | None = None, dry_run: bool = False) -> Cleanup:
    """Instances first (they cost money; an error listing them is the caller's to report), then
    placement groups, which cost nothing: failing to list those is recorded, not raised."""
    from botocore.exceptions import BotoCoreError, ClientError
    from botocore.parsers import ResponseParserError

    out = Cleanup(region, run_id, dry_run, cleanup_instances(client, run_id, dry_run))
    try:
        out.placement_groups, out.busy_groups = cleanup_placement_groups(client, run_id, dry_run)
    except (ClientError, BotoCoreError, ResponseParserError) as exc:
        out.groups_error = str(exc)
    return out

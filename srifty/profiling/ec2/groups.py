"""What a run leaves in the account besides its instances, and how srifty finds it again: the
run's cluster placement group (``--placement-group``), and the searches by srifty's tags that
``srifty ec2 cleanup`` runs for instances and groups still alive.

A placement group costs nothing but outlives a crashed launcher; it is tagged like the
instances so that the same clean-up finds both.
"""

from __future__ import annotations

from typing import Any, Callable

from srifty.profiling.ec2.aws import LIVE_STATES, TAG_MANAGED, TAG_RUN_ID


def placement_group_name(run_id: str) -> str:
    return f"srifty-{run_id}"


def create_placement_group(ec2: Any, run_id: str, log: Callable[[str], None]) -> str:
    """The run's cluster placement group (tagged as srifty's, so `srifty ec2 cleanup` finds it)."""
    name = placement_group_name(run_id)
    ec2.create_placement_group(GroupName=name, Strategy="cluster", TagSpecifications=[{
        "ResourceType": "placement-group",
        "Tags": [{"Key": TAG_MANAGED, "Value": "true"}, {"Key": TAG_RUN_ID, "Value": run_id}]}])
    log(f"created cluster placement group {name}")
    return name


def delete_placement_group(ec2: Any, group: str | None, run_id: str, launched: list[str], poll_interval: float,
                           log: Callable[[str], None]) -> None:
    """Delete the run's placement group once its instances (``launched``) are gone (a group holding
    instances cannot be deleted). A group left behind costs nothing; `srifty ec2 cleanup` removes it."""
    if not group:
        return
    try:
        if launched:
            ec2.get_waiter("instance_terminated").wait(
                InstanceIds=launched, WaiterConfig={"Delay": max(poll_interval, 0.05), "MaxAttempts": 120})
        ec2.delete_placement_group(GroupName=group)
        log(f"deleted placement group {group}")
    except Exception as exc:  # noqa: BLE001 - the instances are terminated; the group is free
        log(f"could not delete placement group {group} ({exc}); "
            f"`srifty ec2 cleanup --run-id {run_id}` removes it")


def find_placement_groups(ec2: Any, run_id: str | None = None) -> list[str]:
    """Names of the cluster placement groups srifty created (optionally for one run)."""
    filters = [{"Name": f"tag:{TAG_MANAGED}", "Values": ["true"]}]
    if run_id:
        filters.append({"Name": f"tag:{TAG_RUN_ID}", "Values": [run_id]})
    groups = ec2.describe_placement_groups(Filters=filters).get("PlacementGroups", [])
    return sorted(g["GroupName"] for g in groups if g.get("State", "available") != "deleted")


def find_leftovers(ec2: Any, run_id: str | None = None) -> list[dict[str, Any]]:
    """Instances tagged by srifty (optionally one run) that are not terminated."""
    filters = [{"Name": f"tag:{TAG_MANAGED}", "Values": ["true"]},
               {"Name": "instance-state-name", "Values": LIVE_STATES}]
    if run_id:
        filters.append({"Name": f"tag:{TAG_RUN_ID}", "Values": [run_id]})
    found = []
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
        for res in page.get("Reservations", []):
            for inst in res.get("Instances", []):
                tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                found.append({"id": inst["InstanceId"], "type": inst.get("InstanceType"), "state": inst["State"]["Name"],
                              "run_id": tags.get(TAG_RUN_ID), "launched": str(inst.get("LaunchTime", ""))})
    return found

"""What a run launches, as values: what every instance type of a run shares (:class:`RunSetup`),
one type's plan (:class:`TypePlan`: its S3 keys and its RunInstances request, tags included)
and its outcome (:class:`TypeResult`).

A plan is the same object whether it is printed by ``--dry-run`` or sent to AWS, so the dry run
shows exactly what a launch would ask for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from srifty.errors import SriftyError
from srifty.profiling.ec2.aws import TAG_ATTEMPT, TAG_MANAGED, TAG_RUN_ID, TAG_TYPE
from srifty.profiling.ec2.groups import placement_group_name
from srifty.profiling.ec2.staging import S3Location, requirements_file, shipped_in
from srifty.profiling.launcher import ProfileRequest
from srifty.profiling.project_bundle import ProjectBundle


@dataclass
class TypePlan:
    """What the launcher does for one instance type (the dry-run view)."""

    instance_type: str
    market: str  # "spot" or "on-demand"
    nodes: int
    nproc: int
    price_per_hour: float | None
    run_instances: dict[str, Any]
    user_data: str
    keys: dict[str, str]

    def estimate(self, hours: float) -> float | None:
        return None if self.price_per_hour is None else self.price_per_hour * self.nodes * hours


@dataclass
class TypeResult:
    instance_type: str
    path: str | None = None
    doc: dict[str, Any] | None = None
    error: SriftyError | None = None
    attempts: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RunSetup:
    """What every instance type of one run shares. In a dry run the AMI and zones are not
    looked up (None, []) and the bucket is a placeholder."""

    run_id: str
    loc: S3Location
    ami: str | None
    zones: list[str]  # tried in turn for capacity; with subnets, each subnet's zone in their order
    bundle: ProjectBundle | None  # None with --collectives (srifty's own benchmark)
    placement_group: str | None = None  # the run's cluster placement group (--placement-group)
    subnet_ids: tuple[str, ...] = ()  # --subnet-ids / ec2.subnet_ids (none: the default VPC)
    subnet_of_zone: dict[str, str] = field(default_factory=dict)  # looked up (none in a dry run)
    security_group_ids: tuple[str, ...] = ()  # --security-group-ids / ec2.security_group_ids

    def targets(self) -> list[tuple[str, str | None]]:
        """Where a type's nodes may launch, in turn: (zone, its subnet, or None in the default VPC)."""
        return [(z, self.subnet_of_zone.get(z)) for z in self.zones]


def object_keys(request: ProfileRequest, instance_type: str, setup: RunSetup, attempt: int) -> dict[str, str]:
    """The S3 keys of one attempt on one type: the run's inputs, and what the nodes write back."""
    loc, run_id = setup.loc, setup.run_id
    attempt_dir = f"runs/{run_id}/{instance_type}/attempt-{attempt}"
    requirements = requirements_file(request, setup.bundle)
    return {
        "source": loc.key(f"runs/{run_id}/srifty-src.tar.gz"),
        "project": loc.key(f"runs/{run_id}/project.tar.gz") if setup.bundle else "",
        # a requirements file inside the project is installed from there; another one is uploaded
        "requirements": (loc.key(f"runs/{run_id}/requirements.txt")
                         if requirements and not shipped_in(setup.bundle, requirements) else ""),
        "rendezvous": loc.key(attempt_dir, "rendezvous.json"),
        "profile": loc.key(attempt_dir, "profile.json"),
        "failed": loc.key(attempt_dir, "failed.json"),
        "logs": loc.key(attempt_dir, "logs"),
    }


def run_instances_request(request: ProfileRequest, instance_type: str, setup: RunSetup, attempt: int, spot: bool,
                          user_data: str, ami_name_pattern: str, ami_owner: str) -> dict[str, Any]:
    """The RunInstances call of one attempt: ``--nodes`` instances, tagged as srifty's, that
    terminate when they shut down (the user data shuts them down after the time cap)."""
    run_id = setup.run_id
    tags = [
        {"Key": TAG_MANAGED, "Value": "true"},
        {"Key": TAG_RUN_ID, "Value": run_id},
        {"Key": TAG_TYPE, "Value": instance_type},
        {"Key": TAG_ATTEMPT, "Value": str(attempt)},
        {"Key": "Name", "Value": f"srifty-{run_id}-{instance_type}"},
    ]
    req: dict[str, Any] = {
        "ImageId": setup.ami or f"<newest image named {ami_name_pattern!r} owned by {ami_owner}>",
        "InstanceType": instance_type,
        "MinCount": request.nodes,
        "MaxCount": request.nodes,
        "UserData": user_data,
        "InstanceInitiatedShutdownBehavior": "terminate",
        "Placement": {**({} if setup.subnet_ids else {"AvailabilityZone": setup.zones[0] if setup.zones
                                                           else "<first zone of DescribeAvailabilityZones>"}),
                      **({"GroupName": setup.placement_group or placement_group_name(run_id)}
                         if request.placement_group else {})},
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}, {"ResourceType": "volume", "Tags": tags}],
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
    }
    if setup.subnet_ids:  # the zone is the subnet's (Instances.launch puts the one it tries)
        req["SubnetId"] = setup.subnet_ids[0]
    if setup.security_group_ids:
        req["SecurityGroupIds"] = list(setup.security_group_ids)
    if request.instance_profile:
        req["IamInstanceProfile"] = {"Name": request.instance_profile}
    if spot:
        req["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
        }
    return req

"""The instances' lifecycle: the AMI and zones they launch into, launching (zone after zone
while capacity is short), their states and private IPs, and terminating them; the registry of
every instance this process launched, and the latch that keeps repeated Ctrl-C from cutting
the clean-up short.

An instance is in the registry as soon as RunInstances returns, before anything else can fail,
so that whatever happens next the launcher knows what to terminate.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Callable, Sequence

from srifty.errors import ProfilingFailed, SriftyError, Terminated
from srifty.profiling.ec2.aws import CAPACITY_ERRORS, AwsClients, client_error_code
from srifty.profiling.launcher import ProfileRequest

DEFAULT_AMI_PATTERN = "Deep Learning OSS Nvidia Driver AMI GPU PyTorch * (Ubuntu 22.04) *"
DEFAULT_AMI_OWNER = "amazon"


class InstanceRegistry:
    """Every instance id this process launched, and which were already terminated."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.launched: list[str] = []
        self.terminated: set[str] = set()

    def add(self, ids: list[str]) -> None:
        with self._lock:
            self.launched.extend(i for i in ids if i not in self.launched)

    def alive(self, ids: list[str] | None = None) -> list[str]:
        with self._lock:
            pool = self.launched if ids is None else ids
            return [i for i in pool if i not in self.terminated]

    def mark_terminated(self, ids: list[str]) -> None:
        with self._lock:
            self.terminated.update(ids)


class InterruptLatch:
    """While a run is under way, only the first SIGINT, SIGTERM or SIGHUP raises; later ones are counted.

    The first unwinds into the clean-up (stop every thread, wait for them, terminate every
    instance). A second one raised inside that clean-up would cut it short: instances left
    running, and a threading traceback at exit. Installed from the main thread only (signals
    reach no other); a signal that was ignored stays ignored. SIGINT raises
    ``KeyboardInterrupt``, the others :class:`srifty.errors.Terminated`, as the CLI expects."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.count = 0
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "InterruptLatch":
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self._old[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._old.items():
            signal.signal(signum, handler)
        self._old.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.count == 1:
            raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)


class Instances:
    """One backend's EC2 instances: launched into the registry, terminated out of it. ``stop``
    is the run's stop signal: a launch or a wait sees it and raises ``KeyboardInterrupt``."""

    def __init__(self, clients: AwsClients, registry: InstanceRegistry, stop: threading.Event,
                 log: Callable[[str], None]) -> None:
        self.clients = clients
        self.registry = registry
        self.stop = stop
        self.log = log

    def resolve_ami(self, request: ProfileRequest, name_pattern: str, owner: str, region: str) -> str:
        """--ami, else the newest available image named like ``name_pattern`` owned by ``owner``."""
        if request.ami:
            return request.ami
        images = self.clients.ec2.describe_images(
            Owners=[owner],
            Filters=[{"Name": "name", "Values": [name_pattern]}, {"Name": "state", "Values": ["available"]}],
        ).get("Images", [])
        if not images:
            raise SriftyError(f"No AMI named like {name_pattern!r} (owner {owner}) in {region}.",
                              "Pass --ami ami-... with PyTorch, Python 3.10+ and the AWS CLI installed.")
        return max(images, key=lambda im: (im.get("CreationDate", ""), im.get("Name", "")))["ImageId"]

    def zones(self) -> list[str]:
        resp = self.clients.ec2.describe_availability_zones(Filters=[{"Name": "state", "Values": ["available"]}])
        return [z["ZoneName"] for z in resp.get("AvailabilityZones", []) if z.get("ZoneType", "availability-zone") == "availability-zone"]

    def network(self, subnet_ids: Sequence[str], group_ids: Sequence[str], region: str) -> dict[str, str]:
        """Each subnet's zone (zone -> subnet, in the order given), checked: every one exists,
        no two share a zone, and the security groups exist (in the subnets' VPC, where subnets are
        given). A subnet that gives no public address on launch is said: its nodes reach S3 and
        PyPI only through a NAT gateway or VPC endpoints."""
        from botocore.exceptions import ClientError

        try:
            found = {s["SubnetId"]: s for s in self.clients.ec2.describe_subnets(SubnetIds=list(subnet_ids))["Subnets"]
                     } if subnet_ids else {}
        except ClientError as exc:
            if client_error_code(exc) == "InvalidSubnetID.NotFound":
                raise SriftyError(f"The subnets to launch into (--subnet-ids, or ec2.subnet_ids in the config file): "
                                  f"{exc.response['Error'].get('Message', exc)} (region {region}).",
                                  "Give subnets of this region (`aws ec2 describe-subnets`), or --region.") from None
            raise
        zones: dict[str, str] = {}
        for sid in subnet_ids:
            s = found[sid]
            if s["AvailabilityZone"] in zones:
                raise SriftyError(f"The subnets to launch into: {zones[s['AvailabilityZone']]} and {sid} are both in "
                                  f"{s['AvailabilityZone']}.", "Give one subnet per zone (they are tried in turn).")
            zones[s["AvailabilityZone"]] = sid
            if not s.get("MapPublicIpOnLaunch"):
                self.log(f"note: {sid} gives instances no public address: its nodes reach S3 and PyPI only through "
                         "a NAT gateway or VPC endpoints")
        vpcs = {s["VpcId"] for s in found.values()}
        if group_ids:
            try:
                groups = self.clients.ec2.describe_security_groups(GroupIds=list(group_ids))["SecurityGroups"]
            except ClientError as exc:
                if client_error_code(exc) == "InvalidGroup.NotFound":
                    raise SriftyError(f"The security groups (--security-group-ids, or ec2.security_group_ids in the "
                                      f"config file): {exc.response['Error'].get('Message', exc)} "
                                      f"(region {region}).",
                                      "Give groups of this region and of the subnets' VPC.") from None
                raise
            elsewhere = [g["GroupId"] for g in groups if vpcs and g.get("VpcId") not in vpcs]
            if elsewhere:
                raise SriftyError(f"The security groups: {', '.join(elsewhere)} not in the subnets' VPC "
                                  f"({', '.join(sorted(vpcs))}).", "Give groups of the VPC the subnets are in.")
        return zones

    def terminate(self, ids: list[str]) -> None:
        ids = self.registry.alive(ids)
        if not ids:
            return
        for i in range(0, len(ids), 500):
            batch = ids[i:i + 500]
            self.clients.ec2.terminate_instances(InstanceIds=batch)
            self.registry.mark_terminated(batch)

    def launch(self, req: dict[str, Any], targets: list[tuple[str, str | None]]) -> tuple[list[dict[str, Any]], str]:
        """RunInstances in the first zone (or subnet: ``targets`` are (zone, subnet or None)) with
        capacity; the instances are registered at once."""
        from botocore.exceptions import ClientError

        tried = []
        for zone, subnet in targets:
            if self.stop.is_set():
                raise KeyboardInterrupt
            placement = {k: v for k, v in req.get("Placement", {}).items() if k != "AvailabilityZone"}
            where = {"SubnetId": subnet, "Placement": placement} if subnet else \
                {"Placement": {**placement, "AvailabilityZone": zone}}
            try:
                resp = self.clients.ec2.run_instances(**{**req, **where})
            except ClientError as exc:
                if client_error_code(exc) in CAPACITY_ERRORS:
                    tried.append(f"{zone} ({subnet})" if subnet else zone)
                    self.log(f"{req['InstanceType']}: no capacity in {tried[-1]}, trying the next zone")
                    continue
                raise
            instances = resp["Instances"]
            self.registry.add([x["InstanceId"] for x in instances])
            return instances, zone
        raise ProfilingFailed(
            f"No capacity for {req['MinCount']} x {req['InstanceType']} "
            f"({'spot' if 'InstanceMarketOptions' in req else 'on-demand'}) in any zone tried: {', '.join(tried)}.",
            "Try again later, another --region, fewer --nodes, or another instance type.",
        )

    def states(self, ids: list[str]) -> dict[str, str]:
        states: dict[str, str] = {}
        pages = self.clients.ec2.get_paginator("describe_instances").paginate(InstanceIds=ids)
        for page in pages:
            for res in page.get("Reservations", []):
                for inst in res.get("Instances", []):
                    states[inst["InstanceId"]] = inst["State"]["Name"]
        return states

    def private_ips(self, ids: list[str], poll_interval: float) -> list[str]:
        """The private IPs RunInstances did not return: polled, since a new instance may not be
        visible to DescribeInstances at once, and given up as soon as the run is stopped."""
        from botocore.exceptions import ClientError

        for _ in range(40):
            found: dict[str, str] = {}
            try:
                for page in self.clients.ec2.get_paginator("describe_instances").paginate(InstanceIds=ids):
                    for res in page["Reservations"]:
                        for inst in res["Instances"]:
                            found[inst["InstanceId"]] = inst.get("PrivateIpAddress", "")
            except ClientError as exc:
                if client_error_code(exc) != "InvalidInstanceID.NotFound":
                    raise
            if all(found.get(i) for i in ids):
                return [found[i] for i in ids]
            if self.stop.wait(poll_interval):
                raise KeyboardInterrupt
        raise ProfilingFailed(f"The instances {', '.join(ids)} got no private IP address.",
                              "Check the subnet of the default VPC; they were terminated.")

"""The ``ec2`` profiling backend: profile a script on real EC2 instances, then terminate them.

:class:`Ec2Backend` (``backend``) checks a request, gets consent for its cost, and sequences
the run; the rest of the package does the work, one concern a module:

- ``config``: the time cap and billed hours, srifty's config file (``ec2:``), the cost limit;
- ``cost``: the cost table and estimate, and the consent a launch needs (``CostEstimate``);
- ``staging``: the S3 bucket and keys (``S3Location``), srifty's source and the project
  shipped there, and the profile read back (``S3Staging``);
- ``plans``: one instance type's plan (its S3 keys and RunInstances request) and result;
- ``userdata``: the boot script each instance runs;
- ``instances``: launching, watching and terminating instances, the registry of those
  launched, and the latch that keeps repeated Ctrl-C from cutting the clean-up short;
- ``run``: the instance types profiled in parallel, and the clean-up on every exit path;
- ``groups``: the run's placement group, and finding what srifty left by its tags;
- ``cleanup``: terminating and deleting what srifty left (``srifty ec2 cleanup``);
- ``node``: the backend on the instance (node mode: one torchrun agent per node);
- ``aws``: srifty's tags, the states and error codes read, and the lazily created clients.
"""

from srifty.profiling.ec2.aws import (CAPACITY_ERRORS, LIVE_STATES, LOST_STATES, TAG_ATTEMPT, TAG_MANAGED, TAG_RUN_ID,
                                      TAG_TYPE, AwsClients, client_error_code)
from srifty.profiling.ec2.backend import Ec2Backend
from srifty.profiling.ec2.cleanup import Cleanup, cleanup, cleanup_instances, cleanup_placement_groups
from srifty.profiling.ec2.config import (BOOT_OVERHEAD_S, CostLimit, Ec2Config, billed_hours, config_path, cost_limit,
                                         time_cap)
from srifty.profiling.ec2.cost import CostEstimate
from srifty.profiling.ec2.groups import (create_placement_group, delete_placement_group, find_leftovers,
                                         find_placement_groups, placement_group_name)
from srifty.profiling.ec2.instances import (DEFAULT_AMI_OWNER, DEFAULT_AMI_PATTERN, InstanceRegistry, Instances,
                                            InterruptLatch)
from srifty.profiling.ec2.node import NODE_ENV, RDZV_PORT, rendezvous_doc
from srifty.profiling.ec2.plans import RunSetup, TypePlan, TypeResult
from srifty.profiling.ec2.run import TypeRuns
from srifty.profiling.ec2.staging import S3Location, S3Staging, source_tarball
from srifty.profiling.ec2.userdata import decode_user_data

_client_error_code = client_error_code  # the name it had when the backend was one module

__all__ = [
    "CAPACITY_ERRORS", "LIVE_STATES", "LOST_STATES", "TAG_ATTEMPT", "TAG_MANAGED", "TAG_RUN_ID", "TAG_TYPE",
    "AwsClients", "client_error_code", "Ec2Backend", "Cleanup", "cleanup", "cleanup_instances",
    "cleanup_placement_groups", "BOOT_OVERHEAD_S", "CostLimit", "Ec2Config", "billed_hours",
    "config_path", "cost_limit", "time_cap", "CostEstimate", "create_placement_group", "delete_placement_group",
    "find_leftovers", "find_placement_groups", "placement_group_name", "DEFAULT_AMI_OWNER", "DEFAULT_AMI_PATTERN",
    "InstanceRegistry", "Instances", "InterruptLatch", "NODE_ENV", "RDZV_PORT", "rendezvous_doc", "RunSetup",
    "TypePlan", "TypeResult", "TypeRuns", "S3Location", "S3Staging", "source_tarball", "decode_user_data",
]

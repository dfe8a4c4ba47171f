"""The ``ec2`` profiling backend: profile a script on real EC2 instances, then terminate them.

``srifty profile SCRIPT --backend ec2 --instance-types g4dn.xlarge,g5.xlarge [--spot] [--nodes 2]``

For each instance type (in parallel, one thread per type) the launcher

1. uploads the script (and srifty's own source) to S3 under ``<prefix>/runs/<run-id>/``,
2. launches ``--nodes`` instances in one RunInstances call, tagged ``srifty:managed=true``,
   ``srifty:run-id=<run-id>`` and ``srifty:instance-type``; user data (no secrets) installs
   srifty and runs ``srifty profile`` there with the same measurement options,
3. writes ``rendezvous.json`` (the nodes' private IPs, first node = c10d rendezvous host)
   to the attempt's S3 prefix; each node finds its rank from its own IP in that list,
4. polls S3 for ``profile.json`` (or ``failed.json``), checks the instances' state between
   polls, and terminates the instances when the profile arrives, the run is lost, the time
   cap passes, or anything raises (Ctrl-C included).

Every instance launched is recorded in a registry as soon as RunInstances returns; the
base of :meth:`Ec2Backend.profile` terminates everything in it on every exit path, and
``srifty ec2 cleanup`` finds anything tagged by srifty that is still alive.

On the instance the same backend runs in *node mode* (``SRIFTY_EC2_NODE=1`` in the
environment): :meth:`Ec2Backend.plan` then returns one torchrun agent for this node with
c10d rendezvous on the first node's private IP.

boto3 is imported inside functions; clients are injectable (tests pass moto-backed ones).
"""

from __future__ import annotations

import base64
import io
import json
import os
import shlex
import sys
import tarfile
import threading
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from srifty import hostinfo, profile
from srifty.errors import ProfileFormatError, ProfilingFailed, SriftyError
from srifty.profiling.launcher import (
    LaunchPlan,
    ProfileRequest,
    ProfilingBackend,
    ProgressFn,
    WorkerCommand,
    worker_env,
)

TAG_MANAGED = "srifty:managed"
TAG_RUN_ID = "srifty:run-id"
TAG_TYPE = "srifty:instance-type"
TAG_ATTEMPT = "srifty:attempt"
RDZV_PORT = 29400
NODE_ENV = "SRIFTY_EC2_NODE"
DEFAULT_AMI_PATTERN = "Deep Learning OSS Nvidia Driver AMI GPU PyTorch * (Ubuntu 22.04) *"
DEFAULT_AMI_OWNER = "amazon"
# Time from RunInstances to user data running, plus installing srifty and the requirements.
BOOT_OVERHEAD_S = 600.0
CAPACITY_ERRORS = ("InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity")
LIVE_STATES = ["pending", "running", "stopping", "stopped"]
LOST_STATES = ("shutting-down", "terminated", "stopping", "stopped")


# --------------------------------------------------------------------------- small values


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # no leading/trailing slash, may be ""

    @classmethod
    def parse(cls, uri: str) -> "S3Location":
        if not uri.startswith("s3://") or len(uri) <= 5:
            raise SriftyError(f"--s3-uri must look like s3://bucket/prefix (got {uri!r}).",
                              "Give a bucket you own, or leave --s3-uri out and srifty creates a private one.")
        bucket, _, prefix = uri[5:].partition("/")
        if not bucket:
            raise SriftyError(f"--s3-uri {uri!r} names no bucket.", "Use s3://bucket/prefix.")
        return cls(bucket, prefix.strip("/"))

    def key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def uri(self, *parts: str) -> str:
        return f"s3://{self.bucket}/{self.key(*parts)}"


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


def _client_error_code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return response.get("Error", {}).get("Code")
    return None


# --------------------------------------------------------------------------- the backend


class Ec2Backend(ProfilingBackend):
    """Profiles on EC2 instances launched for the purpose and terminated afterwards."""

    name = "ec2"

    def __init__(
        self,
        ec2: Any = None,
        s3: Any = None,
        sts: Any = None,
        catalog: Any = None,
        poll_interval: float = 15.0,
        boot_overhead_s: float = BOOT_OVERHEAD_S,
        ami_name_pattern: str = DEFAULT_AMI_PATTERN,
        ami_owner: str = DEFAULT_AMI_OWNER,
        on_poll: Callable[[str, int], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._ec2, self._s3, self._sts = ec2, s3, sts
        self._catalog = catalog
        self.poll_interval = poll_interval
        self.boot_overhead_s = boot_overhead_s
        self.ami_name_pattern = ami_name_pattern
        self.ami_owner = ami_owner
        self.on_poll = on_poll  # test hook: called at every poll with (instance type, attempt)
        self.sleep = sleep
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.registry = InstanceRegistry()
        self._region: str | None = None
        self._stop = threading.Event()

    # -- clients (lazily created from the standard boto3 credential chain)
    def _client(self, service: str) -> Any:
        import boto3

        return boto3.session.Session(region_name=self._region).client(service)

    @property
    def ec2(self) -> Any:
        if self._ec2 is None:
            self._ec2 = self._client("ec2")
        return self._ec2

    @property
    def s3(self) -> Any:
        if self._s3 is None:
            self._s3 = self._client("s3")
        return self._s3

    @property
    def sts(self) -> Any:
        if self._sts is None:
            self._sts = self._client("sts")
        return self._sts

    @property
    def catalog(self) -> Any:
        if self._catalog is None:
            from srifty.catalog import Catalog

            self._catalog = Catalog.default()
        return self._catalog

    # ------------------------------------------------------------------ node mode (on the instance)
    @staticmethod
    def node_mode() -> bool:
        return os.environ.get(NODE_ENV) == "1"

    def plan(self, request: ProfileRequest, run_dir: str) -> LaunchPlan:
        """On an instance (node mode): this node's torchrun agent. Elsewhere: the launch plan as notes."""
        if not self.node_mode():
            plans = self.type_plans(request, "<run-id>", None, None, None)
            return LaunchPlan(self.name, [], run_dir, [f"{p.instance_type}: {p.nodes} x {p.market}" for p in plans])
        nnodes = int(os.environ.get("SRIFTY_EC2_NNODES", "1"))
        rank = int(os.environ.get("SRIFTY_EC2_NODE_RANK", "0"))
        master = os.environ.get("SRIFTY_EC2_MASTER", "127.0.0.1")
        rdzv_id = os.environ.get("SRIFTY_EC2_RDZV_ID", "srifty")
        torchrun = [
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes", str(nnodes), "--node-rank", str(rank), "--nproc-per-node", str(request.nproc),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{master}:{RDZV_PORT}", "--rdzv-id", rdzv_id,
            "--max-restarts", "0",
        ]
        if request.collectives:
            argv = [*torchrun, "-m", "srifty.profiling.collectives"]
        else:
            argv = [*torchrun, "-m", "srifty.profiling.worker", os.path.abspath(str(request.script)), *request.script_args]
        env = {**worker_env(request, run_dir), "SRIFTY_INSTANCE_TYPES": request.instance_type}
        return LaunchPlan(self.name, [WorkerCommand(argv, env)], run_dir,
                          [f"ec2 node {rank} of {nnodes}, c10d rendezvous on {master}:{RDZV_PORT}"])

    def cluster_block(self, request: ProfileRequest, world_size: int, device: str) -> dict[str, Any]:
        nnodes = int(os.environ.get("SRIFTY_EC2_NNODES", "1"))
        ips = [x for x in os.environ.get("SRIFTY_EC2_NODE_IPS", "").split(",") if x] or ["localhost"]
        spec = hostinfo.host_spec()
        per_node = max(1, world_size // max(nnodes, 1))
        hosts = [{"name": ip, "instance_type": request.instance_type, "workers": per_node,
                  "spec": spec if i == int(os.environ.get("SRIFTY_EC2_NODE_RANK", "0")) else {"address": ip}}
                 for i, ip in enumerate(ips)]
        return {
            "launcher": self.name,
            "backend": "nccl" if device == "cuda" else "gloo",
            "device": device,
            "world_size": world_size,
            "nodes": nnodes,
            "workers_per_node": [per_node] * nnodes,
            "instance_types": [request.instance_type],
            "hosts": hosts,
            "network": {"rendezvous": f"c10d on {ips[0]}:{RDZV_PORT}",
                        "region": os.environ.get("SRIFTY_EC2_REGION"),
                        "market": os.environ.get("SRIFTY_EC2_MARKET")},
        }

    # ------------------------------------------------------------------ validation and planning
    def _region_of(self, request: ProfileRequest) -> str:
        return request.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"

    def validate(self, request: ProfileRequest) -> None:
        request.validate()
        if not request.instance_types:
            raise SriftyError("--backend ec2 needs --instance-types, e.g. --instance-types g4dn.xlarge,g5.xlarge.",
                              "List candidates with `srifty catalog list --gpu T4`.")
        if request.nodes < 1:
            raise SriftyError(f"--nodes must be at least 1 (got {request.nodes}).")
        if request.collectives and request.nodes > 1:
            raise SriftyError("--collectives on EC2 runs on one node only.", "Drop --nodes, or profile a script instead.")
        if request.max_cost is not None and request.max_cost <= 0:
            raise SriftyError(f"--max-cost is in US dollars and must be positive (got {request.max_cost}).")
        if request.time_cap is not None and request.time_cap <= 0:
            raise SriftyError(f"--time-cap must be positive seconds (got {request.time_cap}).")
        if request.s3_uri:
            S3Location.parse(request.s3_uri)
        if len(set(request.instance_types)) != len(request.instance_types):
            raise SriftyError("--instance-types lists a type twice.", "Give each type once; use --nodes for more instances.")
        region = self._region_of(request)
        for t in request.instance_types:
            it = self.catalog.get(t)  # unknown -> SriftyError with "Did you mean"
            if it.emulation is not None:
                raise SriftyError(f"{t!r} is an emulated host type, not an EC2 instance type.",
                                  "Use --backend emulated for it, or unset SRIFTY_CATALOG.")
            if it.price_in(region) is None:
                raise SriftyError(f"The catalog has no price for {t} in {region}: it may not be offered there.",
                                  f"Pick another --region (it lists: {', '.join(it.regions[:6])}).")

    def time_cap(self, request: ProfileRequest) -> float:
        """Seconds an instance may run after boot before the launcher gives up on it."""
        if request.time_cap is not None:
            return float(request.time_cap)
        return request.startup_timeout + request.max_seconds + request.hang_timeout

    def billed_hours(self, request: ProfileRequest) -> float:
        return (self.time_cap(request) + self.boot_overhead_s) / 3600.0

    def _nproc(self, request: ProfileRequest, instance_type: str) -> int:
        it = self.catalog.get(instance_type)
        return it.gpu_count if it.gpu_count else request.nproc

    def _price(self, request: ProfileRequest, instance_type: str, spot: bool) -> float | None:
        from srifty.catalog import Market

        market = Market.SPOT if spot else Market.ON_DEMAND
        return self.catalog.price(instance_type, market, self._region_of(request))

    def type_plans(self, request: ProfileRequest, run_id: str, loc: S3Location | None, ami: str | None,
                   zone: str | None, attempt: int = 1, spot: bool | None = None) -> list[TypePlan]:
        spot = request.spot if spot is None else spot
        return [self.type_plan(request, t, run_id, loc, ami, zone, attempt, spot) for t in request.instance_types]

    def type_plan(self, request: ProfileRequest, instance_type: str, run_id: str, loc: S3Location | None,
                  ami: str | None, zone: str | None, attempt: int, spot: bool) -> TypePlan:
        region = self._region_of(request)
        loc = loc or S3Location(f"srifty-<account-id>-{region}", "srifty")
        attempt_dir = f"runs/{run_id}/{instance_type}/attempt-{attempt}"
        keys = {
            "source": loc.key(f"runs/{run_id}/srifty-src.tar.gz"),
            "script": loc.key(f"runs/{run_id}/script/{Path(request.script).name}") if request.script else "",
            "requirements": loc.key(f"runs/{run_id}/script/requirements.txt") if self._requirements(request) else "",
            "rendezvous": loc.key(attempt_dir, "rendezvous.json"),
            "profile": loc.key(attempt_dir, "profile.json"),
            "failed": loc.key(attempt_dir, "failed.json"),
            "logs": loc.key(attempt_dir, "logs"),
        }
        nproc = self._nproc(request, instance_type)
        market = "spot" if spot else "on-demand"
        user_data = self.user_data(request, instance_type, run_id, loc.bucket, keys, nproc, market, region)
        tags = [
            {"Key": TAG_MANAGED, "Value": "true"},
            {"Key": TAG_RUN_ID, "Value": run_id},
            {"Key": TAG_TYPE, "Value": instance_type},
            {"Key": TAG_ATTEMPT, "Value": str(attempt)},
            {"Key": "Name", "Value": f"srifty-{run_id}-{instance_type}"},
        ]
        req: dict[str, Any] = {
            "ImageId": ami or f"<newest image named {self.ami_name_pattern!r} owned by {self.ami_owner}>",
            "InstanceType": instance_type,
            "MinCount": request.nodes,
            "MaxCount": request.nodes,
            "UserData": user_data,
            "InstanceInitiatedShutdownBehavior": "terminate",
            "Placement": {"AvailabilityZone": zone or "<first zone of DescribeAvailabilityZones>"},
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}, {"ResourceType": "volume", "Tags": tags}],
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
        }
        if request.instance_profile:
            req["IamInstanceProfile"] = {"Name": request.instance_profile}
        if spot:
            req["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
            }
        return TypePlan(instance_type, market, request.nodes, nproc, self._price(request, instance_type, spot),
                        req, user_data, keys)

    @staticmethod
    def _requirements(request: ProfileRequest) -> str | None:
        if request.requirements:
            return request.requirements
        if request.script:
            cand = Path(request.script).resolve().parent / "requirements.txt"
            if cand.is_file():
                return str(cand)
        return None

    def user_data(self, request: ProfileRequest, instance_type: str, run_id: str, bucket: str,
                  keys: dict[str, str], nproc: int, market: str, region: str) -> str:
        """The boot script: no credentials in it; S3 access comes from the instance profile."""
        q = shlex.quote
        s3 = lambda key: q(f"s3://{bucket}/{key}")  # noqa: E731
        opts = [
            "--backend", "ec2", "--nproc", str(nproc), "--instance-type", instance_type,
            "--max-seconds", str(request.max_seconds), "--max-iterations", str(request.max_iterations),
            "--min-iterations", str(request.min_iterations), "--target-ci", str(request.target_rel_ci),
            "--hang-timeout", str(request.hang_timeout), "--startup-timeout", str(request.startup_timeout),
            "--device", request.device, "--out", "/opt/srifty/profile.json",
        ]
        if request.batch_size:
            opts += ["--batch-size", str(request.batch_size)]
        if request.model_name or request.script:
            opts += ["--model-name", request.model]
        if request.collectives:
            opts += ["--collectives", "--world-sizes", ",".join(map(str, request.world_sizes or [nproc])),
                     "--max-bytes", str(request.max_bytes), "--repeats", str(request.repeats)]
            target = ""
        else:
            target = "/opt/srifty/script/" + Path(request.script).name
        cmd = " ".join(q(x) for x in ["/opt/srifty/venv/bin/srifty", "profile", *([target] if target else []), *opts])
        if request.script_args:
            cmd += " -- " + " ".join(q(a) for a in request.script_args)
        # the instance shuts itself down (and so terminates) after the time cap even if the launcher is gone
        self_destruct_min = int((self.time_cap(request) + self.boot_overhead_s) // 60) + 5
        lines = [
            "#!/bin/bash",
            f"# srifty run {run_id}: profile on {instance_type} ({market}); no credentials here,",
            "# S3 access comes from the instance profile.",
            "set -uo pipefail",
            "exec > >(tee -a /var/log/srifty-user-data.log) 2>&1",
            f"shutdown -h +{self_destruct_min} 'srifty time cap' || true",
            f"export AWS_DEFAULT_REGION={q(region)}",
            "mkdir -p /opt/srifty/script && cd /opt/srifty",
            "TOKEN=$(curl -s -X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 600')",
            "MYIP=$(curl -s -H \"X-aws-ec2-metadata-token: $TOKEN\" http://169.254.169.254/latest/meta-data/local-ipv4)",
            f"until aws s3 cp {s3(keys['rendezvous'])} rendezvous.json; do sleep 5; done",
            "NODE_RANK=$(python3 -c \"import json,sys; print(json.load(open('rendezvous.json'))['node_ips'].index(sys.argv[1]))\" \"$MYIP\")",
            "fail() { [ \"$NODE_RANK\" = 0 ] && printf '{\"stage\": \"%s\"}' \"$1\" > failed.json && "
            f"aws s3 cp failed.json {s3(keys['failed'])}; "
            f"aws s3 cp /var/log/srifty-user-data.log {s3(keys['logs'])}/node$NODE_RANK.log; shutdown -h now; exit 1; }}",
            f"aws s3 cp {s3(keys['source'])} src.tar.gz && mkdir -p src && tar xzf src.tar.gz -C src || fail download",
            "python3 -m venv --system-site-packages venv && venv/bin/pip install -q ./src || fail install",
        ]
        if not request.collectives:
            lines.append(f"aws s3 cp {s3(keys['script'])} {q(target)} || fail download-script")
        if keys.get("requirements"):
            lines.append(f"aws s3 cp {s3(keys['requirements'])} requirements.txt && "
                         "venv/bin/pip install -q -r requirements.txt || fail requirements")
        lines += [
            "export SRIFTY_EC2_NODE=1 SRIFTY_EC2_NODE_RANK=$NODE_RANK",
            "export SRIFTY_EC2_NNODES=$(python3 -c \"import json; print(len(json.load(open('rendezvous.json'))['node_ips']))\")",
            "export SRIFTY_EC2_MASTER=$(python3 -c \"import json; print(json.load(open('rendezvous.json'))['master_addr'])\")",
            "export SRIFTY_EC2_NODE_IPS=$(python3 -c \"import json; print(','.join(json.load(open('rendezvous.json'))['node_ips']))\")",
            f"export SRIFTY_EC2_RDZV_ID={q(run_id)} SRIFTY_EC2_REGION={q(region)} SRIFTY_EC2_MARKET={q(market)}",
            f"{cmd}; STATUS=$?",
            "if [ \"$NODE_RANK\" = 0 ]; then",
            f"  if [ -s /opt/srifty/profile.json ]; then aws s3 cp /opt/srifty/profile.json {s3(keys['profile'])} --sse AES256;",
            "  else printf '{\"stage\": \"profile\", \"status\": %s}' \"$STATUS\" > failed.json; "
            f"aws s3 cp failed.json {s3(keys['failed'])}; fi",
            "fi",
            f"aws s3 cp /var/log/srifty-user-data.log {s3(keys['logs'])}/node$NODE_RANK.log",
            "shutdown -h now",
        ]
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ dry run
    def dry_run(self, request: ProfileRequest) -> str:
        if self.node_mode():
            return super().dry_run(request)
        self.validate(request)
        plans = self.type_plans(request, "<run-id>", S3Location.parse(request.s3_uri) if request.s3_uri else None,
                                request.ami, None)
        hours = self.billed_hours(request)
        doc = {
            "backend": "ec2",
            "region": self._region_of(request),
            "s3": request.s3_uri or f"s3://srifty-<account-id>-{self._region_of(request)}/srifty (created private)",
            "billed_hours_per_instance": round(hours, 3),
            "run_instances": [{**p.run_instances, "UserData": f"<decoded below: user data for {p.instance_type}>"}
                              for p in plans],
            "rendezvous_example": {p.instance_type: {"key": p.keys["rendezvous"],
                                                     "body": self.rendezvous_doc(["10.0.0.11", "10.0.0.12"][:p.nodes] +
                                                                                 [f"10.0.0.{13 + i}" for i in range(max(0, p.nodes - 2))],
                                                                                 "<run-id>")}
                                   for p in plans},
        }
        lines = [json.dumps(doc, indent=1)]
        for p in plans:
            lines += ["", f"# user data for {p.instance_type} (sent base64-encoded by boto3)", p.user_data.rstrip()]
        if not request.instance_profile:
            lines += ["", "# note: a real launch needs --instance-profile (the instances' S3 access; see docs/aws-permissions.md)"]
        lines += ["", self.cost_table(request, plans)]
        return "\n".join(lines)

    @staticmethod
    def rendezvous_doc(ips: list[str], run_id: str) -> dict[str, Any]:
        return {"master_addr": ips[0], "master_port": RDZV_PORT, "node_ips": ips, "rdzv_id": run_id}

    def estimate(self, request: ProfileRequest, plans: list[TypePlan]) -> tuple[float | None, float | None]:
        """(planned cost, worst case including the on-demand retry after a lost spot run)."""
        hours = self.billed_hours(request)
        costs = [p.estimate(hours) for p in plans]
        if any(c is None for c in costs):
            return None, None
        planned = sum(c for c in costs if c is not None)
        worst = planned
        if request.spot:
            worst += sum((self._price(request, p.instance_type, False) or 0.0) * p.nodes * hours for p in plans)
        return planned, worst

    def cost_table(self, request: ProfileRequest, plans: list[TypePlan]) -> str:
        hours = self.billed_hours(request)
        lines = [f"# estimated cost (catalog prices in {self._region_of(request)}, "
                 f"{hours:.2f} h per instance = time cap {self.time_cap(request):.0f} s + boot {self.boot_overhead_s:.0f} s)"]
        for p in plans:
            cost = p.estimate(hours)
            price = "unknown" if p.price_per_hour is None else f"${p.price_per_hour:.4f}/h"
            lines.append(f"#   {p.instance_type:<16} {p.market:<9} x{p.nodes}  {price:>14}  "
                         f"{'unknown' if cost is None else f'${cost:.2f}'}")
        planned, worst = self.estimate(request, plans)
        if planned is not None:
            lines.append(f"#   total ${planned:.2f}" + (f" (worst case with on-demand retries ${worst:.2f})" if request.spot else ""))
        return "\n".join(lines)

    def check_cost(self, request: ProfileRequest, plans: list[TypePlan]) -> None:
        if request.max_cost is None:
            return
        planned, worst = self.estimate(request, plans)
        if worst is None:
            raise SriftyError("--max-cost cannot be enforced: the catalog has no price for some of the instance types.",
                              "Run `srifty catalog refresh`, or drop --max-cost.")
        if worst > request.max_cost:
            raise SriftyError(
                f"This run could cost up to ${worst:.2f}, above --max-cost ${request.max_cost:.2f} "
                f"({len(plans)} type(s) x {request.nodes} node(s) x {self.billed_hours(request):.2f} h"
                f"{', including an on-demand retry if spot capacity is lost' if request.spot else ''}). Nothing was launched.",
                "Raise --max-cost, profile fewer or cheaper --instance-types, lower --max-seconds/--time-cap, "
                "or see the breakdown with --dry-run.",
            )

    # ------------------------------------------------------------------ AWS helpers
    def resolve_ami(self, request: ProfileRequest) -> str:
        if request.ami:
            return request.ami
        images = self.ec2.describe_images(
            Owners=[self.ami_owner],
            Filters=[{"Name": "name", "Values": [self.ami_name_pattern]}, {"Name": "state", "Values": ["available"]}],
        ).get("Images", [])
        if not images:
            raise SriftyError(f"No AMI named like {self.ami_name_pattern!r} (owner {self.ami_owner}) in {self._region_of(request)}.",
                              "Pass --ami ami-... with PyTorch, Python 3.10+ and the AWS CLI installed.")
        return max(images, key=lambda im: (im.get("CreationDate", ""), im.get("Name", "")))["ImageId"]

    def zones(self) -> list[str]:
        resp = self.ec2.describe_availability_zones(Filters=[{"Name": "state", "Values": ["available"]}])
        return [z["ZoneName"] for z in resp.get("AvailabilityZones", []) if z.get("ZoneType", "availability-zone") == "availability-zone"]

    def ensure_bucket(self, request: ProfileRequest) -> S3Location:
        from botocore.exceptions import ClientError

        if request.s3_uri:
            return S3Location.parse(request.s3_uri)
        account = self.sts.get_caller_identity()["Account"]
        region = self._region_of(request)
        loc = S3Location(f"srifty-{account}-{region}", "srifty")
        try:
            self.s3.head_bucket(Bucket=loc.bucket)
            return loc
        except ClientError as exc:
            if _client_error_code(exc) not in ("404", "NoSuchBucket", "NotFound"):
                raise SriftyError(f"Cannot use the bucket {loc.bucket}: {exc}.",
                                  "Give a bucket you own with --s3-uri s3://bucket/prefix.") from None
        kwargs: dict[str, Any] = {"Bucket": loc.bucket, "ObjectOwnership": "BucketOwnerEnforced"}
        if region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
        self.s3.create_bucket(**kwargs)
        self.s3.put_public_access_block(Bucket=loc.bucket, PublicAccessBlockConfiguration={
            "BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True, "RestrictPublicBuckets": True})
        self.s3.put_bucket_encryption(Bucket=loc.bucket, ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
        self.log(f"created private bucket s3://{loc.bucket} (public access blocked, SSE-S3)")
        return loc

    def _put(self, loc: S3Location, key: str, body: bytes) -> None:
        self.s3.put_object(Bucket=loc.bucket, Key=key, Body=body, ServerSideEncryption="AES256")

    def upload_inputs(self, request: ProfileRequest, loc: S3Location, keys: dict[str, str]) -> None:
        self._put(loc, keys["source"], source_tarball())
        if request.script:
            self._put(loc, keys["script"], Path(request.script).read_bytes())
        req = self._requirements(request)
        if req and keys.get("requirements"):
            self._put(loc, keys["requirements"], Path(req).read_bytes())

    def terminate(self, ids: list[str]) -> None:
        ids = self.registry.alive(ids)
        if not ids:
            return
        for i in range(0, len(ids), 500):
            batch = ids[i:i + 500]
            self.ec2.terminate_instances(InstanceIds=batch)
            self.registry.mark_terminated(batch)

    def _launch(self, req: dict[str, Any], zones: list[str]) -> tuple[list[dict[str, Any]], str]:
        from botocore.exceptions import ClientError

        tried = []
        for zone in zones:
            if self._stop.is_set():
                raise KeyboardInterrupt
            try:
                resp = self.ec2.run_instances(**{**req, "Placement": {"AvailabilityZone": zone}})
            except ClientError as exc:
                if _client_error_code(exc) in CAPACITY_ERRORS:
                    tried.append(zone)
                    self.log(f"{req['InstanceType']}: no capacity in {zone}, trying the next zone")
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

    def _states(self, ids: list[str]) -> dict[str, str]:
        states: dict[str, str] = {}
        pages = self.ec2.get_paginator("describe_instances").paginate(InstanceIds=ids)
        for page in pages:
            for res in page.get("Reservations", []):
                for inst in res.get("Instances", []):
                    states[inst["InstanceId"]] = inst["State"]["Name"]
        return states

    def _object(self, loc: S3Location, key: str) -> bytes | None:
        from botocore.exceptions import ClientError

        try:
            return self.s3.get_object(Bucket=loc.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if _client_error_code(exc) in ("NoSuchKey", "404", "NotFound"):
                return None
            raise

    # ------------------------------------------------------------------ one instance type
    def _run_type(self, request: ProfileRequest, instance_type: str, run_id: str, loc: S3Location,
                  ami: str, zones: list[str], out: str | None) -> TypeResult:
        result = TypeResult(instance_type)
        spot = request.spot
        attempt = 1
        while True:
            plan = self.type_plan(request, instance_type, run_id, loc, ami, zones[0], attempt, spot)
            result.attempts.append(plan.market)
            ids: list[str] = []
            try:
                instances, zone = self._launch(plan.run_instances, zones)
                ids = [x["InstanceId"] for x in instances]
                ips = [x.get("PrivateIpAddress") for x in instances]
                if not all(ips):
                    ips = self._private_ips(ids)
                self._put(loc, plan.keys["rendezvous"], json.dumps(self.rendezvous_doc(ips, run_id)).encode())
                self.log(f"{instance_type}: launched {', '.join(ids)} in {zone} ({plan.market}), waiting for the profile")
                outcome = self._wait(request, plan, loc, ids, attempt)
            finally:
                self.terminate(ids)
            if outcome == "lost" and attempt == 1 and spot:
                self.log(f"{instance_type}: spot instance lost before the profile arrived; retrying once on-demand")
                spot, attempt = False, attempt + 1
                continue
            if outcome == "lost":
                raise ProfilingFailed(
                    f"The {instance_type} instance(s) {', '.join(ids)} stopped or were terminated before the profile arrived"
                    f"{' (after retrying on-demand)' if attempt > 1 else ''}.",
                    f"Their boot logs are under s3://{loc.bucket}/{plan.keys['logs']}/ if they got that far; "
                    "a spot run can be retried on-demand by dropping --spot.",
                )
            if outcome == "timeout":
                raise ProfilingFailed(
                    f"No profile from {instance_type} within the time cap of {self.time_cap(request):.0f} s; its instances were terminated.",
                    f"Raise --time-cap (or --max-seconds), and read the node logs under s3://{loc.bucket}/{plan.keys['logs']}/.",
                )
            if outcome.startswith("failed:"):
                raise ProfilingFailed(
                    f"Profiling on {instance_type} failed on the instance ({outcome[7:]}).",
                    f"The node logs are under s3://{loc.bucket}/{plan.keys['logs']}/.",
                )
            result.doc = self._collect(loc, plan, instance_type)
            result.path = self._out_path(request, out, instance_type)
            if result.path:
                profile.save(result.doc, result.path)
            if result.doc.get("status") == "partial":
                err = ProfilingFailed(f"The profile from {instance_type} is partial: {result.doc.get('partial_reason')}",
                                      "It is kept (marked partial).", partial_path=result.path)
                result.error = err
            return result

    def _private_ips(self, ids: list[str]) -> list[str]:
        waiter = self.ec2.get_waiter("instance_exists")
        waiter.wait(InstanceIds=ids, WaiterConfig={"Delay": max(1, int(self.poll_interval)), "MaxAttempts": 40})
        found: dict[str, str] = {}
        for page in self.ec2.get_paginator("describe_instances").paginate(InstanceIds=ids):
            for res in page["Reservations"]:
                for inst in res["Instances"]:
                    found[inst["InstanceId"]] = inst.get("PrivateIpAddress", "")
        return [found.get(i, "") for i in ids]

    def _wait(self, request: ProfileRequest, plan: TypePlan, loc: S3Location, ids: list[str], attempt: int) -> str:
        """Poll until the profile (or failure marker) arrives, the instances are lost, or time runs out."""
        deadline = time.monotonic() + self.time_cap(request) + self.boot_overhead_s
        while True:
            if self._stop.is_set():
                raise KeyboardInterrupt
            if self.on_poll is not None:
                self.on_poll(plan.instance_type, attempt)
            if self._object_exists(loc, plan.keys["profile"]):
                return "profile"
            failed = self._object(loc, plan.keys["failed"])
            if failed is not None:
                return "failed: " + failed.decode(errors="replace")[:300]
            states = self._states(ids)
            if any(states.get(i, "terminated") in LOST_STATES for i in ids):
                # the profile may have landed between the two checks
                return "profile" if self._object_exists(loc, plan.keys["profile"]) else "lost"
            if time.monotonic() > deadline:
                return "timeout"
            self.sleep(self.poll_interval)

    def _object_exists(self, loc: S3Location, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.s3.head_object(Bucket=loc.bucket, Key=key)
            return True
        except ClientError as exc:
            if _client_error_code(exc) in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    def _collect(self, loc: S3Location, plan: TypePlan, instance_type: str) -> dict[str, Any]:
        body = self._object(loc, plan.keys["profile"]) or b""
        source = f"s3://{loc.bucket}/{plan.keys['profile']}"
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise ProfilingFailed(f"The profile uploaded by {instance_type} ({source}) is not JSON: {exc}.",
                                  "The instance's srifty may be broken or a different version; read its node log next to it.") from None
        try:
            profile.validate(doc, source)
        except ProfileFormatError as exc:
            raise ProfilingFailed(f"The profile uploaded by {instance_type} is not a valid srifty profile: {exc.message}",
                                  "Check that the AMI's srifty matches this one (the launcher uploads its own source).") from None
        got = (doc.get("cluster") or {}).get("instance_types") or []
        if instance_type not in got:
            raise ProfilingFailed(f"The profile at {source} is for {', '.join(got) or 'no instance type'}, not {instance_type}.",
                                  "Another run may share this S3 prefix; use a fresh --s3-uri.")
        return doc

    @staticmethod
    def _out_path(request: ProfileRequest, out: str | None, instance_type: str) -> str | None:
        if not out:
            return None
        if len(request.instance_types) == 1:
            return out
        p = Path(out)
        stem = p.name[:-len(".profile.json")] if p.name.endswith(".profile.json") else p.stem
        return str(p.with_name(f"{stem}.{instance_type}.profile.json"))

    # ------------------------------------------------------------------ the whole run
    def profile(self, request: ProfileRequest, out: str | None, progress: ProgressFn | None = None) -> dict[str, Any]:
        if self.node_mode():
            return super().profile(request, out, progress)
        results = self.launch_all(request, out)
        done = [r for r in results if r.doc is not None]
        failed = [r for r in results if r.error is not None]
        for r in done:
            self.log(f"{r.instance_type}: profile written to {r.path}")
        if failed:
            msg = "; ".join(f"{r.instance_type}: {r.error.message}" for r in failed if r.error)
            kept = [r.path for r in done if r.path and r.doc and r.doc.get("status") == "complete"]
            raise ProfilingFailed(
                f"EC2 profiling did not complete for {len(failed)} of {len(results)} instance type(s): {msg}",
                (f"The other profiles were written: {', '.join(kept)}. " if kept else "")
                + "Every instance launched was terminated.",
                partial_path=next((r.path for r in done if r.path), None),
            )
        return done[0].doc  # type: ignore[return-value]

    def launch_all(self, request: ProfileRequest, out: str | None) -> list[TypeResult]:
        """Launch every type in parallel; terminate everything launched on every exit path."""
        self.validate(request)
        if not request.instance_profile:
            raise SriftyError(
                "--backend ec2 needs --instance-profile: the instances upload their profile to S3 with the role's "
                "credentials (srifty never puts keys in user data).",
                "Create one as docs/aws-permissions.md shows, then add --instance-profile srifty-profiler.")
        self._region = self._region_of(request)
        run_id = request.run_id or uuid.uuid4().hex[:12]
        plans = self.type_plans(request, run_id, None, request.ami, None)
        self.check_cost(request, plans)
        self._stop.clear()
        ami = self.resolve_ami(request)
        zones = self.zones()
        if not zones:
            raise SriftyError(f"No available zones in {self._region}.", "Check --region.")
        loc = self.ensure_bucket(request)
        self.upload_inputs(request, loc, self.type_plan(request, request.instance_types[0], run_id, loc, ami, zones[0], 1, request.spot).keys)
        self.log(f"srifty run {run_id}: {', '.join(request.instance_types)} in {self._region}; "
                 f"inputs at {loc.uri('runs', run_id)}; `srifty ec2 cleanup --run-id {run_id}` removes leftovers")
        results: dict[str, TypeResult] = {}
        pool = ThreadPoolExecutor(max_workers=len(request.instance_types), thread_name_prefix="srifty-ec2")
        futures: dict[Future[TypeResult], str] = {}
        try:
            for t in request.instance_types:
                futures[pool.submit(self._run_type, request, t, run_id, loc, ami, zones, out)] = t
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                for f in finished:
                    t = futures[f]
                    try:
                        results[t] = f.result()
                    except KeyboardInterrupt:
                        raise
                    except SriftyError as exc:
                        results[t] = TypeResult(t, error=exc)
                    except Exception as exc:  # an AWS error for one type: report it with the others
                        results[t] = TypeResult(t, error=ProfilingFailed(f"{type(exc).__name__}: {exc}"))
        except BaseException:
            self._stop.set()  # the other threads stop at their next poll
            raise
        finally:
            try:
                pool.shutdown(wait=True, cancel_futures=True)
            finally:
                left = self.registry.alive()
                if left:
                    self.log(f"terminating {len(left)} instance(s) of run {run_id}: {', '.join(left)}")
                    try:
                        self.terminate(left)
                    except Exception as exc:
                        raise SriftyError(f"Could not terminate {', '.join(left)}: {exc}.",
                                          f"Run `srifty ec2 cleanup --run-id {run_id} --region {self._region}` now.") from exc
        return [results[t] for t in request.instance_types]


# --------------------------------------------------------------------------- helpers


def source_tarball() -> bytes:
    """srifty's own source (the package and pyproject.toml) as a gzipped tar for pip install."""
    import srifty

    pkg = Path(srifty.__file__).resolve().parent
    root = pkg.parent
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        def skip(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            return None if "__pycache__" in info.name or info.name.endswith(".pyc") else info

        tar.add(str(pkg), arcname="srifty", filter=skip)
        if (root / "pyproject.toml").is_file():
            tar.add(str(root / "pyproject.toml"), arcname="pyproject.toml")
        if (root / "README.md").is_file():
            tar.add(str(root / "README.md"), arcname="README.md")
    return buf.getvalue()


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


def decode_user_data(b64: str) -> str:
    return base64.b64decode(b64).decode()

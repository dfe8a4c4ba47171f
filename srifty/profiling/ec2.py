"""The ``ec2`` profiling backend: profile a script on real EC2 instances, then terminate them.

``srifty profile SCRIPT --backend ec2 --instance-types g4dn.xlarge,g5.xlarge [--spot] [--nodes 2]``

Before anything is launched the launcher

1. collects the script's *project* (its git work tree, or its directory; see
   :mod:`srifty.profiling.project_bundle`) and checks its size,
2. prints the cost table and an "estimated cost" line, refuses above the cost limit
   (``--max-cost``, or ``ec2.max_cost`` in srifty's config file), and gets consent:
   ``--yes``, a confirmation on a terminal, or, off a terminal, a cost limit the estimate is
   under (:meth:`Ec2Backend.approve`).

Then, for each instance type (in parallel, one thread per type), it

1. uploads the project and srifty's own source to S3 under ``<prefix>/runs/<run-id>/``,
2. launches ``--nodes`` instances in one RunInstances call, tagged ``srifty:managed=true``,
   ``srifty:run-id=<run-id>`` and ``srifty:instance-type``; user data (no secrets) installs
   srifty, unpacks the project into ``/opt/srifty/project`` and runs ``srifty profile`` on
   the script there with the same measurement options,
3. writes ``rendezvous.json`` (the nodes' private IPs, first node = c10d rendezvous host)
   to the attempt's S3 prefix; each node finds its rank from its own IP in that list,
4. polls S3 for ``profile.json`` (or ``failed.json``), checks the instances' state between
   polls, and terminates the instances when the profile arrives, the run is lost, the time
   cap passes, or anything raises (Ctrl-C included).

Every instance launched is recorded in a registry as soon as RunInstances returns; the
launcher terminates everything in it on every exit path, and ``srifty ec2 cleanup`` finds
anything tagged by srifty that is still alive. While a run is under way only the first
Ctrl-C (or SIGTERM/SIGHUP) raises: later ones are counted, so that they cannot cut the
clean-up short (:class:`InterruptLatch`).

On the instance the same backend runs in *node mode* (``SRIFTY_EC2_NODE=1`` in the
environment): :meth:`Ec2Backend.plan` then returns one torchrun agent for this node with
c10d rendezvous on the first node's private IP.

boto3 is imported inside functions; clients are injectable (tests pass moto-backed ones).
The library never prompts: the CLI passes a ``confirm`` callable in the request.
"""

from __future__ import annotations

import base64
import io
import json
import os
import posixpath
import shlex
import signal
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
from srifty.errors import ProfileFormatError, ProfilingFailed, SriftyError, Terminated
from srifty.profiling.launcher import (
    LaunchPlan,
    ProfileRequest,
    ProfilingBackend,
    ProgressFn,
    WorkerCommand,
    worker_env,
)
from srifty.profiling.project_bundle import (
    DEFAULT_MAX_BYTES,
    INSTANCE_ROOT,
    MB,
    ProjectBundle,
    collect,
    unpack_command,
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


def time_cap(request: ProfileRequest) -> float:
    """Seconds an instance may run after boot before the launcher gives up on it."""
    if request.time_cap is not None:
        return float(request.time_cap)
    return request.startup_timeout + request.max_seconds + request.hang_timeout


def billed_hours(request: ProfileRequest, boot_overhead_s: float = BOOT_OVERHEAD_S) -> float:
    """The most hours one instance of an EC2 profile is billed for: the time cap plus boot."""
    return (time_cap(request) + boot_overhead_s) / 3600.0


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


@dataclass(frozen=True)
class RunSetup:
    """What every instance type of one run shares. In a dry run the AMI and zones are not
    looked up (None, []) and the bucket is a placeholder."""

    run_id: str
    loc: S3Location
    ami: str | None
    zones: list[str]
    bundle: ProjectBundle | None  # None with --collectives (srifty's own benchmark)
    placement_group: str | None = None  # the run's cluster placement group (--placement-group)


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


def config_path() -> Path:
    """srifty's config file: ``$XDG_CONFIG_HOME/srifty/config.yaml`` (``~/.config/...`` by default)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "srifty" / "config.yaml"


@dataclass(frozen=True)
class Ec2Config:
    """The ``ec2:`` section of srifty's config file, e.g. ``ec2: {max_cost: 20, max_bundle_mb: 100}``.

    ``max_cost`` is the default for ``--max-cost`` (a standing limit on what one run may
    cost); ``max_bundle_mb`` raises or lowers the cap on the project shipped to S3."""

    path: Path
    max_cost: float | None = None
    max_bundle_mb: float | None = None

    KEYS = ("max_cost", "max_bundle_mb")

    @classmethod
    def load(cls, path: Path | None = None) -> "Ec2Config":
        """Read the file (``yaml.safe_load`` only); a missing file is an empty config. Unknown keys
        under ``ec2:`` are errors: a misspelt ``max_cost`` must not silently lift the limit."""
        import yaml

        path = path or config_path()
        if not path.is_file():
            return cls(path)
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise SriftyError(f"Cannot read srifty's config file {path}: {exc}",
                              "Fix it (YAML, e.g. `ec2: {max_cost: 20}`) or move it away.") from None
        section = doc.get("ec2") if isinstance(doc, dict) else None
        if section is None:
            return cls(path)
        if not isinstance(section, dict) or set(section) - set(cls.KEYS):
            raise SriftyError(f"{path}: `ec2:` must be a mapping with the keys {', '.join(cls.KEYS)} "
                              f"(got {section!r}).", "For example: `ec2: {max_cost: 20}`.")
        values = {k: cls._positive(path, k, section.get(k)) for k in cls.KEYS}
        return cls(path, **values)

    @staticmethod
    def _positive(path: Path, key: str, value: Any) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise SriftyError(f"{path}: ec2.{key} must be a positive number (got {value!r}).")
        return float(value)


@dataclass(frozen=True)
class CostLimit:
    """The most a run may cost, and where that figure came from (for the messages)."""

    dollars: float
    source: str  # "--max-cost" or "ec2.max_cost in PATH"


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
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._ec2, self._s3, self._sts = ec2, s3, sts
        self._catalog = catalog
        self.poll_interval = poll_interval
        self.boot_overhead_s = boot_overhead_s
        self.ami_name_pattern = ami_name_pattern
        self.ami_owner = ami_owner
        self.on_poll = on_poll  # test hook: called at every poll with (instance type, attempt)
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.registry = InstanceRegistry()
        self._region: str | None = None
        self.run_id: str | None = None  # the run launch_all started last
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
            market = "spot" if request.spot else "on-demand"
            return LaunchPlan(self.name, [], run_dir, [f"{t}: {request.nodes} x {market}" for t in request.instance_types])
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
        if request.collectives and request.nodes > 1 and request.world_sizes and len(request.world_sizes) > 1:
            raise SriftyError("--collectives across --nodes runs one world size: every node runs the same workers.",
                              "Give one --world-sizes figure (workers per node), or none for every GPU of the node.")
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
        return time_cap(request)

    def billed_hours(self, request: ProfileRequest) -> float:
        return billed_hours(request, self.boot_overhead_s)

    def _nproc(self, request: ProfileRequest, instance_type: str) -> int:
        it = self.catalog.get(instance_type)
        return it.gpu_count if it.gpu_count else request.nproc

    def _price(self, request: ProfileRequest, instance_type: str, spot: bool) -> float | None:
        from srifty.catalog import Market

        market = Market.SPOT if spot else Market.ON_DEMAND
        return self.catalog.price(instance_type, market, self._region_of(request))

    def type_plans(self, request: ProfileRequest, setup: RunSetup) -> list[TypePlan]:
        return [self.type_plan(request, t, setup, 1, request.spot) for t in request.instance_types]

    def type_plan(self, request: ProfileRequest, instance_type: str, setup: RunSetup, attempt: int,
                  spot: bool) -> TypePlan:
        loc, run_id = setup.loc, setup.run_id
        attempt_dir = f"runs/{run_id}/{instance_type}/attempt-{attempt}"
        requirements = self._requirements(request, setup.bundle)
        keys = {
            "source": loc.key(f"runs/{run_id}/srifty-src.tar.gz"),
            "project": loc.key(f"runs/{run_id}/project.tar.gz") if setup.bundle else "",
            # a requirements file inside the project is installed from there; another one is uploaded
            "requirements": (loc.key(f"runs/{run_id}/requirements.txt")
                             if requirements and not self._shipped_in(setup.bundle, requirements) else ""),
            "rendezvous": loc.key(attempt_dir, "rendezvous.json"),
            "profile": loc.key(attempt_dir, "profile.json"),
            "failed": loc.key(attempt_dir, "failed.json"),
            "logs": loc.key(attempt_dir, "logs"),
        }
        nproc = self._nproc(request, instance_type)
        market = "spot" if spot else "on-demand"
        user_data = self.user_data(request, instance_type, setup, keys, nproc, market)
        tags = [
            {"Key": TAG_MANAGED, "Value": "true"},
            {"Key": TAG_RUN_ID, "Value": run_id},
            {"Key": TAG_TYPE, "Value": instance_type},
            {"Key": TAG_ATTEMPT, "Value": str(attempt)},
            {"Key": "Name", "Value": f"srifty-{run_id}-{instance_type}"},
        ]
        req: dict[str, Any] = {
            "ImageId": setup.ami or f"<newest image named {self.ami_name_pattern!r} owned by {self.ami_owner}>",
            "InstanceType": instance_type,
            "MinCount": request.nodes,
            "MaxCount": request.nodes,
            "UserData": user_data,
            "InstanceInitiatedShutdownBehavior": "terminate",
            "Placement": {"AvailabilityZone": setup.zones[0] if setup.zones else "<first zone of DescribeAvailabilityZones>",
                          **({"GroupName": setup.placement_group or placement_group_name(run_id)}
                             if request.placement_group else {})},
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
    def _requirements(request: ProfileRequest, bundle: ProjectBundle | None) -> Path | None:
        """--requirements; else requirements.txt next to the script; else one at the project root."""
        if request.requirements:
            return Path(request.requirements).resolve()
        if not request.script:
            return None
        candidates = [Path(request.script).resolve().parent / "requirements.txt"]
        if bundle is not None:
            candidates.append(bundle.root / "requirements.txt")
        return next((c for c in candidates if c.is_file()), None)

    @staticmethod
    def _shipped_in(bundle: ProjectBundle | None, path: Path) -> bool:
        if bundle is None:
            return False
        rel = bundle.relative(path)
        return rel is not None and bundle.contains(rel)

    def project(self, request: ProfileRequest, config: Ec2Config) -> ProjectBundle | None:
        """The script's project, as it will be shipped (None for --collectives: srifty's own benchmark)."""
        if request.collectives or not request.script:
            return None
        limit = int(config.max_bundle_mb * MB) if config.max_bundle_mb else DEFAULT_MAX_BYTES
        req = self._requirements(request, None)  # shipped even if git ignores it, when inside the project
        return collect(request.script, always=(req,) if req else (), max_bytes=limit)

    def user_data(self, request: ProfileRequest, instance_type: str, setup: RunSetup, keys: dict[str, str],
                  nproc: int, market: str) -> str:
        """The boot script: no credentials in it; S3 access comes from the instance profile."""
        q = shlex.quote
        s3 = lambda key: q(f"s3://{setup.loc.bucket}/{key}")  # noqa: E731
        region, run_id = self._region_of(request), setup.run_id
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
            "mkdir -p /opt/srifty && cd /opt/srifty",
            "TOKEN=$(curl -s -X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 600')",
            "MYIP=$(curl -s -H \"X-aws-ec2-metadata-token: $TOKEN\" http://169.254.169.254/latest/meta-data/local-ipv4)",
            f"until aws s3 cp {s3(keys['rendezvous'])} rendezvous.json; do sleep 5; done",
            "NODE_RANK=$(python3 -c \"import json,sys; print(json.load(open('rendezvous.json'))['node_ips'].index(sys.argv[1]))\" \"$MYIP\")",
            "fail() { [ \"$NODE_RANK\" = 0 ] && printf '{\"stage\": \"%s\"}' \"$1\" > failed.json && "
            f"aws s3 cp failed.json {s3(keys['failed'])}; "
            f"aws s3 cp /var/log/srifty-user-data.log {s3(keys['logs'])}/node$NODE_RANK.log; shutdown -h now; exit 1; }}",
            f"aws s3 cp {s3(keys['source'])} src.tar.gz && {unpack_command('src.tar.gz', 'src')} || fail download",
            "python3 -m venv --system-site-packages venv && venv/bin/pip install -q ./src || fail install",
        ]
        if setup.bundle is not None:
            lines.append(f"aws s3 cp {s3(keys['project'])} project.tar.gz && "
                         f"{unpack_command('project.tar.gz')} || fail download-project")
        lines += self._requirements_lines(request, setup.bundle, keys, s3)
        lines += [
            "export SRIFTY_EC2_NODE=1 SRIFTY_EC2_NODE_RANK=$NODE_RANK",
            "export SRIFTY_EC2_NNODES=$(python3 -c \"import json; print(len(json.load(open('rendezvous.json'))['node_ips']))\")",
            "export SRIFTY_EC2_MASTER=$(python3 -c \"import json; print(json.load(open('rendezvous.json'))['master_addr'])\")",
            "export SRIFTY_EC2_NODE_IPS=$(python3 -c \"import json; print(','.join(json.load(open('rendezvous.json'))['node_ips']))\")",
            f"export SRIFTY_EC2_RDZV_ID={q(run_id)} SRIFTY_EC2_REGION={q(region)} SRIFTY_EC2_MARKET={q(market)}",
            f"{self._profile_command(request, instance_type, setup.bundle, nproc)}; STATUS=$?",
            "if [ \"$NODE_RANK\" = 0 ]; then",
            f"  if [ -s /opt/srifty/profile.json ]; then aws s3 cp /opt/srifty/profile.json {s3(keys['profile'])} --sse AES256;",
            "  else printf '{\"stage\": \"profile\", \"status\": %s}' \"$STATUS\" > failed.json; "
            f"aws s3 cp failed.json {s3(keys['failed'])}; fi",
            "fi",
            f"aws s3 cp /var/log/srifty-user-data.log {s3(keys['logs'])}/node$NODE_RANK.log",
            "shutdown -h now",
        ]
        return "\n".join(lines) + "\n"

    def _requirements_lines(self, request: ProfileRequest, bundle: ProjectBundle | None, keys: dict[str, str],
                            s3: Callable[[str], str]) -> list[str]:
        """Install the requirements: in place when the file is in the project (its ``-r other.txt``
        and ``./pkg`` lines then resolve as they do here), else from its uploaded copy."""
        req = self._requirements(request, bundle)
        if req is None:
            return []
        pip = "/opt/srifty/venv/bin/pip install -q -r"
        rel = bundle.relative(req) if bundle is not None else None
        if keys.get("requirements") or rel is None:
            return [f"aws s3 cp {s3(keys['requirements'])} requirements.txt && {pip} requirements.txt || fail requirements"]
        folder, name = posixpath.split(rel)
        where = posixpath.join(INSTANCE_ROOT, folder) if folder else INSTANCE_ROOT
        return [f"(cd {shlex.quote(where)} && {pip} {shlex.quote(name)}) || fail requirements"]

    def _profile_command(self, request: ProfileRequest, instance_type: str, bundle: ProjectBundle | None,
                         nproc: int) -> str:
        """``srifty profile`` as the node runs it: in the project, from where it was started here."""
        q = shlex.quote
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
        if bundle is None:  # --collectives
            opts += ["--collectives", "--world-sizes", ",".join(map(str, request.world_sizes or [nproc])),
                     "--max-bytes", str(request.max_bytes), "--repeats", str(request.repeats)]
            return " ".join(q(x) for x in ["/opt/srifty/venv/bin/srifty", "profile", *opts])
        cwd, script = bundle.run_location()
        cmd = " ".join(q(x) for x in ["/opt/srifty/venv/bin/srifty", "profile", script, *opts])
        if request.script_args:
            cmd += " -- " + " ".join(q(a) for a in request.script_args)
        return f"(mkdir -p {q(cwd)} && cd {q(cwd)} && {cmd})"

    # ------------------------------------------------------------------ dry run
    def dry_run(self, request: ProfileRequest) -> str:
        if self.node_mode():
            return super().dry_run(request)
        self.validate(request)
        config = Ec2Config.load()
        region = self._region_of(request)
        setup = RunSetup("<run-id>", self._planned_loc(request), request.ami, [], self.project(request, config))
        plans = self.type_plans(request, setup)
        hours = self.billed_hours(request)
        doc = {
            "backend": "ec2",
            "region": region,
            "s3": request.s3_uri or f"s3://srifty-<account-id>-{region}/srifty (created private)",
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
        if setup.bundle is not None:
            lines += ["", f"# {setup.bundle.describe()}", *(f"# {n}" for n in setup.bundle.notes())]
        if not request.instance_profile:
            lines += ["", "# note: a real launch needs --instance-profile (the instances' S3 access; see docs/aws-permissions.md)"]
        lines += ["", self.cost_table(request, plans), f"# {self.cost_line(request, plans)}",
                  f"# {self.consent_note(request, plans, self.cost_limit(request, config))}"]
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

    def cost_line(self, request: ProfileRequest, plans: list[TypePlan]) -> str:
        """The one line every launch prints before it asks: both figures bill the whole time cap."""
        planned, worst = self.estimate(request, plans)
        count = f"{sum(p.nodes for p in plans)} instance(s), at most {self.billed_hours(request):.2f} h each"
        if planned is None or worst is None:
            return f"estimated cost unknown (the catalog lacks a price): {count}"
        return f"estimated cost ${planned:.2f} (worst case ${worst:.2f}): {count}"

    def cost_limit(self, request: ProfileRequest, config: Ec2Config) -> CostLimit | None:
        """--max-cost, else ec2.max_cost from the config file, else none."""
        if request.max_cost is not None:
            return CostLimit(request.max_cost, "--max-cost")
        if config.max_cost is not None:
            return CostLimit(config.max_cost, f"ec2.max_cost in {config.path}")
        return None

    def check_cost(self, request: ProfileRequest, plans: list[TypePlan], limit: CostLimit | None) -> None:
        """Refuse, before any AWS call, a run whose worst case is above the limit (or unknown)."""
        if limit is None:
            return
        planned, worst = self.estimate(request, plans)
        if worst is None:
            raise SriftyError(f"{limit.source} cannot be enforced: the catalog has no price for some of the instance types.",
                              "Run `srifty catalog refresh`, or lift the limit and launch with --yes.")
        if worst > limit.dollars:
            raise SriftyError(
                f"This run could cost up to ${worst:.2f}, above {limit.source} ${limit.dollars:.2f} "
                f"({len(plans)} type(s) x {request.nodes} node(s) x {self.billed_hours(request):.2f} h"
                f"{', including an on-demand retry if spot capacity is lost' if request.spot else ''}). Nothing was launched.",
                "Raise --max-cost, profile fewer or cheaper --instance-types, lower --max-seconds/--time-cap, "
                "or see the breakdown with --dry-run.",
            )

    def approve(self, request: ProfileRequest, plans: list[TypePlan], config: Ec2Config) -> None:
        """Every real launch prints its cost and has consent before any AWS call.

        Above the cost limit: refused. Then ``--yes`` is consent; else, with someone to ask
        (``request.confirm``, which the CLI sets when stdin is a terminal), their answer;
        else (scripts, CI) a cost limit the estimate is under, given as --max-cost or in the
        config file, is the consent: the user set the most they will pay. Nothing at all:
        refused, since nobody agreed to the spend."""
        self.log(self.cost_table(request, plans))
        self.log(self.cost_line(request, plans))
        limit = self.cost_limit(request, config)
        self.check_cost(request, plans, limit)
        if request.yes:
            return
        if request.confirm is not None:
            if request.confirm(self._launch_question(request, plans)):
                return
            raise SriftyError("Not confirmed: nothing was launched.")
        if limit is not None:
            return
        planned, worst = self.estimate(request, plans)
        cost = "an unknown cost" if planned is None else f"an estimated ${planned:.2f} (worst case ${worst:.2f})"
        raise SriftyError(
            f"Launching {sum(p.nodes for p in plans)} EC2 instance(s) for {cost} needs consent, and stdin is not "
            "a terminal to ask on. Nothing was launched.",
            f"Add --yes to launch it, or --max-cost DOLLARS (or `ec2: {{max_cost: DOLLARS}}` in {config.path}) "
            "to launch only runs estimated below it.",
        )

    def _launch_question(self, request: ProfileRequest, plans: list[TypePlan]) -> str:
        _, worst = self.estimate(request, plans)
        cost = "an unknown cost" if worst is None else f"up to ${worst:.2f}"
        what = ", ".join(f"{p.nodes} x {p.instance_type} ({p.market})" for p in plans)
        return f"Launch {what} in {self._region_of(request)}, for {cost}?"

    def consent_note(self, request: ProfileRequest, plans: list[TypePlan], limit: CostLimit | None) -> str:
        """For the dry run: what a real launch of this plan would need."""
        if limit is None:
            return ("no cost limit: a launch asks to confirm on a terminal, and needs --yes (or a --max-cost) "
                    "elsewhere")
        _, worst = self.estimate(request, plans)
        if worst is None or worst > limit.dollars:
            return f"cost limit ${limit.dollars:.2f} ({limit.source}): a launch would be refused"
        return (f"cost limit ${limit.dollars:.2f} ({limit.source}): the estimate is under it; a launch asks to "
                "confirm on a terminal (unless --yes) and goes ahead elsewhere")

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

    def upload_inputs(self, request: ProfileRequest, setup: RunSetup, keys: dict[str, str]) -> None:
        """srifty's source, the project (its notes logged: what was left out, and why), and a
        requirements file from outside the project."""
        self._put(setup.loc, keys["source"], source_tarball())
        if setup.bundle is not None:
            tarball = setup.bundle.tarball()
            self._put(setup.loc, keys["project"], tarball)
            self.log(f"{setup.bundle.describe()} ({len(tarball) / MB:.1f} MB compressed)")
            for note in setup.bundle.notes():
                self.log(note)
        req = self._requirements(request, setup.bundle)
        if req and keys.get("requirements"):
            self._put(setup.loc, keys["requirements"], req.read_bytes())

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
                resp = self.ec2.run_instances(**{**req, "Placement": {**req.get("Placement", {}), "AvailabilityZone": zone}})
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
    def _run_type(self, request: ProfileRequest, instance_type: str, setup: RunSetup, out: str | None) -> TypeResult:
        result = TypeResult(instance_type)
        loc, run_id = setup.loc, setup.run_id
        spot = request.spot
        attempt = 1
        while True:
            plan = self.type_plan(request, instance_type, setup, attempt, spot)
            result.attempts.append(plan.market)
            ids: list[str] = []
            try:
                instances, zone = self._launch(plan.run_instances, setup.zones)
                ids = [x["InstanceId"] for x in instances]
                ips: list[str] = [x.get("PrivateIpAddress") or "" for x in instances]
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
        """The private IPs RunInstances did not return: polled, since a new instance may not be
        visible to DescribeInstances at once, and given up as soon as the run is stopped."""
        from botocore.exceptions import ClientError

        for _ in range(40):
            found: dict[str, str] = {}
            try:
                for page in self.ec2.get_paginator("describe_instances").paginate(InstanceIds=ids):
                    for res in page["Reservations"]:
                        for inst in res["Instances"]:
                            found[inst["InstanceId"]] = inst.get("PrivateIpAddress", "")
            except ClientError as exc:
                if _client_error_code(exc) != "InvalidInstanceID.NotFound":
                    raise
            if all(found.get(i) for i in ids):
                return [found[i] for i in ids]
            if self._stop.wait(self.poll_interval):
                raise KeyboardInterrupt
        raise ProfilingFailed(f"The instances {', '.join(ids)} got no private IP address.",
                              "Check the subnet of the default VPC; they were terminated.")

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
            self._stop.wait(self.poll_interval)  # wakes at once when the run is stopped

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
        try:
            results = self.launch_all(request, out)
        except KeyboardInterrupt as exc:  # the clean-up has run: say so, as the local backend does
            raise self._interrupted(exc) from None
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

    def _interrupted(self, exc: KeyboardInterrupt) -> ProfilingFailed:
        """Ctrl-C or SIGTERM/SIGHUP, after the clean-up: a ProfilingFailed that exits 128 + the
        signal's number, like an interrupted local run (click would print a bare "Aborted.")."""
        signum = int(getattr(exc, "signum", signal.SIGINT))
        what = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        launched, left = self.registry.launched, self.registry.alive()
        if not launched:
            outcome = "nothing had been launched"
        elif not left:
            outcome = f"all {len(launched)} instance(s) it launched were terminated"
        else:
            outcome = f"{len(left)} instance(s) may still run: {', '.join(left)}"
        err = ProfilingFailed(f"EC2 profiling was interrupted ({what}): {outcome}.",
                              f"`srifty ec2 cleanup --run-id {self.run_id}` finds anything left." if launched else None)
        err.exit_code = 128 + signum
        return err

    def launch_all(self, request: ProfileRequest, out: str | None) -> list[TypeResult]:
        """Check, get consent, prepare, and profile every type in parallel. Every instance launched
        is terminated on every exit path, however many times Ctrl-C is pressed."""
        self.validate(request)
        if not request.instance_profile:
            raise SriftyError(
                "--backend ec2 needs --instance-profile: the instances upload their profile to S3 with the role's "
                "credentials (srifty never puts keys in user data).",
                "Create one as docs/aws-permissions.md shows, then add --instance-profile srifty-profiler.")
        self._region = self._region_of(request)
        config = Ec2Config.load()
        run_id = self.run_id = request.run_id or uuid.uuid4().hex[:12]
        bundle = self.project(request, config)
        draft = RunSetup(run_id, self._planned_loc(request), request.ami, [], bundle)
        self.approve(request, self.type_plans(request, draft), config)
        self._stop.clear()
        with InterruptLatch() as latch:
            setup = self._prepare(request, run_id, bundle)
            return self._run_types(request, setup, out, latch)

    def _planned_loc(self, request: ProfileRequest) -> S3Location:
        """--s3-uri, or the bucket srifty would create (the account id is not looked up to plan)."""
        if request.s3_uri:
            return S3Location.parse(request.s3_uri)
        return S3Location(f"srifty-<account-id>-{self._region_of(request)}", "srifty")

    def _prepare(self, request: ProfileRequest, run_id: str, bundle: ProjectBundle | None) -> RunSetup:
        """The AMI, the zones, the bucket, and the inputs uploaded: nothing is launched yet."""
        ami = self.resolve_ami(request)
        zones = self.zones()
        if not zones:
            raise SriftyError(f"No available zones in {self._region}.", "Check --region.")
        setup = RunSetup(run_id, self.ensure_bucket(request), ami, zones, bundle,
                         self.create_placement_group(run_id) if request.placement_group else None)
        self.upload_inputs(request, setup, self.type_plan(request, request.instance_types[0], setup, 1, request.spot).keys)
        self.log(f"srifty run {run_id}: {', '.join(request.instance_types)} in {self._region}; "
                 f"inputs at {setup.loc.uri('runs', run_id)}; `srifty ec2 cleanup --run-id {run_id}` removes leftovers")
        return setup

    def _run_types(self, request: ProfileRequest, setup: RunSetup, out: str | None,
                   latch: InterruptLatch) -> list[TypeResult]:
        """One thread per type. However the wait ends (all done, an error, Ctrl-C), the threads are
        stopped and waited for and every instance still alive is terminated (:meth:`_finish`)."""
        pool = ThreadPoolExecutor(max_workers=len(request.instance_types), thread_name_prefix="srifty-ec2")
        futures: dict[Future[TypeResult], str] = {}
        try:
            for t in request.instance_types:
                futures[pool.submit(self._run_type, request, t, setup, out)] = t
            results = self._gather(futures)
        except BaseException:
            self._stop.set()  # the other threads stop at their next poll
            raise
        finally:
            self._finish(pool, list(futures), setup, latch)
        return [results[t] for t in request.instance_types]

    @staticmethod
    def _gather(futures: dict[Future[TypeResult], str]) -> dict[str, TypeResult]:
        """Each type's result as it comes; one type's error is reported with the others'."""
        results: dict[str, TypeResult] = {}
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
        return results

    def _finish(self, pool: ThreadPoolExecutor, futures: list[Future[TypeResult]], setup: RunSetup,
                latch: InterruptLatch) -> None:
        """Wait for every thread, then terminate every instance still alive; runs to its end.

        The latch keeps later signals from raising. The only one that can still raise here is
        the first, when the run had ended without one: it is held until the clean-up is done."""
        held: KeyboardInterrupt | None = None
        while True:
            try:
                self._wait_threads(futures, setup, latch)
                pool.shutdown(wait=True)  # the threads have returned: nothing left for exit to join
                self._terminate_left(setup)
                self._delete_placement_group(setup)
                break
            except KeyboardInterrupt as exc:
                held = held or exc
                self._stop.set()
        if held is not None:
            raise held

    def _wait_threads(self, futures: list[Future[TypeResult]], setup: RunSetup, latch: InterruptLatch) -> None:
        """Until every type's thread has returned (one in an AWS call returns when the call does);
        each further Ctrl-C meanwhile is answered with what srifty is waiting for."""
        seen = latch.count
        pending = {f for f in futures if not f.done()}
        while pending:
            _, pending = wait(pending, timeout=0.25)
            if latch.count > seen:
                seen = latch.count
                self.log(f"Still stopping run {setup.run_id}: waiting for {len(pending)} instance type(s) to stop, "
                         "then terminating every instance launched. To abandon that, kill srifty (Ctrl-\\) and run "
                         f"`srifty ec2 cleanup --run-id {setup.run_id} --region {self._region}`.")

    def create_placement_group(self, run_id: str) -> str:
        """The run's cluster placement group (tagged as srifty's, so `srifty ec2 cleanup` finds it)."""
        name = placement_group_name(run_id)
        self.ec2.create_placement_group(GroupName=name, Strategy="cluster", TagSpecifications=[{
            "ResourceType": "placement-group",
            "Tags": [{"Key": TAG_MANAGED, "Value": "true"}, {"Key": TAG_RUN_ID, "Value": run_id}]}])
        self.log(f"created cluster placement group {name}")
        return name

    def _delete_placement_group(self, setup: RunSetup) -> None:
        """Delete the run's placement group once its instances are gone (a group holding instances
        cannot be deleted). A group left behind costs nothing; `srifty ec2 cleanup` removes it."""
        if not setup.placement_group:
            return
        try:
            launched = self.registry.launched
            if launched:
                self.ec2.get_waiter("instance_terminated").wait(
                    InstanceIds=launched, WaiterConfig={"Delay": max(self.poll_interval, 0.05), "MaxAttempts": 120})
            self.ec2.delete_placement_group(GroupName=setup.placement_group)
            self.log(f"deleted placement group {setup.placement_group}")
        except Exception as exc:  # noqa: BLE001 - the instances are terminated; the group is free
            self.log(f"could not delete placement group {setup.placement_group} ({exc}); "
                     f"`srifty ec2 cleanup --run-id {setup.run_id}` removes it")

    def _terminate_left(self, setup: RunSetup) -> None:
        left = self.registry.alive()
        if not left:
            return
        self.log(f"terminating {len(left)} instance(s) of run {setup.run_id}: {', '.join(left)}")
        try:
            self.terminate(left)
        except Exception as exc:
            raise SriftyError(f"Could not terminate {', '.join(left)}: {exc}.",
                              f"Run `srifty ec2 cleanup --run-id {setup.run_id} --region {self._region}` now.") from exc


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


def placement_group_name(run_id: str) -> str:
    return f"srifty-{run_id}"


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


def decode_user_data(b64: str) -> str:
    return base64.b64decode(b64).decode()

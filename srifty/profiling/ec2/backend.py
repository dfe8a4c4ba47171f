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

:class:`Ec2Backend` checks, plans and sequences; the work is done by its collaborators: the
cost and consent (``cost``), the S3 staging (``staging``), the instances (``instances``), the
run's threads and clean-up (``run``), the user data (``userdata``) and node mode (``node``).
boto3 is imported inside functions; clients are injectable (tests pass moto-backed ones).
The library never prompts: the CLI passes a ``confirm`` callable in the request.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import uuid
from typing import Any, Callable

from srifty.errors import ProfilingFailed, SriftyError
from srifty.profiling.ec2.aws import AwsClients
from srifty.profiling.ec2.config import BOOT_OVERHEAD_S, CostLimit, Ec2Config, billed_hours, cost_limit, time_cap
from srifty.profiling.ec2.cost import CostEstimate
from srifty.profiling.ec2.groups import create_placement_group
from srifty.profiling.ec2.instances import (DEFAULT_AMI_OWNER, DEFAULT_AMI_PATTERN, InstanceRegistry, Instances,
                                            InterruptLatch)
from srifty.profiling.ec2.node import node_cluster_block, node_mode, node_plan, rendezvous_doc
from srifty.profiling.ec2.plans import RunSetup, TypePlan, TypeResult, object_keys, run_instances_request
from srifty.profiling.ec2.run import TypeRuns
from srifty.profiling.ec2.staging import S3Location, S3Staging, project_bundle
from srifty.profiling.ec2.userdata import user_data
from srifty.profiling.launcher import LaunchPlan, ProfileRequest, ProfilingBackend, ProgressFn
from srifty.profiling.project_bundle import ProjectBundle

_STDERR_LOCK = threading.Lock()


def log_line(msg: str) -> None:
    """One line on stderr, written whole: each instance type's run logs from its own thread, and
    print() writes a line and its newline apart, so two lines could run together."""
    with _STDERR_LOCK:
        sys.stderr.write(msg + "\n")
        sys.stderr.flush()


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
        self.clients = AwsClients(ec2, s3, sts)  # lazily created from the standard boto3 credential chain
        self._catalog = catalog
        self.poll_interval = poll_interval
        self.boot_overhead_s = boot_overhead_s
        self.ami_name_pattern = ami_name_pattern
        self.ami_owner = ami_owner
        self.on_poll = on_poll  # test hook: called at every poll with (instance type, attempt)
        self.log = log or log_line
        self.registry = InstanceRegistry()
        self.run_id: str | None = None  # the run launch_all started last
        self._stop = threading.Event()
        self.instances = Instances(self.clients, self.registry, self._stop, lambda msg: self.log(msg))
        self.staging = S3Staging(self.clients, lambda msg: self.log(msg))

    @property
    def ec2(self) -> Any:
        return self.clients.ec2

    @property
    def s3(self) -> Any:
        return self.clients.s3

    @property
    def sts(self) -> Any:
        return self.clients.sts

    @property
    def catalog(self) -> Any:
        if self._catalog is None:
            from srifty.catalog import Catalog

            self._catalog = Catalog.default()
        return self._catalog

    # ------------------------------------------------------------------ node mode (on the instance)
    @staticmethod
    def node_mode() -> bool:
        return node_mode()

    def plan(self, request: ProfileRequest, run_dir: str) -> LaunchPlan:
        """On an instance (node mode): this node's torchrun agent. Elsewhere: the launch plan as notes."""
        if not self.node_mode():
            market = "spot" if request.spot else "on-demand"
            return LaunchPlan(self.name, [], run_dir, [f"{t}: {request.nodes} x {market}" for t in request.instance_types])
        return node_plan(self.name, request, run_dir)

    def cluster_block(self, request: ProfileRequest, world_size: int, device: str) -> dict[str, Any]:
        return node_cluster_block(self.name, request, world_size, device)

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
        keys = object_keys(request, instance_type, setup, attempt)
        nproc = self._nproc(request, instance_type)
        market = "spot" if spot else "on-demand"
        boot_script = self.user_data(request, instance_type, setup, keys, nproc, market)
        req = run_instances_request(request, instance_type, setup, attempt, spot, boot_script,
                                    self.ami_name_pattern, self.ami_owner)
        return TypePlan(instance_type, market, request.nodes, nproc, self._price(request, instance_type, spot),
                        req, boot_script, keys)

    def project(self, request: ProfileRequest, config: Ec2Config) -> ProjectBundle | None:
        """The script's project, as it will be shipped (None for --collectives: srifty's own benchmark)."""
        return project_bundle(request, config)

    def user_data(self, request: ProfileRequest, instance_type: str, setup: RunSetup, keys: dict[str, str],
                  nproc: int, market: str) -> str:
        """The boot script: no credentials in it; S3 access comes from the instance profile."""
        return user_data(request, instance_type, setup, keys, nproc, market, self._region_of(request),
                         self.time_cap(request), self.boot_overhead_s)

    # ------------------------------------------------------------------ dry run
    def dry_run(self, request: ProfileRequest) -> str:
        if self.node_mode():
            return super().dry_run(request)
        self.validate(request)
        config = Ec2Config.load()
        region = self._region_of(request)
        subnets, groups = self._network_ids(request, config)
        setup = RunSetup("<run-id>", self._planned_loc(request), request.ami, [], self.project(request, config),
                         subnet_ids=subnets, security_group_ids=groups)
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
        return rendezvous_doc(ips, run_id)

    # ------------------------------------------------------------------ cost and consent (cost.CostEstimate)
    def _costs(self, request: ProfileRequest, plans: list[TypePlan]) -> CostEstimate:
        return CostEstimate(request, plans, self._region_of(request), self.billed_hours(request),
                            self.time_cap(request), self.boot_overhead_s,
                            lambda instance_type: self._price(request, instance_type, False))

    def estimate(self, request: ProfileRequest, plans: list[TypePlan]) -> tuple[float | None, float | None]:
        """(planned cost, worst case including the on-demand retry after a lost spot run)."""
        return self._costs(request, plans).estimate()

    def cost_table(self, request: ProfileRequest, plans: list[TypePlan]) -> str:
        return self._costs(request, plans).table()

    def cost_line(self, request: ProfileRequest, plans: list[TypePlan]) -> str:
        """The one line every launch prints before it asks: both figures bill the whole time cap."""
        return self._costs(request, plans).line()

    def cost_limit(self, request: ProfileRequest, config: Ec2Config) -> CostLimit | None:
        """--max-cost, else ec2.max_cost from the config file, else none."""
        return cost_limit(request, config)

    def check_cost(self, request: ProfileRequest, plans: list[TypePlan], limit: CostLimit | None) -> None:
        """Refuse, before any AWS call, a run whose worst case is above the limit (or unknown)."""
        self._costs(request, plans).check(limit)

    def approve(self, request: ProfileRequest, plans: list[TypePlan], config: Ec2Config) -> None:
        """Every real launch prints its cost and has consent before any AWS call (:meth:`CostEstimate.approve`)."""
        self._costs(request, plans).approve(config, self.log)

    def consent_note(self, request: ProfileRequest, plans: list[TypePlan], limit: CostLimit | None) -> str:
        """For the dry run: what a real launch of this plan would need."""
        return self._costs(request, plans).consent_note(limit)

    # ------------------------------------------------------------------ AWS (instances, staging, groups)
    def resolve_ami(self, request: ProfileRequest) -> str:
        return self.instances.resolve_ami(request, self.ami_name_pattern, self.ami_owner, self._region_of(request))

    def zones(self) -> list[str]:
        return self.instances.zones()

    def ensure_bucket(self, request: ProfileRequest) -> S3Location:
        return self.staging.ensure_bucket(request, self._region_of(request))

    def upload_inputs(self, request: ProfileRequest, setup: RunSetup, keys: dict[str, str]) -> None:
        """srifty's source, the project (its notes logged: what was left out, and why), and a
        requirements file from outside the project."""
        self.staging.upload_inputs(request, setup.loc, setup.bundle, keys)

    def terminate(self, ids: list[str]) -> None:
        self.instances.terminate(ids)

    def create_placement_group(self, run_id: str) -> str:
        """The run's cluster placement group (tagged as srifty's, so `srifty ec2 cleanup` finds it)."""
        return create_placement_group(self.ec2, run_id, self.log)

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
        self.clients.region = self._region_of(request)
        config = Ec2Config.load()
        run_id = self.run_id = request.run_id or uuid.uuid4().hex[:12]
        bundle = self.project(request, config)
        subnets, groups = self._network_ids(request, config)
        draft = RunSetup(run_id, self._planned_loc(request), request.ami, [], bundle,
                         subnet_ids=subnets, security_group_ids=groups)
        self.approve(request, self.type_plans(request, draft), config)
        self._stop.clear()
        with InterruptLatch() as latch:
            setup = self._prepare(request, run_id, bundle, subnets, groups)
            return self._type_runs(request, setup, out).run(latch)

    @staticmethod
    def _network_ids(request: ProfileRequest, config: Ec2Config) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(subnets, security groups): --subnet-ids / --security-group-ids, else the config file's."""
        return (tuple(request.subnet_ids) or config.subnet_ids,
                tuple(request.security_group_ids) or config.security_group_ids)

    def _planned_loc(self, request: ProfileRequest) -> S3Location:
        """--s3-uri, or the bucket srifty would create (the account id is not looked up to plan)."""
        if request.s3_uri:
            return S3Location.parse(request.s3_uri)
        return S3Location(f"srifty-<account-id>-{self._region_of(request)}", "srifty")

    def _prepare(self, request: ProfileRequest, run_id: str, bundle: ProjectBundle | None,
                 subnets: tuple[str, ...] = (), groups: tuple[str, ...] = ()) -> RunSetup:
        """The AMI, the zones (or ``subnets``' zones, checked with the security ``groups``), the
        bucket, and the inputs uploaded: nothing is launched yet."""
        ami = self.resolve_ami(request)
        subnet_of_zone = self.instances.network(subnets, groups, self.clients.region) if subnets or groups else {}
        zones = list(subnet_of_zone) if subnets else self.zones()
        if not zones:
            raise SriftyError(f"No available zones in {self.clients.region}.", "Check --region.")
        setup = RunSetup(run_id, self.ensure_bucket(request), ami, zones, bundle,
                         self.create_placement_group(run_id) if request.placement_group else None,
                         subnets, subnet_of_zone, groups)
        self.upload_inputs(request, setup, self.type_plan(request, request.instance_types[0], setup, 1, request.spot).keys)
        self.log(f"srifty run {run_id}: {', '.join(request.instance_types)} in {self.clients.region}; "
                 f"inputs at {setup.loc.uri('runs', run_id)}; `srifty ec2 cleanup --run-id {run_id}` removes leftovers")
        return setup

    def _type_runs(self, request: ProfileRequest, setup: RunSetup, out: str | None) -> TypeRuns:
        """The run's threads and its clean-up (:class:`TypeRuns`), with this backend's settings."""
        return TypeRuns(request, setup, out,
                        type_plan=lambda t, attempt, spot: self.type_plan(request, t, setup, attempt, spot),
                        instances=self.instances, staging=self.staging, region=self.clients.region,
                        poll_interval=self.poll_interval, time_cap_s=self.time_cap(request),
                        boot_overhead_s=self.boot_overhead_s, on_poll=self.on_poll, log=self.log)

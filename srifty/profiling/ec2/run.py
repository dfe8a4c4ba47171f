"""One run under way: every instance type profiled in its own thread (launch, rendezvous, wait
for the profile, retry a lost spot run once on-demand, terminate), and the clean-up that ends
the run however it ends.

The zero-leak guarantee lives here: each type's thread terminates its own instances when it
returns, and :meth:`TypeRuns.run` then stops and waits for every thread and terminates every
instance in the registry still alive, and deletes the placement group, on every exit path
(Ctrl-C included, however many times it is pressed: :class:`InterruptLatch`).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Callable

from srifty import profile
from srifty.errors import ProfilingFailed, SriftyError
from srifty.profiling.ec2.aws import LOST_STATES
from srifty.profiling.ec2.groups import delete_placement_group
from srifty.profiling.ec2.instances import Instances, InterruptLatch
from srifty.profiling.ec2.node import rendezvous_doc
from srifty.profiling.ec2.plans import RunSetup, TypePlan, TypeResult
from srifty.profiling.ec2.staging import S3Staging
from srifty.profiling.launcher import ProfileRequest


class TypeRuns:
    """The instance types of one run, in parallel. ``type_plan(instance_type, attempt, spot)``
    plans one attempt; ``instances`` launches and terminates (its ``stop`` event stops every
    thread at its next poll); ``staging`` writes the rendezvous and reads the profile."""

    def __init__(self, request: ProfileRequest, setup: RunSetup, out: str | None, *,
                 type_plan: Callable[[str, int, bool], TypePlan], instances: Instances, staging: S3Staging,
                 region: str | None, poll_interval: float, time_cap_s: float, boot_overhead_s: float,
                 on_poll: Callable[[str, int], None] | None, log: Callable[[str], None]) -> None:
        self.request, self.setup, self.out = request, setup, out
        self.type_plan = type_plan
        self.instances, self.staging = instances, staging
        self.region = region
        self.poll_interval = poll_interval
        self.time_cap_s, self.boot_overhead_s = time_cap_s, boot_overhead_s
        self.on_poll = on_poll
        self.log = log

    def run(self, latch: InterruptLatch) -> list[TypeResult]:
        """One thread per type. However the wait ends (all done, an error, Ctrl-C), the threads are
        stopped and waited for and every instance still alive is terminated (:meth:`_finish`)."""
        request = self.request
        pool = ThreadPoolExecutor(max_workers=len(request.instance_types), thread_name_prefix="srifty-ec2")
        futures: dict[Future[TypeResult], str] = {}
        try:
            for t in request.instance_types:
                futures[pool.submit(self.run_type, t)] = t
            results = self._gather(futures)
        except BaseException:
            self.instances.stop.set()  # the other threads stop at their next poll
            raise
        finally:
            self._finish(pool, list(futures), latch)
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

    def _finish(self, pool: ThreadPoolExecutor, futures: list[Future[TypeResult]], latch: InterruptLatch) -> None:
        """Wait for every thread, then terminate every instance still alive; runs to its end.

        The latch keeps later signals from raising. The only one that can still raise here is
        the first, when the run had ended without one: it is held until the clean-up is done."""
        held: KeyboardInterrupt | None = None
        while True:
            try:
                self._wait_threads(futures, latch)
                pool.shutdown(wait=True)  # the threads have returned: nothing left for exit to join
                self._terminate_left()
                delete_placement_group(self.instances.clients.ec2, self.setup.placement_group, self.setup.run_id,
                                       self.instances.registry.launched, self.poll_interval, self.log)
                break
            except KeyboardInterrupt as exc:
                held = held or exc
                self.instances.stop.set()
        if held is not None:
            raise held

    def _wait_threads(self, futures: list[Future[TypeResult]], latch: InterruptLatch) -> None:
        """Until every type's thread has returned (one in an AWS call returns when the call does);
        each further Ctrl-C meanwhile is answered with what srifty is waiting for."""
        run_id = self.setup.run_id
        seen = latch.count
        pending = {f for f in futures if not f.done()}
        while pending:
            _, pending = wait(pending, timeout=0.25)
            if latch.count > seen:
                seen = latch.count
                self.log(f"Still stopping run {run_id}: waiting for {len(pending)} instance type(s) to stop, "
                         "then terminating every instance launched. To abandon that, kill srifty (Ctrl-\\) and run "
                         f"`srifty ec2 cleanup --run-id {run_id} --region {self.region}`.")

    def _terminate_left(self) -> None:
        run_id = self.setup.run_id
        left = self.instances.registry.alive()
        if not left:
            return
        self.log(f"terminating {len(left)} instance(s) of run {run_id}: {', '.join(left)}")
        try:
            self.instances.terminate(left)
        except Exception as exc:
            raise SriftyError(f"Could not terminate {', '.join(left)}: {exc}.",
                              f"Run `srifty ec2 cleanup --run-id {run_id} --region {self.region}` now.") from exc

    # ------------------------------------------------------------------ one instance type
    def run_type(self, instance_type: str) -> TypeResult:
        """Profile one type (in its own thread); its instances are terminated however it returns."""
        request, setup = self.request, self.setup
        result = TypeResult(instance_type)
        loc, run_id = setup.loc, setup.run_id
        spot = request.spot
        attempt = 1
        while True:
            plan = self.type_plan(instance_type, attempt, spot)
            result.attempts.append(plan.market)
            ids: list[str] = []
            try:
                instances, zone = self.instances.launch(plan.run_instances, setup.targets())
                ids = [x["InstanceId"] for x in instances]
                ips: list[str] = [x.get("PrivateIpAddress") or "" for x in instances]
                if not all(ips):
                    ips = self.instances.private_ips(ids, self.poll_interval)
                self.staging.put(loc, plan.keys["rendezvous"], json.dumps(rendezvous_doc(ips, run_id)).encode())
                self.log(f"{instance_type}: launched {', '.join(ids)} in {zone} ({plan.market}), waiting for the profile")
                outcome = self._wait(plan, ids, attempt)
            finally:
                self.instances.terminate(ids)
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
                    f"No profile from {instance_type} within the time cap of {self.time_cap_s:.0f} s; its instances were terminated.",
                    f"Raise --time-cap (or --max-seconds), and read the node logs under s3://{loc.bucket}/{plan.keys['logs']}/.",
                )
            if outcome.startswith("failed:"):
                raise ProfilingFailed(
                    f"Profiling on {instance_type} failed on the instance ({outcome[7:]}).",
                    f"The node logs are under s3://{loc.bucket}/{plan.keys['logs']}/.",
                )
            result.doc = self.staging.collect(loc, plan.keys["profile"], instance_type)
            result.path = request.type_out(self.out, instance_type) if self.out else None
            if result.path:
                profile.save(result.doc, result.path)
            if result.doc.get("status") == "partial":
                err = ProfilingFailed(f"The profile from {instance_type} is partial: {result.doc.get('partial_reason')}",
                                      "It is kept (marked partial).", partial_path=result.path)
                result.error = err
            return result

    def _wait(self, plan: TypePlan, ids: list[str], attempt: int) -> str:
        """Poll until the profile (or failure marker) arrives, the instances are lost, or time runs out."""
        loc, stop = self.setup.loc, self.instances.stop
        deadline = time.monotonic() + self.time_cap_s + self.boot_overhead_s
        while True:
            if stop.is_set():
                raise KeyboardInterrupt
            if self.on_poll is not None:
                self.on_poll(plan.instance_type, attempt)
            if self.staging.object_exists(loc, plan.keys["profile"]):
                return "profile"
            failed = self.staging.object(loc, plan.keys["failed"])
            if failed is not None:
                return "failed: " + failed.decode(errors="replace")[:300]
            states = self.instances.states(ids)
            if any(states.get(i, "terminated") in LOST_STATES for i in ids):
                # the profile may have landed between the two checks
                return "profile" if self.staging.object_exists(loc, plan.keys["profile"]) else "lost"
            if time.monotonic() > deadline:
                return "timeout"
            stop.wait(self.poll_interval)  # wakes at once when the run is stopped

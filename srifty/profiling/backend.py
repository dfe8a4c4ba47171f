"""The profiling backend protocol and its shared flow (:class:`ProfilingBackend`): a backend
plans a request (the dry run: exact commands and environment); the base class validates it,
runs the plan under a :class:`~srifty.profiling.supervisor.Supervisor` in a run directory of its
own, and turns the workers' records into a profile (training jobs, or the allreduce sweep over
world sizes), keeping what was measured when the run fails.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from srifty import hostinfo, profile
from srifty.errors import ProfilingFailed
from srifty.profiling import stacks
from srifty.profiling.diagnosis import diagnose_failure
from srifty.profiling.document import torch_version, training_doc
from srifty.profiling.request import LaunchPlan, ProfileRequest, ProgressFn
from srifty.profiling.supervisor import Supervisor, read_rank_records, read_record


# what a machine with a CUDA (NVIDIA) or ROCm (AMD) GPU driver has; torch sees no GPU without one
GPU_DRIVER_PATHS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/kfd")


def gpu_driver_present() -> bool:
    return any(os.path.exists(p) for p in GPU_DRIVER_PATHS)


def local_cuda(device: str) -> bool:
    """Whether workers on this machine run on a CUDA GPU under ``--device``. Torch is asked only
    where a GPU driver is there: importing it costs this process a second or more, and the workers
    import it anyway."""
    if device == "cpu" or not gpu_driver_present():
        return False
    import torch  # a GPU machine's: only torch says whether its build runs there

    return torch.cuda.is_available()


class ProfilingBackend(ABC):
    """A way to run profiling jobs. Subclasses plan; the base class owns the flow."""

    name = "base"

    @abstractmethod
    def plan(self, request: ProfileRequest, run_dir: str) -> LaunchPlan:
        """The exact commands this backend would run (no side effects)."""

    def cluster_block(self, request: ProfileRequest, world_size: int, device: str) -> dict[str, Any]:
        spec = hostinfo.host_spec()
        return {
            "launcher": self.name,
            "backend": "nccl" if device == "cuda" else "gloo",
            "device": device,
            "world_size": world_size,
            "nodes": 1,
            "workers_per_node": [world_size],
            "instance_types": [request.instance_type],
            "hosts": [{"name": spec["hostname"], "instance_type": request.instance_type, "workers": world_size, "spec": spec}],
        }

    def dry_run(self, request: ProfileRequest) -> str:
        request.validate()
        return self.plan(request, "<run-dir>").describe()

    def preflight(self, request: ProfileRequest) -> None:
        """Refuse, before anything starts, a run this backend's machines cannot hold (none here)."""

    def profile(self, request: ProfileRequest, out: str | None, progress: ProgressFn | None = None) -> dict[str, Any]:
        """Run the job and write its profile to ``out``; raise ProfilingFailed on failure.

        On failure the partial profile (status 'partial') is still written to ``out``.
        """
        request.validate()
        self.preflight(request)
        run_dir = tempfile.mkdtemp(prefix="srifty-run-")
        run_id = uuid.uuid4().hex[:12]
        try:
            if request.collectives:
                doc = self._profile_collectives(request, run_dir, run_id, out, progress)
            else:
                doc = self._profile_training(request, run_dir, run_id, out, progress)
        except ProfilingFailed as failure:
            # keep the workers' output for the user to read; everything else is in the profile
            failure.hint = (failure.hint or "") + f" The workers' output is in {run_dir}/."
            raise
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        shutil.rmtree(run_dir, ignore_errors=True)
        return doc

    # ----- training jobs --------------------------------------------------------
    def _profile_training(
        self, request: ProfileRequest, run_dir: str, run_id: str, out: str | None, progress: ProgressFn | None
    ) -> dict[str, Any]:
        supervisor = Supervisor(self.plan(request, run_dir), run_id, os.path.join(run_dir, "workers.log"))

        def poll() -> dict[str, Any]:  # progress is rank 0's: read only its file
            r0 = read_record(Path(run_dir) / "rank0.json")
            return {
                "iterations": len(r0["iterations"]) if r0 else 0,
                "rel_ci": r0.get("current_rel_ci") if r0 else None,
                "target": request.target_rel_ci,
                "max_seconds": request.max_seconds,
            }

        hard_limit = request.startup_timeout + request.max_seconds + request.hang_timeout

        def on_hang(started: set[int]) -> str:
            return stacks.where_waiting(run_dir, read_rank_records(run_dir), started, request.script)

        outcome = supervisor.run(poll, request.startup_timeout, request.hang_timeout, hard_limit, progress, on_hang)
        ranks = read_rank_records(run_dir)
        doc = training_doc(request, ranks, outcome, self.cluster_block)
        failure = diagnose_failure(request, ranks, outcome, doc)
        if failure is not None:
            doc["status"] = "partial"
            doc["partial_reason"] = failure.message
            if out and doc["ranks"] and any(r["iterations"] for r in doc["ranks"]):
                failure.partial_path = profile.save_partial(doc, out)
                failure.hint = (failure.hint or "") + (f" The {sum(len(r['iterations']) for r in doc['ranks'])} "
                                                       f"iteration records measured are kept in "
                                                       f"{failure.partial_path} (marked partial).")
            raise failure
        if out:
            profile.save(doc, out)
        return doc

    # ----- collectives microbenchmark --------------------------------------------
    def _profile_collectives(
        self, request: ProfileRequest, run_dir: str, run_id: str, out: str | None, progress: ProgressFn | None
    ) -> dict[str, Any]:
        results: list[dict[str, Any]] = []
        total_wall = 0.0
        world_sizes = request.world_sizes or [request.nproc]
        reason = "sweep_complete"
        failure: ProfilingFailed | None = None
        for w in world_sizes:
            sub = ProfileRequest(**{**request.__dict__, "nproc": w, "world_sizes": [w]})
            sub_dir = os.path.join(run_dir, f"w{w}")
            os.makedirs(sub_dir, exist_ok=True)
            sub_plan = self.plan(sub, sub_dir)
            sup = Supervisor(sub_plan, run_id, os.path.join(sub_dir, "workers.log"))

            def poll(d: str = sub_dir) -> dict[str, Any]:
                recs = read_rank_records(d, "collectives_rank")
                r0 = recs[0] if recs else {}
                return {"iterations": len(r0.get("results", [])), "world_size": w}

            outcome = sup.run(poll, request.startup_timeout, request.hang_timeout, request.startup_timeout + request.max_seconds * 4 + request.hang_timeout, progress)
            total_wall += outcome.wall_seconds
            recs = read_rank_records(sub_dir, "collectives_rank")
            r0 = next((r for r in recs if r.get("rank") == 0), None)
            if r0:
                results.extend(r0.get("results", []))
            if outcome.reason or any(c != 0 for c in outcome.returncodes):
                reason = outcome.reason or "worker_failed"
                err = next((r["error"] for r in recs if r.get("error")), None)
                failure = ProfilingFailed(
                    f"The allreduce microbenchmark at world size {w} did not finish ({reason}"
                    f"{': ' + err['type'] + ': ' + err['message'].splitlines()[0] if err else ''}).",
                    "Check that the machine can run that many workers; the sizes measured so far are kept.",
                )
                break
        cluster = self.cluster_block(request, max(world_sizes), "cuda" if local_cuda(request.device) else "cpu")
        doc = {
            "schema_version": profile.SCHEMA_VERSION,
            "kind": "collectives",
            "status": "partial" if failure else "complete",
            "partial_reason": failure.message if failure else None,
            "stop_reason": reason,
            "created_at": profile.utc_now(),
            "srifty_version": profile.__version__,
            "cluster": cluster,
            "environment": profile.environment_info(torch_version()),
            "measurement": {
                "target_rel_ci": request.target_rel_ci,
                "max_seconds": request.max_seconds,
                "wall_seconds": round(total_wall, 3),
            },
            "collectives": results,
            "warnings": [],
        }
        if failure is not None:
            if out and results:
                failure.partial_path = profile.save_partial(doc, out)
            raise failure
        if out:
            profile.save(doc, out)
        return doc


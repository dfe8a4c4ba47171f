"""Running a plan (``srifty launch DIR``): the plan's configuration, trained for a bounded time by
the profiler's own backends, and its measured step set against what srifty predicted.

The run is a ``srifty profile`` of the plan's script on the plan's nodes, so it has the
profiler's guarantees (workers stopped and hosts, namespaces and instances removed on every exit
path; on EC2 the cost shown and agreed to first). ``emulated`` runs any plan on the emulated
cluster, a mix included (each host type at its own per-worker batch); ``ec2`` launches the plan's
instances, one type per run (a mix needs the plan's node scripts started by hand).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from srifty.errors import SriftyError
from srifty.features.job import pass_batch
from srifty.plan import plan_efa_types
from srifty.profiling.emulated import hosts_arg
from srifty.profiling.launcher import ProfileRequest, get_backend

BACKENDS = ("emulated", "ec2")


@dataclass(frozen=True)
class LaunchReport:
    """The measured step of a plan's configuration against the prediction."""

    config: str
    backend: str
    profile: str
    status: str  # the profile's: complete | partial
    measured_ms: float
    measured_ci_ms: tuple[float, float]
    predicted_ms: float
    interval_ms: tuple[float, float]
    global_batch: float
    predicted_samples_per_s: float  # at the predicted step, without spot interruptions: what a run measures
    notes: tuple[str, ...] = ()  # what makes the run unlike the configuration predicted

    @property
    def inside(self) -> bool:
        return self.interval_ms[0] <= self.measured_ms <= self.interval_ms[1]

    @property
    def measured_samples_per_s(self) -> float:
        return self.global_batch / (self.measured_ms / 1e3)

    @property
    def error(self) -> float:
        return self.predicted_ms / self.measured_ms - 1.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(notes=list(self.notes), inside=self.inside,
                 measured_samples_per_s=round(self.measured_samples_per_s, 3), error=round(self.error, 4))
        return d

    def sentence(self) -> str:
        return (f"{self.config} on the {self.backend} backend: measured {self.measured_ms:.1f} ms per iteration "
                f"({self.measured_samples_per_s:,.1f} samples/s); predicted {self.predicted_ms:.1f} ms "
                f"[{self.interval_ms[0]:.1f}-{self.interval_ms[1]:.1f}] ({self.predicted_samples_per_s:,.1f} "
                f"samples/s): {self.error:+.0%}, {'inside' if self.inside else 'outside'} the interval")


def read_plan(directory: str | Path) -> dict[str, Any]:
    """``DIR/plan.json`` as ``srifty recommend --plan`` wrote it."""
    path = Path(directory) / "plan.json"
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise SriftyError(f"{directory} holds no plan.json.", "Write one with `srifty recommend ... --plan DIR`.") from None
    except (OSError, ValueError) as exc:
        raise SriftyError(f"Could not read {path}: {exc}.", "Write the plan again with `srifty recommend --plan`.") \
            from None
    need = {"schema", "script", "script_args", "config", "nodes", "prediction"}
    if not isinstance(doc, dict) or doc.get("schema") != 1 or not need <= set(doc):
        raise SriftyError(f"{path} is not a plan of schema 1 (it lacks {', '.join(sorted(need - set(doc or {})))}).",
                          "Write the plan again with `srifty recommend --plan`.")
    return doc


def request_for(plan: dict[str, Any], backend: str, max_seconds: float, **options: Any) -> ProfileRequest:
    """The profile request that runs ``plan`` on ``backend`` for at most ``max_seconds`` of measuring."""
    nodes = plan["nodes"]
    types = [n["instance_type"] for n in nodes]
    passes = int(plan.get("passes") or 1)  # a script that accumulates gradients reads one pass's batch
    batches = {n["instance_type"]: pass_batch(int(n["local_batch_size"]), passes) for n in nodes}
    common = dict(script=plan["script"], script_args=list(plan["script_args"]), module=plan.get("module"),
                  batch_arg=plan.get("batch_arg"),
                  max_seconds=max_seconds, batch_size=batches[types[0]], batch_by_type=batches)
    if not os.path.exists(plan["script"]):
        raise SriftyError(f"The plan's script {plan['script']} is not here.",
                          "Run `srifty launch` from the directory the plan's script path is relative to.")
    if backend == "emulated":
        return ProfileRequest(**common, hosts=hosts_arg(types), spec=options.get("spec") or "configs/emulated.yaml")
    if backend == "ec2":
        if len(set(types)) > 1 or len({n["spot"] for n in nodes}) > 1:
            raise SriftyError(f"The EC2 backend launches one instance type per run; {plan['config']} mixes them.",
                              "Run the mix on --backend emulated, or start the plan's node scripts on your "
                              "instances yourself.")
        # in a placement group where the prediction took one (a plan written before it said: not)
        return ProfileRequest(**{**common, "batch_by_type": {}}, instance_types=[types[0]], nodes=len(nodes),
                              spot=nodes[0]["spot"], region=plan.get("region"),
                              placement_group=bool(plan.get("placement_group")) and len(nodes) > 1,
                              **{k: v for k, v in options.items() if k != "spec"})
    raise SriftyError(f"srifty launch runs on {' or '.join(BACKENDS)}, not {backend!r}.")


def launch(directory: str | Path, backend: str, out: str, max_seconds: float = 20.0,
           progress: Callable[[dict[str, Any]], None] | None = None, runner: Any = None,
           **options: Any) -> LaunchReport:
    """Run the plan in ``directory`` and compare; the run's profile is written to ``out``.
    ``runner``: the backend object (default: ``backend``'s, as `srifty profile` makes it)."""
    plan = read_plan(directory)
    request = request_for(plan, backend, max_seconds, **options)
    doc = (runner or get_backend(backend)).profile(request, out, progress)
    summary = doc.get("summary") or {}
    it = summary.get("iteration_ms") or {}
    if not it.get("median"):
        raise SriftyError(f"The run of {plan['config']} measured no iteration ({doc.get('partial_reason')}).",
                          f"See its profile, {out}.")
    p = plan["prediction"]
    global_batch = float(sum(n["workers"] * n["local_batch_size"] for n in plan["nodes"]))  # as the nodes ran it
    efa = plan_efa_types(plan) if backend == "ec2" else ()
    notes = (f"the run went over TCP: srifty's EC2 backend attaches no EFA interface, while the prediction takes NCCL "
             f"over EFA between the {', '.join(efa)} nodes, so the two are not like for like",) if efa else ()
    return LaunchReport(plan["config"], backend, out, doc.get("status", "complete"), float(it["median"]),
                        (float(it.get("ci_low") or it["median"]), float(it.get("ci_high") or it["median"])),
                        float(p["iteration_ms"]), tuple(p["interval_ms"]), global_batch,
                        global_batch / (float(p["iteration_ms"]) / 1e3), notes)

"""What starts a recommended configuration: a plan directory (``srifty recommend --plan DIR``).

For each node, a shell script that runs the training script under ``torchrun`` with the node's
rank, the cluster's size, a c10d rendezvous on the first node, and the node's per-worker batch in
``SRIFTY_BATCH_SIZE`` (a mix of types trains at a different batch on each type: the script should
read it with ``srifty.local_batch_size`` and weight its gradients with
``srifty.weight_gradients_by_batch``, docs/training.md). For a configuration of one type, also a
SkyPilot task (``sky launch sky.yaml``). A README says what srifty predicted, to compare with what
the job measures once it runs, and ``plan.json`` holds the same for scripts.
"""
from __future__ import annotations

import itertools
import json
import math
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from srifty import __version__
from srifty.catalog import Catalog
from srifty.configspec import ClusterConfig, parse_config
from srifty.errors import SriftyError, sentence
from srifty.features import hardware_of
from srifty.features.job import pass_batch
from srifty.features.memory import tight_notes
from srifty.outputs import atomic_write_text

RDZV_PORT = 29400


@dataclass(frozen=True)
class PlannedNode:
    rank: int
    instance_type: str
    workers: int
    local_batch_size: int
    spot: bool


@dataclass(frozen=True)
class Plan:
    """One ranked configuration of ``srifty recommend``, made concrete."""

    model: str
    script: str
    script_args: tuple[str, ...]
    config: str
    rank_in_ranking: int
    nodes: tuple[PlannedNode, ...]
    region: str | None
    prediction: dict[str, Any]  # the recommendation row (srifty.solver.Recommendation.to_dict)
    emulated: bool = False  # hosts of an emulated catalog: `srifty launch DIR --backend emulated` runs it
    # the types whose nodes the prediction takes to talk over EFA (NCCL's aws-ofi-nccl plugin), across nodes
    efa_types: tuple[str, ...] = ()
    # the prediction takes the nodes in a cluster placement group (`recommend --placement-group`)
    placement_group: bool = False
    # the types whose GPU holds one worker with little to spare (srifty.features.memory.tight_notes)
    memory_notes: tuple[str, ...] = ()
    # the forward-backward passes per optimizer step where the script accumulates gradients: its
    # SRIFTY_BATCH_SIZE is one pass's batch, a per-worker batch over the passes
    passes: int = 1
    # the script ran as `python -m MODULE` (script: the module's file): torchrun runs it so, `-m MODULE`
    module: str | None = None
    # the script's option for its batch: torchrun gives it the node's SRIFTY_BATCH_SIZE after the arguments
    batch_arg: str | None = None

    @property
    def world_size(self) -> int:
        return sum(n.workers for n in self.nodes)

    @property
    def global_batch(self) -> int:
        """The samples of one step, as the nodes run it: every worker's whole per-worker batch."""
        return sum(n.workers * n.local_batch_size for n in self.nodes)

    @property
    def homogeneous(self) -> bool:
        first = self.nodes[0]
        return all((n.instance_type, n.workers, n.spot) == (first.instance_type, first.workers, first.spot)
                   for n in self.nodes)

    def torchrun(self, nnodes: str, node_rank: str, workers: int, endpoint: str) -> str:
        """The torchrun command line, shell-quoted; ``nnodes``, ``node_rank`` and ``endpoint`` are
        written as given, so that they may be the shell's expansions (``$SKYPILOT_NODE_RANK``)."""
        return " ".join(["torchrun", "--nnodes", nnodes, "--node-rank", node_rank, "--nproc-per-node", str(workers),
                         "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", shlex.quote(self.rdzv_id),
                         *(["-m", shlex.quote(self.module)] if self.module else [shlex.quote(self.script)]),
                         *map(shlex.quote, self.script_args),
                         *([shlex.quote(self.batch_arg), '"$SRIFTY_BATCH_SIZE"'] if self.batch_arg else [])])

    @property
    def rdzv_id(self) -> str:
        return f"srifty-{self.model}"

    def pass_batch(self, node: PlannedNode) -> int:
        """The node's ``SRIFTY_BATCH_SIZE`` (:func:`pass_batch`)."""
        return pass_batch(node.local_batch_size, self.passes)

    def node_script(self, node: PlannedNode) -> str:
        cmd = self.torchrun(str(len(self.nodes)), str(node.rank), node.workers, f'"$MASTER_ADDR":{RDZV_PORT}')
        return "\n".join([
            "#!/usr/bin/env bash",
            f"# node {node.rank} of {len(self.nodes)} for {self.config} ({node.instance_type}"
            f"{', spot' if node.spot else ''}): {node.workers} worker(s), per-worker batch {node.local_batch_size}.",
            "# Run it on that node from the project's directory, every node with the same MASTER_ADDR (node 0's",
            "# private IP; 127.0.0.1 for one node); extra arguments go to the training script.",
            "set -euo pipefail",
            ': "${MASTER_ADDR:?set MASTER_ADDR to the private IP of node 0}"',
            f"export SRIFTY_BATCH_SIZE={self.pass_batch(node)}",
            f'exec {cmd} "$@"',
            "",
        ])

    def skypilot_yaml(self) -> str:
        """A SkyPilot task for a configuration of one type (``sky launch sky.yaml``)."""
        import yaml

        node = self.nodes[0]
        resources: dict[str, Any] = {"cloud": "aws", "instance_type": node.instance_type, "use_spot": node.spot}
        if self.region:
            resources["region"] = self.region
        run = "\n".join([
            'MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)',
            self.torchrun("$SKYPILOT_NUM_NODES", "$SKYPILOT_NODE_RANK", node.workers, f"$MASTER_ADDR:{RDZV_PORT}"),
            "",
        ])
        task = {"name": f"srifty-{self.model}", "resources": resources, "num_nodes": len(self.nodes),
                "workdir": ".", "envs": {"SRIFTY_BATCH_SIZE": str(self.pass_batch(node))}, "run": run}

        class Dumper(yaml.SafeDumper):
            pass

        def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:  # the run script as a block
            return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

        Dumper.add_representer(str, text)
        return yaml.dump(task, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=1000)

    def readme(self) -> str:
        p = self.prediction
        lo, hi = p["interval_ms"]
        lines = [
            f"# Plan: {self.config} for {self.model}",
            "",
            f"Written by `srifty recommend --plan` (srifty {__version__}): row {self.rank_in_ranking} of its ranking.",
            "",
            "## What srifty predicted",
            "",
            "| figure | predicted |",
            "|---|---|",
            f"| iteration | {p['iteration_ms']:.1f} ms (5-95% interval {lo:.1f}-{hi:.1f} ms) |",
            f"| throughput | {p['throughput_samples_per_s']:,.1f} samples/s"
            + (f" ({p['raw_throughput_samples_per_s']:,.1f} without spot interruptions)"
               if p.get("raw_throughput_samples_per_s") and p["raw_throughput_samples_per_s"] != p[
                   "throughput_samples_per_s"] else "") + " |",
            f"| cost | ${p['usd_per_hour']:.2f}/h, ${p['usd_per_million_samples']:.3f} per million samples |",
            f"| where the figure comes from | {p['source']} |",
            f"| global batch | {self.global_batch} ({self.world_size} workers"
            + (f"; the ranking's {p['global_batch']:g} is not a sum of whole per-worker batches, one per "
               "instance type" if abs(self.global_batch - p["global_batch"]) > 1e-9 else "") + ") |",
            *(["| GPU memory, one worker | " + ", ".join(f"{gib:.1f} GiB on {t}" for t, gib in p["memory_gib"].items())
               + " of tensor storage (the CUDA context comes on top) |"]
              if p.get("memory_gib") else []),
            *(["", *(f"Warning: {n}." for n in self.memory_notes)] if self.memory_notes else []),
            *(["", *(f"Warning: {sentence(w)}" for w in p["warnings"])] if p.get("warnings") else []),
            "",
            "Once it runs, compare the job's own iteration time with the interval: the training script "
            "profiled under `srifty profile --backend ec2` on this configuration gives a measured figure.",
            "",
            "## Starting it",
            "",
            "| node | instance type | market | workers | per-worker batch | script |",
            "|---:|---|---|---:|---:|---|",
        ]
        for n in self.nodes:
            lines.append(f"| {n.rank} | {n.instance_type} | {'spot' if n.spot else 'on-demand'} | {n.workers} | "
                         f"{n.local_batch_size} | `{node_file(n)}` |")
        lines += [
            "",
            "On each node, from the project's directory: `MASTER_ADDR=<node 0's private IP> bash "
            "<its script>` (extra arguments go to the training script). The nodes must reach node 0 on TCP "
            f"port {RDZV_PORT} (the default VPC's default security group allows traffic between its members).",
        ]
        if self.batch_arg:
            lines += ["", f"The script takes its per-worker batch as `{self.batch_arg} N` (as profiled): the "
                          "command gives it the node's `SRIFTY_BATCH_SIZE` after the script's arguments."]
        if self.passes > 1:
            lines += ["", f"The script accumulates gradients over {self.passes} forward-backward passes a step (as "
                          "profiled): each node's `SRIFTY_BATCH_SIZE` is one pass's batch, "
                          + ", ".join(f"{self.pass_batch(n)} on node {n.rank}" for n in self.nodes)
                          + f", so a worker's step is {self.passes} times that."]
        if self.placement_group and len(self.nodes) > 1:
            lines += ["", "The prediction takes the nodes in one cluster placement group, where AWS lets each TCP "
                          "flow between them run at 10 Gbit/s instead of 5: launch them into one (`srifty launch "
                          "--backend ec2` does)."]
        if self.efa_types:
            lines += ["", efa_note(self.efa_types)]
        if self.emulated:
            lines += ["", "These are emulated hosts: `sudo srifty launch DIR --backend emulated` runs the plan on "
                          "the emulated cluster and sets its measured step against the prediction."]
        elif self.homogeneous:
            lines += ["", "With SkyPilot: `sky launch -c srifty sky.yaml` from the project's directory starts "
                          "every node and runs the same command (add a `setup:` section that installs the "
                          "script's requirements if the image lacks them)."]
        else:
            lines += ["", "The types train at different per-worker batches (`SRIFTY_BATCH_SIZE`): plain DDP would "
                          "then weigh the samples on small-batch workers more. Read the batch with "
                          "`srifty.local_batch_size(...)` and register `srifty.weight_gradients_by_batch(model, "
                          "batch)` (docs/training.md) so the gradient is the whole global batch's. SkyPilot "
                          "starts one instance type per task, so this plan has no sky.yaml."]
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {"schema": 1, "srifty_version": __version__, "model": self.model, "script": self.script,
                "module": self.module, "script_args": list(self.script_args), "batch_arg": self.batch_arg,
                "config": self.config, "rank": self.rank_in_ranking,
                "region": self.region, "emulated": self.emulated, "nodes": [asdict(n) for n in self.nodes],
                "efa_types": list(self.efa_types), "placement_group": self.placement_group,
                "memory_notes": list(self.memory_notes), "passes": self.passes, "prediction": self.prediction}


def efa_note(types: Sequence[str]) -> str:
    """What a plan across nodes of ``types`` needs for the network its prediction takes."""
    names = ", ".join(types)
    return (f"The prediction takes NCCL over EFA between the {names} nodes. Start them with EFA interfaces "
            "(AWS: one per network card) from an image with NCCL's aws-ofi-nccl plugin (the AWS Deep Learning "
            "AMIs have it); without them NCCL falls back to TCP sockets, which carry a fraction of the rate, and "
            "the prediction does not hold. srifty's own EC2 backend (`srifty launch --backend ec2`) attaches "
            "none, so its run of this plan measures that fallback.")


def whole_batches(split: dict[str, tuple[int, float]], global_batch: float) -> dict[str, int]:
    """Each type's whole per-worker batch (``split``: its workers, its share of the batch), each
    its share rounded down or up (at least one sample): the choice whose global batch lies nearest
    ``global_batch``, then nearest the shares (a mix split at 25.7 and 50.8 per worker over 24 and 8
    workers trains at 26 and 50, 1,024 samples, not at 26 and 51, 1,032)."""
    types = list(split)
    options = [sorted({max(1, math.floor(b)), max(1, math.ceil(b))}) for _, b in split.values()]
    best = min(itertools.product(*options),
               key=lambda bs: (abs(sum(split[t][0] * b for t, b in zip(types, bs)) - global_batch),
                               sum(abs(b - split[t][1]) for t, b in zip(types, bs))))
    return dict(zip(types, best))


def node_file(node: PlannedNode) -> str:
    return f"node-{node.rank:02d}-{node.instance_type}.sh"


def make_plan(model: str, script: str | None, script_args: Sequence[str], row: Any, rank: int,
              region: str | None, catalog: Any, placement_group: bool = False, passes: int = 1,
              module: str | None = None, batch_arg: str | None = None) -> Plan:
    """The plan of one ranked row (srifty.solver.Recommendation) of a job's ``script``
    (``placement_group``: the row was predicted for nodes in a cluster placement group; ``passes``:
    the script's forward-backward passes per step, JobProfile.accumulation; ``module``: the script
    ran as ``python -m module``; ``batch_arg``: the script's option for its batch, JobProfile.batch_arg)."""
    if not script:
        raise SriftyError(f"The profile of {model} does not name its training script, so a plan cannot start it.",
                          "Give a profile recorded by `srifty profile` (imported traces name no script).")
    config: ClusterConfig = parse_config(row.config).resolved(catalog)
    workers = {g.instance_type: int(g.workers_per_node or catalog.get(g.instance_type).workers_per_node)
               for g in config.groups}
    if missing := [t for t in workers if row.batch_split.get(t) is None]:
        raise SriftyError(f"The ranked row {row.config} has no batch for {missing[0]}.")
    counts = {g.instance_type: g.count * workers[g.instance_type] for g in config.groups}
    whole = whole_batches({t: (counts[t], float(row.batch_split[t])) for t in workers}, float(row.global_batch))
    nodes, rank_no = [], 0
    for g in config.groups:
        for _ in range(g.count):
            nodes.append(PlannedNode(rank_no, g.instance_type, workers[g.instance_type], whole[g.instance_type], g.spot))
            rank_no += 1
    emulated = all(catalog.get(n.instance_type).emulation is not None for n in nodes)
    return Plan(model, script, tuple(script_args), row.config, rank, tuple(nodes), region, row.to_dict(), emulated,
                efa_types_across(config, catalog), placement_group,
                tuple(tight_notes(row.memory_gib, row.batch_split, catalog)), passes, module, batch_arg)


def plan_efa_types(plan: dict[str, Any]) -> tuple[str, ...]:
    """A written plan's ``efa_types`` (one written before it had them: worked out from its config
    on the shipped catalog)."""
    if "efa_types" in plan:
        return tuple(plan["efa_types"])
    catalog = Catalog.default()
    return efa_types_across(parse_config(plan["config"]).resolved(catalog), catalog)


def efa_types_across(config: ClusterConfig, catalog: Any) -> tuple[str, ...]:
    """The types of ``config`` (resolved) whose nodes the simulator takes to talk over EFA: across
    nodes, every type EFA-capable (srifty.features.Hardware.inter_kind; with a TCP type in the ring,
    its slowest link, the simulator takes that type's TCP network)."""
    types = tuple(dict.fromkeys(g.instance_type for g in config.groups))
    if config.nodes < 2 or any(hardware_of(catalog, t).inter_kind != "efa" for t in types):
        return ()
    return types


def write_plan(plan: Plan, directory: str | Path) -> list[Path]:
    """Write the plan's files into ``directory`` (created; files already there are replaced)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for n in plan.nodes:
        path = out / node_file(n)
        atomic_write_text(path, plan.node_script(n))
        path.chmod(0o755)
        written.append(path)
    if plan.homogeneous and not plan.emulated:
        atomic_write_text(out / "sky.yaml", plan.skypilot_yaml())
        written.append(out / "sky.yaml")
    atomic_write_text(out / "README.md", plan.readme())
    atomic_write_text(out / "plan.json", json.dumps(plan.to_dict(), indent=1) + "\n")
    return written + [out / "README.md", out / "plan.json"]

"""`srifty recommend --plan DIR`: what starts a ranked configuration (srifty/plan.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from srifty.catalog import Catalog
from srifty.configspec import parse_config
from srifty.plan import make_plan, node_file, write_plan
from srifty.solver import Recommendation

from conftest import EXAMPLES, PROFILES, ROOT, run_srifty

CNN = PROFILES / "local" / "cnn_resnet.json"


def _row(config: str, split: dict[str, float], nodes: int, gpus: int) -> Recommendation:
    workers = {g.instance_type: g.count * (g.workers_per_node or Catalog.default().get(g.instance_type).workers_per_node)
               for g in parse_config(config).groups}
    return Recommendation(config=config, market="on-demand", gpus=gpus, nodes=nodes, batch_split=split,
                          global_batch=sum(workers[t] * b for t, b in split.items()), iteration_ms=100.0,
                          interval_ms=(80.0, 150.0),
                          throughput_samples_per_s=1000.0, raw_throughput_samples_per_s=1000.0, usd_per_hour=3.0,
                          usd_per_million_samples=0.8, interruptions_per_hour=0.0, source="transferred", mixed=False)


def test_recommend_writes_a_plan_of_the_chosen_row(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    res = run_srifty("recommend", "--profile", str(CNN), "--budget", "12", "--top", "3", "--plan", str(out), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    chosen = doc["recommendations"][0]
    plan = json.loads((out / "plan.json").read_text())
    assert plan["config"] == chosen["config"] and plan["rank"] == 1 and plan["prediction"] == chosen
    assert sorted(doc["plan"]["files"]) == sorted(str(p) for p in out.iterdir())
    cat = Catalog.default()
    nodes = plan["nodes"]
    assert len(nodes) == chosen["nodes"] and sum(n["workers"] for n in nodes) == chosen["gpus"]
    for n in nodes:
        script = (out / node_file_of(n)).read_text()
        assert f"--nnodes {len(nodes)} --node-rank {n['rank']} --nproc-per-node {n['workers']}" in script
        assert f"export SRIFTY_BATCH_SIZE={round(chosen['batch_split'][n['instance_type']])}" in script
        assert "examples/cnn_resnet.py" in script and os.access(out / node_file_of(n), os.X_OK)
        assert n["workers"] <= cat.get(n["instance_type"]).workers_per_node
    # one type: a SkyPilot task with the same shape
    task = yaml.safe_load((out / "sky.yaml").read_text())
    assert task["resources"]["instance_type"] == nodes[0]["instance_type"]
    assert task["resources"]["use_spot"] == ("@spot" in chosen["config"])
    assert task["num_nodes"] == len(nodes) and task["envs"]["SRIFTY_BATCH_SIZE"] == str(nodes[0]["local_batch_size"])
    assert f"--nproc-per-node {nodes[0]['workers']}" in task["run"] and "$SKYPILOT_NODE_RANK" in task["run"]
    readme = (out / "README.md").read_text()
    assert f"{chosen['iteration_ms']:.1f} ms (5-95% interval {chosen['interval_ms'][0]:.1f}" in readme
    # what one worker holds on its GPU (the CNN's profile predates the memory count: the floor of
    # its parameters and gradients, twice its gradient bytes)
    grad_bytes = json.loads(CNN.read_text())["job"]["grad_bytes"]
    ((itype, gib),) = chosen["memory_gib"].items()
    assert gib == pytest.approx(2 * grad_bytes / 2**30, abs=1e-4)
    assert f"| GPU memory, one worker | {gib:.1f} GiB on {itype} of tensor storage" in readme


def node_file_of(n: dict) -> str:
    return f"node-{n['rank']:02d}-{n['instance_type']}.sh"


def test_a_plan_whose_gpu_memory_is_tight_says_so(tmp_path: Path) -> None:
    """A row whose worker needs more than TIGHT_SHARE of its GPU's memory: the plan's README
    warns (the CUDA context is not counted), and plan.json keeps the note; one with room does not."""
    cat = Catalog.default()
    for need, warned in ((21.0, True), (12.0, False)):
        row = _row("2xg5.xlarge", {"g5.xlarge": 32.0}, 2, 2)
        row.memory_gib = {"g5.xlarge": need}
        plan = make_plan("cnn_resnet", "examples/cnn_resnet.py", (), row, 1, None, cat)
        write_plan(plan, tmp_path / str(need))
        readme = (tmp_path / str(need) / "README.md").read_text()
        notes = json.loads((tmp_path / str(need) / "plan.json").read_text())["memory_notes"]
        assert ("Warning: tight in GPU memory: one worker holds at least 21.0 GiB" in readme) is warned
        assert (len(notes) == 1 and "94% of its A10G's 22.4 GiB" in notes[0]) if warned else notes == []


def test_a_mix_gets_a_batch_per_type_and_no_skypilot_task(tmp_path: Path) -> None:
    cat = Catalog.default()
    row = _row("2xg5.xlarge+1xg4dn.12xlarge:2", {"g5.xlarge": 40.0, "g4dn.12xlarge": 24.4}, nodes=3, gpus=4)
    plan = make_plan("cnn_resnet", "examples/cnn_resnet.py", ["--lr", "0.1"], row, 2, "us-west-2", cat)
    written = write_plan(plan, tmp_path)
    assert [(n.rank, n.instance_type, n.workers, n.local_batch_size) for n in plan.nodes] == \
        [(0, "g5.xlarge", 1, 40), (1, "g5.xlarge", 1, 40), (2, "g4dn.12xlarge", 2, 24)]
    assert not (tmp_path / "sky.yaml").exists() and {p.name for p in written} >= {"README.md", "plan.json"}
    last = (tmp_path / node_file(plan.nodes[2])).read_text()
    assert "SRIFTY_BATCH_SIZE=24" in last and "--nproc-per-node 2" in last and "--lr 0.1" in last
    assert "weight_gradients_by_batch" in (tmp_path / "README.md").read_text()


def test_a_plan_s_whole_batches_add_up_to_the_ranking_s_global_batch(tmp_path: Path) -> None:
    """Each type's share rounded down or up, whichever keeps the global batch: 25.74 and 50.77 per
    worker over 24 and 8 workers run at 26 and 50 (1,024), not at 26 and 51 (1,032); where no whole
    batches add up to it, the README says which global batch the nodes run."""
    from srifty.plan import whole_batches

    assert whole_batches({"a": (24, 25.74), "b": (8, 50.77)}, 1024) == {"a": 26, "b": 50}
    assert whole_batches({"a": (1, 21.4), "b": (1, 10.6)}, 32) == {"a": 21, "b": 11}
    assert whole_batches({"a": (8, 0.4), "b": (8, 1.6)}, 16) == {"a": 1, "b": 1}  # never none
    cat = Catalog.default()
    mix = make_plan("cnn_resnet", "examples/cnn_resnet.py", [],
                    _row("3xp3.16xlarge+1xp4d.24xlarge", {"p3.16xlarge": 25.75, "p4d.24xlarge": 50.75}, 4, 32),
                    1, None, cat)
    assert [n.local_batch_size for n in mix.nodes] == [26, 26, 26, 50] and mix.global_batch == 1024
    write_plan(mix, tmp_path / "mix")
    assert "| global batch | 1024 (32 workers) |" in (tmp_path / "mix" / "README.md").read_text()
    odd = make_plan("cnn_resnet", "examples/cnn_resnet.py", [], _row("3xg5.xlarge", {"g5.xlarge": 1000 / 3}, 3, 3),
                    1, None, cat)
    assert odd.global_batch == 999
    write_plan(odd, tmp_path / "odd")
    assert ("| global batch | 999 (3 workers; the ranking's 1000 is not a sum of whole per-worker batches, one per "
            "instance type) |") in (tmp_path / "odd" / "README.md").read_text()


def test_a_plan_across_efa_nodes_says_what_its_network_needs(tmp_path: Path) -> None:
    """Across nodes of an EFA type the prediction takes NCCL over EFA: the plan names the types and
    its README says what starting them needs; one node, or a ring with a TCP type in it (whose
    network the simulator then takes), does not depend on it. A plan written before the field is
    worked out from its configuration."""
    from srifty.plan import plan_efa_types

    cat = Catalog.default()
    across = make_plan("cnn_resnet", "examples/cnn_resnet.py", [], _row("2xp4d.24xlarge", {"p4d.24xlarge": 32.0}, 2, 16),
                       1, None, cat)
    write_plan(across, tmp_path)
    assert across.efa_types == ("p4d.24xlarge",) and json.loads((tmp_path / "plan.json").read_text())["efa_types"] == \
        ["p4d.24xlarge"]
    readme = (tmp_path / "README.md").read_text()
    assert "NCCL over EFA between the p4d.24xlarge nodes" in readme and "aws-ofi-nccl" in readme
    for config, split, nodes in (("1xp4d.24xlarge", {"p4d.24xlarge": 32.0}, 1),
                                 ("1xp4d.24xlarge+1xg4dn.12xlarge", {"p4d.24xlarge": 32.0, "g4dn.12xlarge": 32.0}, 2)):
        plan = make_plan("cnn_resnet", "examples/cnn_resnet.py", [], _row(config, split, nodes, 8), 1, None, cat)
        assert plan.efa_types == () and "EFA" not in plan.readme()
    old = across.to_dict()
    del old["efa_types"]
    assert plan_efa_types(old) == ("p4d.24xlarge",)


def test_a_plan_records_the_placement_group_its_prediction_took(tmp_path: Path) -> None:
    for flag, grouped in (([], False), (["--placement-group"], True)):
        out = tmp_path / f"plan{len(flag)}"
        res = run_srifty("recommend", "--profile", str(CNN), "--budget", "12", "--plan", str(out), *flag)
        assert res.returncode == 0, res.stderr
        plan = json.loads((out / "plan.json").read_text())
        assert plan["placement_group"] is grouped and len(plan["nodes"]) > 1
        assert ("cluster placement group" in (out / "README.md").read_text()) is grouped


def test_a_profile_without_a_script_cannot_be_planned() -> None:
    from srifty.errors import SriftyError

    with pytest.raises(SriftyError, match="does not name its training script"):
        make_plan("imagenet", None, [], _row("1xg5.xlarge", {"g5.xlarge": 32}, 1, 1), 1, None, Catalog.default())


def test_rank_and_plan_are_checked_before_any_work(tmp_path: Path) -> None:
    res = run_srifty("recommend", "--profile", str(CNN), "--budget", "12", "--top", "3", "--rank", "4",
                     "--plan", str(tmp_path / "p"))
    assert res.returncode != 0 and "--rank 4" in res.stderr and "Raise --top" in res.stderr
    (tmp_path / "file").write_text("x")
    res = run_srifty("recommend", "--profile", str(CNN), "--budget", "12", "--plan", str(tmp_path / "file"))
    assert res.returncode != 0 and "is a file" in res.stderr
    res = run_srifty("recommend", "--profile", str(CNN), "--budget", "12", "--plan", str(PROFILES / "local"))
    assert res.returncode != 0 and "holds the profile" in res.stderr and not (PROFILES / "local" / "plan.json").exists()
    inside = PROFILES / "pollux" / "imagenet" / "plan"
    res = run_srifty("recommend", "--profile", str(PROFILES / "pollux" / "imagenet"), "--budget", "12", "--plan",
                     str(inside))
    assert res.returncode != 0 and "Nothing was written" in res.stderr and not inside.exists()


@pytest.mark.slow
def test_a_one_node_plan_runs_its_training_script(tmp_path: Path) -> None:
    """The node script, run as written (torchrun, c10d rendezvous on MASTER_ADDR, the node's batch
    in SRIFTY_BATCH_SIZE), trains the example for a few steps on this machine's CPU."""
    row = _row("1xg4dn.xlarge", {"g4dn.xlarge": 8.0}, nodes=1, gpus=1)
    plan = make_plan("cnn_resnet", "examples/cnn_resnet.py", [], row, 1, None, Catalog.default())
    write_plan(plan, tmp_path)
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    res = subprocess.run(["bash", str(tmp_path / node_file(plan.nodes[0])), "--steps", "3"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert (EXAMPLES / "cnn_resnet.py").exists()


def test_launch_needs_a_plan(tmp_path: Path) -> None:
    res = run_srifty("launch", str(tmp_path), "--backend", "emulated")
    assert res.returncode == 1 and "holds no plan.json" in res.stderr
    (tmp_path / "plan.json").write_text('{"schema": 1, "config": "1xg5.xlarge"}')
    res = run_srifty("launch", str(tmp_path), "--backend", "emulated")
    assert res.returncode == 1 and "not a plan of schema 1" in res.stderr and "nodes" in res.stderr

"""Whether a job fits a GPU: the memory the profiler counts (srifty.profiling.opcount), the need at
another batch (srifty.features.memory), and what predict and recommend do with it."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from srifty.features.memory import GIB, MemoryFootprint, max_fitting_batch, memory_need
from srifty.profiling.opcount import OperatorCounter

from conftest import PROFILES, run_srifty


def _storage_bytes(tensors) -> int:
    seen = {}
    for t in tensors:
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def _state(model: nn.Module, opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    return ([*model.parameters(), *model.buffers()] + [p.grad for p in model.parameters() if p.grad is not None]
            + [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)])


def _iteration(model: nn.Module, opt: torch.optim.Optimizer, batch: int) -> None:
    opt.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(torch.randn(batch, 64)), torch.randint(0, 10, (batch,))).backward()
    opt.step()


def test_the_counter_follows_every_storage_of_an_iteration() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.Adam(model.parameters())
    _iteration(model, opt, 8)  # Adam's state exists from the first step on
    opt.zero_grad(set_to_none=True)  # as a loop does before its next forward
    params = sum(p.numel() * 4 for p in model.parameters())
    peaks = {}
    for batch in (64, 1024):
        counter = OperatorCounter(lambda: "forward")
        counter.track_start(_state(model, opt))
        with counter:
            _iteration(model, opt, batch)
            counter.mark_held()  # as the recorder does after the optimizer step
            opt.zero_grad(set_to_none=True)  # the next iteration frees the gradients before its forward
        held = _storage_bytes(_state(model, opt))
        # the gradients are gone at the end, but held from one step to the next: parameters,
        # gradients, Adam's two moments (and its step counters)
        assert counter.memory(batch)["held_bytes"] == held + params and held + params >= 4 * params
        assert counter.start_bytes == held and counter.live_bytes == held  # every temporary was freed
        # the peak holds at least the hidden activation ReLU keeps for backward, beyond what is held
        assert counter.peak_bytes - (held + params) >= batch * 512 * 4
        peaks[batch] = counter.peak_bytes - (held + params)
    # the rise above what is held grows with the batch (16 times the batch: well over 4 times the rise,
    # whatever the optimizer's own temporaries, which do not grow)
    assert peaks[1024] > 4 * peaks[64]
    # a storage shared by views counts once
    counter = OperatorCounter(lambda: "forward")
    with counter:
        x = torch.ones(1000)
        views = [x[:10], x.view(10, 100), x[500:]]
    assert counter.live_bytes == 4000 and len(views) == 3


def test_a_footprint_scales_what_rises_with_the_batch() -> None:
    fp = MemoryFootprint(batch_size=32, held_bytes=11 * 2**30, peak_bytes=13 * 2**30)
    assert fp.need_bytes(32) == 13 * 2**30
    assert fp.need_bytes(64) == 15 * 2**30  # the 2 GiB rise doubles with the batch
    assert fp.need_bytes(0) == 11 * 2**30  # what is held between iterations alone
    # 16 GiB holds 11 GiB and (16 - 11) / (2 GiB / 32) = 80 samples
    assert fp.max_batch(16 * GIB) == pytest.approx(80.0)
    assert fp.max_batch(10 * GIB) == 0.0
    need = memory_need([fp], None, 16.0, "T4", "g4dn.xlarge", 96)
    assert need is not None and not need.fits and need.need_gib == pytest.approx(17.0)
    assert "one worker needs 17.0 GiB of tensor memory at per-worker batch 96" in need.note()
    assert "the T4 of g4dn.xlarge has 16.0 GiB" in need.note()
    assert memory_need([fp], None, 16.0, "T4", "g4dn.xlarge", 80).fits
    assert max_fitting_batch([fp], None, 16.0) == pytest.approx(80.0)
    # two footprints: each answers for the batches nearest it (split at their geometric mean, 64)
    steep = MemoryFootprint(batch_size=128, held_bytes=11 * 2**30, peak_bytes=23 * 2**30)
    assert max_fitting_batch([fp, steep], None, 16.0) == 64.0  # 32's line holds to 64, 128's holds none past it
    big = MemoryFootprint(batch_size=128, held_bytes=11 * 2**30, peak_bytes=18 * 2**30)
    assert max_fitting_batch([fp, big], None, 16.0) == pytest.approx(5 / 7 * 128)  # 128's line: (16 - 11) / (7/128)
    assert memory_need([fp, big], None, 16.0, "T4", "g4dn.xlarge", 91).fits
    assert not memory_need([fp, big], None, 16.0, "T4", "g4dn.xlarge", 92).fits
    # no footprint: the floor of parameters and gradients, twice the gradient bytes
    floor = memory_need([], 6 * 2**30, 16.0, "T4", "g4dn.xlarge", 32)
    assert floor is not None and not floor.measured and floor.need_gib == 12.0 and floor.fits
    assert not memory_need([], 9 * 2**30, 16.0, "T4", "g4dn.xlarge", 32).fits
    assert max_fitting_batch([], 9 * 2**30, 16.0) == 0.0 and max_fitting_batch([], 6 * 2**30, 16.0) == math.inf
    assert memory_need([fp], None, None, "", "emu.small", 32) is None  # no GPU memory known: no check
    # a CUDA profile's peak is the allocator's where that is more (workspaces included)
    block = {"batch_size": 32, "start_bytes": 11 * 2**30, "peak_bytes": 13 * 2**30}
    assert MemoryFootprint.from_json(block, None) == fp
    assert MemoryFootprint.from_json({**block, "cuda_max_allocated_bytes": 14 * 2**30}, None).peak_bytes == 14 * 2**30


def _with_memory(tmp_path: Path, held_gib: float, rise_gib: float) -> str:
    """The shipped local CNN profile, stating that one worker holds ``held_gib`` between
    iterations and ``rise_gib`` more at its peak."""
    doc = json.loads((PROFILES / "local" / "cnn_resnet.json").read_text())
    b = doc["job"]["local_batch_size"]
    doc["job"]["memory"] = {"batch_size": b, "start_bytes": int(held_gib * GIB), "end_bytes": int(held_gib * GIB),
                            "peak_bytes": int((held_gib + rise_gib) * GIB)}
    out = tmp_path / "cnn_resnet.json"
    out.write_text(json.dumps(doc))
    return str(out)


def test_a_worker_that_fits_with_little_to_spare_is_warned_of(tmp_path: Path) -> None:
    """A need above TIGHT_SHARE of the GPU's memory fits, but the CUDA context and the allocator's
    rounding are not counted: predict warns of it, and recommend says so of its chosen row."""
    need = memory_need([MemoryFootprint(32, 19 * 2**30, 21 * 2**30)], None, 22.35, "A10G", "g5.xlarge", 32)
    assert need.fits and "94% of its A10G's 22.4 GiB" in need.tight_note()
    # 89% has room enough; 23 GiB does not fit at all (memory_short's note, not this one)
    assert memory_need([MemoryFootprint(32, 18 * 2**30, 20 * 2**30)], None, 22.35, "A10G", "g5.xlarge", 32
                       ).tight_note() is None
    assert memory_need([MemoryFootprint(32, 21 * 2**30, 23 * 2**30)], None, 22.35, "A10G", "g5.xlarge", 32
                       ).tight_note() is None
    profile = _with_memory(tmp_path, 19.0, 2.0)  # 21 GiB at the profiled batch of 32
    res = run_srifty("predict", "--profile", profile, "--config", "1xg5.xlarge", "--config", "1xg6e.xlarge", "--json")
    assert res.returncode == 0, res.stderr
    a10g, l40s = (json.loads(line) for line in res.stdout.splitlines())
    assert [w for w in a10g["warnings"] if w.startswith("tight in GPU memory: one worker holds at least 21.0 GiB")]
    assert not any("GPU memory" in w for w in l40s["warnings"])  # the L40S's 44.7 GiB has room
    res = run_srifty("recommend", "--profile", profile, "--instance-types", "g5.xlarge", "--max-nodes", "2", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["recommendations"][0]["memory_gib"] == {"g5.xlarge": pytest.approx(21.0)}
    assert [n for n in doc["notes"] if n.startswith("tight in GPU memory") and "on g5.xlarge, 94%" in n]


def test_predict_and_recommend_leave_out_a_gpu_too_small(tmp_path: Path) -> None:
    profile = _with_memory(tmp_path, 18.0, 2.0)  # 20 GiB at the profiled batch of 32
    res = run_srifty("predict", "--profile", profile, "--config", "2xg4dn.xlarge", "--config", "1xg5.xlarge", "--json")
    assert res.returncode == 0, res.stderr
    t4, a10g = (json.loads(line) for line in res.stdout.splitlines())
    assert t4["memory_gib"] == pytest.approx(20.0) and a10g["memory_gib"] == pytest.approx(20.0)
    assert any("does not fit in GPU memory" in w and "the T4 of g4dn.xlarge has 16.0 GiB" in w for w in t4["warnings"])
    assert not any("GPU memory" in w for w in a10g["warnings"])  # the A10G's 22.4 GiB holds it
    base = ["recommend", "--profile", profile, "--instance-types", "g4dn.xlarge,g4dn.12xlarge,g5.xlarge,g5.12xlarge",
            "--max-nodes", "4", "--top", "50", "--json"]
    res = run_srifty(*base)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["recommendations"] and all("g4dn" not in r["config"] for r in doc["recommendations"])
    # each row says what one worker holds on each type, at its share of the batch: 18 GiB and 2 per 32 samples
    for r in doc["recommendations"]:
        assert r["memory_gib"] == pytest.approx({t: 18.0 + b / 16 for t, b in r["batch_split"].items()}, abs=1e-3)
    assert any(n.startswith("GPU memory: one worker needs 20.0 GiB") and "the T4 (16.0 GiB) of g4dn.12xlarge, "
               "g4dn.xlarge" in n for n in doc["notes"]), doc["notes"]
    # a global batch spread over more GPUs brings the per-worker batch, and the need, down: at
    # batch 8 one worker needs 18.5 GiB, still over the T4's 16; the A10G's 22.4 GiB holds up to
    # batch 32 + (22.35 - 20) / (2 / 32) = 69
    res = run_srifty(*base[:-3], "--top", "500", "--json", "--global-batch-size", "128")
    doc = json.loads(res.stdout)
    assert all("g4dn" not in r["config"] for r in doc["recommendations"])
    assert all(b <= 69.7 for r in doc["recommendations"] for b in r["batch_split"].values())
    assert any(r["batch_split"] == {"g5.xlarge": 64.0} for r in doc["recommendations"])  # 2 x 64 fits
    assert not any(r["config"] == "1xg5.xlarge" for r in doc["recommendations"])  # 1 x 128 does not
    # nothing fits: the error names GPU memory and what each type holds
    res = run_srifty("recommend", "--profile", _with_memory(tmp_path, 30.0, 2.0), "--instance-types",
                     "g4dn.xlarge,g5.xlarge", "--max-nodes", "2")
    assert res.returncode != 0
    assert "GPU memory rules everything out" in res.stderr and "give a smaller --batch-size" in res.stderr
    assert "the A10G (22.4 GiB) of g5.xlarge" in res.stderr and "Traceback" not in res.stderr

"""Regenerate srifty/data/gpu_step_model.json: the fixed costs of srifty.opmodel (host floor, per-
kernel launch, device and host factors), fitted on pairs of one-worker CPU profiles (profiles/cpu,
`make profiles-cpu`) and one-GPU steps of the same models: the examples' one-GPU profiles at the
same batches (profiles/h200, `make gpu-check`) and the Pollux trace's one-GPU runs on a T4
(profiles/pollux), with the interval of its leave-one-model-out errors. Run with
`make gpu-step`, then `make model` (a step model that moves predictions needs a new MODEL_REVISION)
and `make accuracy`."""
from __future__ import annotations

from srifty.catalog import DATA_DIR, TRANSFER_ERROR_JSON, Catalog
from srifty.cpu_to_gpu import fit_shipped, pairs
from srifty.features import load_corpus
from srifty.gpuspeed import read_transfer_error
from srifty.model import ROOT
from srifty.opmodel import STEP_MODEL_JSON
from srifty.outputs import atomic_write_text


def main() -> None:
    found = pairs(ROOT / "profiles" / "cpu", ROOT / "profiles" / "h200", Catalog.default(),
                  load_corpus([str(ROOT / "profiles" / "pollux")]))
    spread = read_transfer_error(DATA_DIR / TRANSFER_ERROR_JSON)
    # the operator model takes another GPU's spec figures, no measured factors: the spec ratio's spread
    model = fit_shipped(found, spread.bounds(by_spec=True) if spread else (0.0, 0.0))
    out = ROOT / "srifty" / STEP_MODEL_JSON
    atomic_write_text(out, model.to_json())
    print(f"{len(found)} pairs; host {model.host_ms:.2f} ms, {model.launch_us:.1f} us per kernel, device x"
          f"{model.device_factor:.2f}, host input x{model.host_factor:.2f}; interval log [{model.q05:+.3f}, "
          f"{model.q95:+.3f}]; wrote {out}")


if __name__ == "__main__":
    main()

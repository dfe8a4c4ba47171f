"""Regenerate srifty/data/gpu_speed_corrections.csv: the measured factors on the spec-sheet speed
ratio of GPUs (srifty.gpuspeed), fitted on Lambda's compiled single-GPU benchmark tables
(data/traces/lambda_compiled_single_gpu.csv). Run with `make gpu-speed`, then `make model`
(the model card hashes the file) and `make accuracy`."""
from __future__ import annotations

from srifty.catalog import DATA_DIR, SPEED_CORRECTIONS_CSV, Catalog
from srifty.gpuspeed import fit_speed_corrections, read_lambda_single_gpu, write_corrections
from srifty.model import ROOT


def main() -> None:
    rates, notes = read_lambda_single_gpu(ROOT / "data" / "traces" / "lambda_compiled_single_gpu.csv")
    corrections = fit_speed_corrections(rates, Catalog.default())
    write_corrections(corrections, DATA_DIR / SPEED_CORRECTIONS_CSV)
    for n in notes:
        print(n)
    for c in corrections:
        print(f"{c.gpu_name:10s} {c.flops:5s} x{c.factor:.3f}  ({c.rates} rates, {c.networks} networks)")
    print(f"wrote {DATA_DIR / SPEED_CORRECTIONS_CSV}")


if __name__ == "__main__":
    main()

"""Regenerate srifty/data/gpu_speed_corrections.csv: the measured factors on the spec-sheet speed
ratio of GPUs (srifty.gpuspeed), fitted on Lambda's compiled single-GPU benchmark tables
(data/traces/lambda_compiled_single_gpu.csv), and srifty/data/gpu_transfer_error.json: how far
transfers with those factors miss on rates left out of the fit (the interval of a transferred
prediction). Run with `make gpu-speed`, then `make model` (the model card hashes both files)
and `make accuracy`."""
from __future__ import annotations

from srifty.catalog import DATA_DIR, SPEED_CORRECTIONS_CSV, TRANSFER_ERROR_JSON, Catalog, write_corrections
from srifty.gpuspeed import fit_speed_corrections, read_lambda_single_gpu
from srifty.model import ROOT
from srifty.profile import atomic_write_text
from srifty.validate import transfer_spread, validate_gpu_transfer


def main() -> None:
    rates, notes = read_lambda_single_gpu(ROOT / "data" / "traces" / "lambda_compiled_single_gpu.csv")
    corrections = fit_speed_corrections(rates, Catalog.default())
    write_corrections(corrections, DATA_DIR / SPEED_CORRECTIONS_CSV)
    for n in notes:
        print(n)
    for c in corrections:
        print(f"{c.gpu_name:10s} {c.flops:5s} x{c.factor:.3f}, convolutions x{c.conv_factor:.3f}  "
              f"({c.rates} rates, {c.networks} networks)")
    print(f"wrote {DATA_DIR / SPEED_CORRECTIONS_CSV}")
    # held-out transfers with the new factors (each Lambda network's own rates out of the fit)
    checks, _ = validate_gpu_transfer(Catalog.default())
    spread = transfer_spread(checks)
    atomic_write_text(DATA_DIR / TRANSFER_ERROR_JSON, spread.to_json())
    print(f"transferred time / measured: 5% {spread.q05:+.3f}, 95% {spread.q95:+.3f} (log) over "
          f"{spread.transfers} transfers with measured factors; by the spec speed alone 5% {spread.spec_q05:+.3f}, "
          f"95% {spread.spec_q95:+.3f} over {spread.spec_transfers}; wrote {DATA_DIR / TRANSFER_ERROR_JSON}")


if __name__ == "__main__":
    main()

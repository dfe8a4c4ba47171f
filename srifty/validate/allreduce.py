"""The allreduce check: measured nccl-tests allreduce times on EC2 against the simulator's
estimate with three sets of link figures (:class:`AllreduceCheck`, :func:`validate_allreduce`),
and its section of docs/ACCURACY.md (:func:`render_allreduce`).

A check of the communication model on its own, independent of the latency model's folds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from srifty.comm import NCCL_MIN_BYTES
from srifty.features import AllreduceRow

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from srifty.catalog import Catalog


# --------------------------------------------------------------------------- allreduce (nccl-tests)

COMM_METHODS = ("fitted", "catalog", "tcp-pcie-fit")


@dataclass
class AllreduceCheck:
    """Measured nccl-tests allreduce times on one instance type and node count against the
    simulator's ring/hierarchical estimate with three sets of link figures."""

    instance_type: str
    nodes: int
    gpus_per_node: int
    sizes: "np.ndarray"
    measured_us: "np.ndarray"
    predicted_us: dict[str, "np.ndarray"]

    def ape(self, method: str) -> "np.ndarray":
        """Absolute percentage error of each size."""
        import numpy as np

        return np.abs(self.predicted_us[method] - self.measured_us) / self.measured_us * 100

    def mape(self, method: str) -> float:
        return float(self.ape(method).mean())


def validate_allreduce(catalog: "Catalog", training_scale: Any, rows: Sequence[AllreduceRow],
                       notes: Sequence[str] = ()) -> tuple[list[AllreduceCheck], list[str]]:
    """Measured allreduces against three sets of link figures: ``fitted`` = the type's own
    NVLink/EFA efficiencies, fitted on every other message size of that type and tested on the
    sizes left out (two folds: alternate sizes); ``catalog`` = the catalog's stated bandwidths;
    ``tcp-pcie-fit`` = the efficiencies the communication model fits on the corpus's TCP/PCIe
    training runs (``training_scale``) applied to NVLink and EFA too — what one efficiency for
    every kind of link would predict."""
    import numpy as np
    from dataclasses import replace

    from srifty.comm import allreduce_us, fit_fast_links, rows_in_catalog

    known, unknown = rows_in_catalog(catalog, rows)
    notes = list(notes) + [f"nccl-tests: {t} is not in the catalog; its rows were left out." for t in unknown]
    base = replace(training_scale, fast_links=())
    checks = []
    for itype in sorted({r.instance_type for r in known}):
        mine = sorted((r for r in known if r.instance_type == itype), key=lambda r: (r.nodes, r.nbytes))
        one_for_all = replace(base, fast_links=((itype, training_scale.intra_efficiency,
                                                 training_scale.inter_efficiency or 1.0),))
        held_out = {}
        for fold in (0, 1):
            train = [r for i, r in enumerate(mine) if i % 2 != fold]
            scale = replace(base, fast_links=fit_fast_links(catalog, train)) if train else base
            test = [r for i, r in enumerate(mine) if i % 2 == fold]
            held_out.update(zip(test, allreduce_us(catalog, test, scale)))
        for nodes, gpn in sorted({(r.nodes, r.gpus_per_node) for r in mine}):
            sub = [r for r in mine if (r.nodes, r.gpus_per_node) == (nodes, gpn)]
            checks.append(AllreduceCheck(
                itype, nodes, gpn, np.array([r.nbytes for r in sub]), np.array([r.us for r in sub]),
                {"fitted": np.array([held_out[r] for r in sub]), "catalog": allreduce_us(catalog, sub, None),
                 "tcp-pcie-fit": allreduce_us(catalog, sub, one_for_all)}))
    return checks, notes


def render_allreduce(checks: Sequence[AllreduceCheck], notes: Sequence[str]) -> str:
    import numpy as np

    if not checks:
        return ""
    lines = ["", "## Allreduce: nccl-tests on EC2", "",
             f"`all_reduce_perf` out-of-place times for messages of at least {NCCL_MIN_BYTES >> 20} MiB "
             "(data/traces/nccl_tests_allreduce_aws.csv) against the simulator's allreduce (best of ring and "
             "hierarchical, as on every NVLink node) with three sets of link figures: `fitted` = the type's own "
             "NVLink/EFA efficiencies, "
             "fitted on the other message sizes of that type and tested on the sizes left out (two folds, alternate "
             "sizes; what srifty uses for a type with measured allreduces); `catalog` = the catalog's stated "
             "bandwidths (what srifty uses for NVLink/EFA types without them); `tcp-pcie-fit` = the efficiencies "
             "fitted on the real corpora's TCP/PCIe training runs applied to NVLink and EFA too (one efficiency "
             "for every kind of link).", "",
             "| instance type | nodes × GPUs | sizes | " + " | ".join(f"{m} MAPE %" for m in COMM_METHODS)
             + " | measured / catalog (median) |",
             "|---|---|---:|" + "---:|" * len(COMM_METHODS) + "---:|"]
    for c in checks:
        ratio = float(np.median(c.measured_us / c.predicted_us["catalog"]))
        lines.append(f"| {c.instance_type} | {c.nodes} × {c.gpus_per_node} | {len(c.sizes)} | "
                     + " | ".join(f"{c.mape(m):.1f}" for m in COMM_METHODS) + f" | {ratio:.2f} |")
    allm = {m: np.concatenate([c.ape(m) for c in checks]) for m in COMM_METHODS}
    lines.append(f"| all | | {len(allm['catalog'])} | " + " | ".join(f"{allm[m].mean():.1f}" for m in COMM_METHODS)
                 + " | |")
    lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"

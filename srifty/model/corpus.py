"""The default corpus and catalog, and the predictor trained on them.

:func:`corpus_paths` finds the shipped training corpus (profiles/pollux, profiles/lambda,
profiles/emulated); :func:`catalog_for_jobs` joins the EC2 catalog with the emulated one when a
job ran on emulated hosts (:class:`CombinedCatalog`); :func:`default_predictor` trains a
:class:`srifty.model.predictor.Predictor` on the corpus once per process.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from srifty.comm import measured_allreduce
from srifty.errors import SriftyError
from srifty.features import JobProfile
from srifty.model.latency import ModelError
from srifty.model.predictor import Predictor

if TYPE_CHECKING:  # pragma: no cover
    from srifty.catalog import Catalog

ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_CORPUS = ("profiles/pollux", "profiles/lambda", "profiles/emulated")


def corpus_paths(extra: Sequence[str] = ()) -> list[str]:
    """The given corpus paths, or the shipped ones that exist (profiles/pollux, profiles/lambda, profiles/emulated)."""
    if extra:
        return list(extra)
    return [str(ROOT / p) for p in DEFAULT_CORPUS if (ROOT / p).exists() and any((ROOT / p).rglob("*.json"))]


def emulated_catalog_path() -> Path:
    return ROOT / "configs" / "emulated.yaml"


def catalog_for_jobs(jobs: Sequence[JobProfile], catalog: "Catalog | None" = None) -> "Catalog":
    """The EC2 catalog, joined with the emulated one when a job ran on emulated hosts."""
    from srifty.catalog import Catalog

    cat = catalog or Catalog.default()
    types = {t for j in jobs for t in j.instance_types}
    if any(t.startswith("emu.") for t in types) and emulated_catalog_path().exists():
        return CombinedCatalog(cat, Catalog.from_emulated_spec(emulated_catalog_path()))
    return cat


class CombinedCatalog:
    """Two catalogs answered as one (EC2 types first, then emulated)."""

    def __init__(self, first: "Catalog", second: "Catalog") -> None:
        self.first, self.second = first, second

    def has(self, name: str) -> bool:
        return self.first.has(name) or self.second.has(name)

    def get(self, name: str) -> Any:
        for catalog in (self.first, self.second):
            if catalog.has(name):
                return catalog.get(name)
        from srifty.catalog import did_you_mean

        known = list(self.first.df["instance_type"]) + list(self.second.df["instance_type"])
        raise SriftyError(f"Unknown instance type {name!r}.{did_you_mean(name, known)}",
                          "To see what the catalog has: srifty catalog list.")

    def gpu_spec(self, gpu_name: str) -> Any:
        return self.first.gpu_spec(gpu_name)

    @property
    def speed_corrections(self) -> list[Any]:
        return self.first.speed_corrections

    def with_speed_corrections(self, corrections: Sequence[Any]) -> "CombinedCatalog":
        return CombinedCatalog(self.first.with_speed_corrections(corrections), self.second)

    @property
    def warnings(self) -> list[str]:
        return self.first.warnings


@lru_cache(maxsize=4)
def _default_predictor_cached(paths: tuple[str, ...], quick: bool) -> tuple[Predictor, Any]:
    from srifty.features import load_allreduce_rows, load_collectives, load_corpus

    jobs = load_corpus(list(paths))
    cat = catalog_for_jobs(jobs)
    return Predictor.train(jobs, cat, quick=quick, collectives=load_collectives(list(paths)),
                           allreduce=measured_allreduce()[0] + load_allreduce_rows(list(paths))), cat


def default_predictor(paths: Sequence[str] = (), quick: bool = False) -> Predictor:
    """Trained on the shipped corpus (retrained on load, cached in this process)."""
    found = tuple(corpus_paths(paths))
    if not found:
        raise ModelError("No training corpus found (profiles/pollux is shipped with srifty).",
                         "Give corpus paths, or run `srifty import data/traces/pollux_g4dn12xlarge.import.csv "
                         "--out profiles/pollux`.")
    return _default_predictor_cached(found, quick)[0]

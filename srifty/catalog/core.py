"""The :class:`Catalog` class: one catalog (the shipped snapshot, the refreshed cache, a CSV file
or an emulated YAML) read lazily into a DataFrame, with the queries commands and the model ask of
it (types, prices, interruption rates, GPU specs, measured GPU speed factors).

It picks its source and holds the frame; the reading is in ``files``, the emulated rows in
``emulated`` and the lookups in ``queries``.
"""

from __future__ import annotations

import copy
import datetime as dt
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from srifty.catalog.emulated import emulated_frame, load_emulated_spec
from srifty.catalog.files import (DATA_DIR, DEFAULT_ADVISOR_COMMIT, GPU_SPECS_CSV, SNAPSHOT_CSV, SPEED_CORRECTIONS_CSV,
                                  _add_interruption_rates, _apply_advisor_snapshot, _read_catalog_csv, cache_dir,
                                  file_sha256, read_cache_meta, read_corrections, resolve_advisor_commit,
                                  snapshot_age_days, snapshot_meta)
from srifty.catalog.queries import (_rows_of, did_you_mean, filter_impl, get_gpu_spec_impl,
                                    get_interruption_rate_impl, get_ondemand_price_impl, get_spot_price_impl,
                                    instance_type_from_rows_impl, list_instance_types_impl)
from srifty.catalog.values import CatalogSource, GpuSpec, InstanceType, Market, SpeedCorrection, SpotStatistic
from srifty.errors import SriftyError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


DEFAULT_REGION = "us-east-1"


class Catalog:
    """Instance types and prices, read lazily from a catalog CSV (or an emulated YAML).

    ``Catalog.default()`` picks, in order: $SRIFTY_CATALOG, the refreshed cache file, the
    shipped snapshot (with a warning saying how old it is).
    """

    def __init__(self, path: Path | str, source: CatalogSource | None = None,
                 advisor_commit: str | None = None, default_region: str = DEFAULT_REGION) -> None:
        self.path = Path(path)
        self.source = source or CatalogSource(kind="file", path=str(path))
        self.advisor_commit = resolve_advisor_commit(advisor_commit)
        self.default_region = default_region
        self._df: "pd.DataFrame | None" = None
        self._frame_factory: Callable[[], "pd.DataFrame"] | None = None

    # -- constructors
    @classmethod
    def snapshot(cls, advisor_commit: str | None = None) -> "Catalog":
        """The snapshot shipped with srifty, with a warning saying how old its prices are."""
        meta = snapshot_meta()
        age = snapshot_age_days()
        warning = (f"Using the EC2 catalog snapshot shipped with srifty: its prices are as of {meta['prices_as_of']} "
                   f"({age} days old). Run `srifty catalog refresh` to fetch current ones from AWS.")
        src = CatalogSource(kind="snapshot", path=str(DATA_DIR / SNAPSHOT_CSV), fetched_at=meta["prices_as_of"],
                            age_days=age, warnings=[warning])
        return cls(DATA_DIR / SNAPSHOT_CSV, src, advisor_commit)

    @classmethod
    def default(cls, path: str | Path | None = None, advisor_commit: str | None = None) -> "Catalog":
        """The catalog a command should use: ``path`` / $SRIFTY_CATALOG, then the refreshed cache, then the snapshot."""
        explicit = path or os.environ.get("SRIFTY_CATALOG")
        if explicit:
            p = Path(explicit).expanduser()
            if not p.exists():
                raise SriftyError(f"The catalog file {p} does not exist.",
                                  "Give --catalog (or SRIFTY_CATALOG) an existing CSV or emulated YAML, or unset it.")
            if p.suffix.lower() in (".yaml", ".yml"):
                return cls.from_emulated_spec(p)
            return cls(p, CatalogSource(kind="file", path=str(p)), advisor_commit)
        cached = cache_dir() / SNAPSHOT_CSV
        if cached.exists():
            meta = read_cache_meta(cache_dir()) or {}
            src = CatalogSource(kind="refreshed", path=str(cached), fetched_at=meta.get("fetched_at"))
            if meta.get("sha256") and meta["sha256"] != file_sha256(cached):
                src.warnings.append(f"{cached} was edited after `srifty catalog refresh` wrote it; using it as it is.")
            if meta.get("fetched_at"):
                fetched = dt.datetime.fromisoformat(meta["fetched_at"])
                src.age_days = (dt.datetime.now(dt.timezone.utc) - fetched).days
            return cls(cached, src, advisor_commit)
        return cls.snapshot(advisor_commit)

    @classmethod
    def from_emulated_spec(cls, path: str | Path) -> "Catalog":
        """An emulated catalog from a YAML file (schema 1, see docs/catalog.md)."""
        spec = load_emulated_spec(Path(path))
        frame = emulated_frame(spec)
        cat = cls(Path(path), CatalogSource(kind="emulated", path=str(path)), default_region=spec["region"])
        cat._frame_factory = lambda: frame
        return cat

    # -- data
    @property
    def df(self) -> "pd.DataFrame":
        if self._df is None:
            if self._frame_factory is not None:
                df = self._frame_factory()
            else:
                df = _read_catalog_csv(self.path)
                if self.advisor_commit != DEFAULT_ADVISOR_COMMIT:
                    df = _apply_advisor_snapshot(df, self.advisor_commit)
            self._df = _add_interruption_rates(df)
        return self._df

    @property
    def gpu_specs(self) -> "pd.DataFrame":
        import pandas as pd

        if not hasattr(self, "_specs"):
            self._specs = pd.read_csv(DATA_DIR / GPU_SPECS_CSV, keep_default_na=False, na_values=[""])
        return self._specs

    @property
    def speed_corrections(self) -> "list[SpeedCorrection]":
        """Measured factors on the spec speed ratio of GPUs (srifty.gpuspeed), shipped with srifty."""
        if not hasattr(self, "_speed_corrections"):
            self._speed_corrections = read_corrections(DATA_DIR / SPEED_CORRECTIONS_CSV)
        return self._speed_corrections

    def with_speed_corrections(self, corrections: "Sequence[SpeedCorrection]") -> "Catalog":
        """This catalog with other speed factors (validation refits them without a held-out GPU)."""
        other = copy.copy(self)
        other._speed_corrections = list(corrections)
        return other

    @property
    def warnings(self) -> list[str]:
        return list(self.source.warnings)

    # -- queries
    def names(self, gpu: str | None = None, family: str | None = None, region: str | None = None,
              name_glob: str | None = None) -> list[str]:
        return list_instance_types_impl(self.df, gpu, family, region, name_glob)

    def list(self, gpu: str | None = None, family: str | None = None, region: str | None = None,
             name_glob: str | None = None) -> list[InstanceType]:
        """Instance types matching every filter (GPU name, family, region offered, glob on the name)."""
        names = self.names(gpu, family, region, name_glob)
        if not names:
            self._explain_empty(gpu, family, region)
        return [self.get(n) for n in names]

    def get(self, name: str) -> InstanceType:
        """One instance type with its prices in every region (unknown -> SriftyError with 'Did you mean').
        Built once per name: InstanceType is frozen and the catalog's rows never change once read."""
        key = name.strip()
        types: dict[str, InstanceType] = self.__dict__.setdefault("_types", {})
        if key not in types:
            types[key] = instance_type_from_rows_impl(_rows_of(self.df, key))
        return types[key]

    def has(self, name: str) -> bool:
        """Whether the catalog lists ``name`` (a set lookup; no 'Did you mean' search)."""
        if "_names" not in self.__dict__:
            self._names = frozenset(self.df["instance_type"])
        return name.strip() in self._names

    def ondemand_price(self, name: str, region: str | None = None) -> float | None:
        return get_ondemand_price_impl(self.df, name, region or self.default_region)

    def spot_price(self, name: str, region: str | None = None,
                   statistic: SpotStatistic | str = SpotStatistic.MIN) -> float | None:
        return get_spot_price_impl(self.df, name, region or self.default_region, statistic)

    def price(self, name: str, market: Market, region: str | None = None,
              statistic: SpotStatistic | str = SpotStatistic.MIN) -> float | None:
        if Market(market) is Market.ON_DEMAND:
            return self.ondemand_price(name, region)
        return self.spot_price(name, region, statistic)

    def interruption_rate(self, name: str, region: str | None = None) -> float | None:
        return get_interruption_rate_impl(self.df, name, region or self.default_region)

    def gpu_spec(self, gpu_name: str) -> GpuSpec | None:
        specs: dict[str, GpuSpec | None] = self.__dict__.setdefault("_gpu_spec_of", {})
        if gpu_name not in specs:
            specs[gpu_name] = get_gpu_spec_impl(self.gpu_specs, gpu_name)
        return specs[gpu_name]

    def regions(self) -> list[str]:
        return sorted(r for r in set(self.df["region"]) if r)

    def _explain_empty(self, gpu: str | None, family: str | None, region: str | None) -> None:
        df = self.df
        if gpu and filter_impl(df, gpu=gpu).empty:
            known = [*df["gpu_name"], *df["accelerator_name"]]
            raise SriftyError(f"No instance type in the catalog has the GPU {gpu!r}.{did_you_mean(gpu, [k for k in known if k])}",
                              "Hint: srifty catalog list shows every GPU.")
        if family and filter_impl(df, family=family).empty:
            raise SriftyError(f"No instance family {family!r} in the catalog.{did_you_mean(family, df['family'])}",
                              "Hint: srifty catalog list shows every family.")
        if region and filter_impl(df, region=region).empty:
            raise SriftyError(f"The catalog has no prices in region {region!r}.{did_you_mean(region, self.regions())}",
                              f"Known regions: {', '.join(self.regions())}.")

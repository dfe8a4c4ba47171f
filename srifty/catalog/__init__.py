"""The instance catalog: EC2 instance specs, on-demand and spot prices, interruption rates.

Three sources, one shape:

* the **snapshot** shipped in ``srifty/data/`` (built by ``scripts/build_catalog.py`` from
  public data; see ``srifty/data/PROVENANCE.md``);
* a **refreshed** catalog that ``refresh_catalog`` fetches from the AWS APIs into the user
  cache (``~/.cache/srifty/ec2_catalog.csv`` or ``$SRIFTY_CATALOG_DIR``), preferred when
  present;
* an **emulated** catalog read from a YAML file (``Catalog.from_emulated_spec``) so that the
  same pipeline runs on the emulated cluster.

Queries follow SkyPilot's ``sky/catalog/common.py``: the catalog is a DataFrame read
lazily, and pure ``*_impl(df, ...)`` functions return plain Python values. pandas and
boto3 are imported inside functions only, so importing this package is cheap.

Submodules: ``values`` (Market, SpotStatistic, InterruptionBucket, GpuSpec, RegionPrice,
EmulatedHost, InstanceType, CatalogSource, SpeedCorrection; GPU names), ``files`` (the shipped
data and cache files: reading and checking a catalog CSV, snapshot and cache metadata, speed
corrections), ``queries`` (the ``*_impl`` functions on a frame, "Did you mean"), ``core`` (the
:class:`Catalog` class), ``emulated`` (emulated catalog YAML to rows) and ``refresh`` (fetching
from the AWS APIs into the cache).
"""

from srifty.catalog.core import DEFAULT_REGION, Catalog
from srifty.catalog.emulated import emulated_frame, load_emulated_spec
from srifty.catalog.files import (ADVISOR_COMMITS, CACHE_META, CATALOG_COLUMNS, CORRECTION_COLUMNS, DATA_DIR,
                                  DEFAULT_ADVISOR_COMMIT, EMULATION_COLUMNS, GPU_SPECS_CSV, INTERRUPTION_CSV,
                                  NUMERIC_COLUMNS, PRICE_COLUMNS, SNAPSHOT_CSV, SNAPSHOT_META, SPEED_CORRECTIONS_CSV,
                                  TRANSFER_ERROR_JSON, WHOLE_COLUMNS, cache_dir, file_sha256, read_cache_meta,
                                  read_corrections, resolve_advisor_commit, snapshot_age_days, snapshot_meta,
                                  write_corrections)
from srifty.catalog.queries import (did_you_mean, filter_impl, get_gpu_spec_impl, get_interruption_rate_impl,
                                    get_ondemand_price_impl, get_spot_price_impl, instance_type_from_rows_impl,
                                    list_instance_types_impl)
from srifty.catalog.refresh import (PRICING_LOCATION_FILTERS, RefreshResult, check_not_user_edited,
                                    fetch_ondemand_prices, fetch_region, parse_network_performance, refresh_catalog,
                                    spec_from_api)
from srifty.catalog.values import (GPU_DISPLAY_NAME, GPU_MEMORY_VARIANT, HOURS_PER_MONTH, CatalogSource, EmulatedHost,
                                   GpuSpec, InstanceType, InterruptionBucket, Market, RegionPrice, SpeedCorrection,
                                   SpotStatistic, monthly_share_to_hourly_rate, normalise_gpu_name)

__all__ = [
    "DEFAULT_REGION", "Catalog", "emulated_frame", "load_emulated_spec", "ADVISOR_COMMITS", "CACHE_META",
    "CATALOG_COLUMNS", "CORRECTION_COLUMNS", "DATA_DIR", "DEFAULT_ADVISOR_COMMIT", "EMULATION_COLUMNS",
    "GPU_SPECS_CSV", "INTERRUPTION_CSV", "NUMERIC_COLUMNS", "PRICE_COLUMNS", "SNAPSHOT_CSV", "SNAPSHOT_META",
    "SPEED_CORRECTIONS_CSV", "TRANSFER_ERROR_JSON", "WHOLE_COLUMNS", "cache_dir", "file_sha256", "read_cache_meta",
    "read_corrections", "resolve_advisor_commit", "snapshot_age_days", "snapshot_meta", "write_corrections",
    "did_you_mean", "filter_impl", "get_gpu_spec_impl", "get_interruption_rate_impl", "get_ondemand_price_impl",
    "get_spot_price_impl", "instance_type_from_rows_impl", "list_instance_types_impl", "PRICING_LOCATION_FILTERS",
    "RefreshResult", "check_not_user_edited", "fetch_ondemand_prices", "fetch_region", "parse_network_performance",
    "refresh_catalog", "spec_from_api", "GPU_DISPLAY_NAME", "GPU_MEMORY_VARIANT", "HOURS_PER_MONTH",
    "CatalogSource", "EmulatedHost", "GpuSpec", "InstanceType", "InterruptionBucket", "Market", "RegionPrice",
    "SpeedCorrection", "SpotStatistic", "monthly_share_to_hourly_rate", "normalise_gpu_name",
]

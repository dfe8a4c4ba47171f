"""``srifty catalog``: list, show and refresh the instance catalog (a thin shell over srifty.catalog)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from srifty.errors import SriftyError

EPILOG = """\b
Examples:
  srifty catalog list --gpu T4
  srifty catalog list --family g5 --region us-west-2 --json
  srifty catalog list --instance-types 'p4*'
  srifty catalog show p3.8xlarge
  srifty catalog refresh --region us-east-1 --region us-west-2
  srifty catalog --catalog configs/emulated.yaml list

Reads $SRIFTY_CATALOG (or --catalog) first, then the refreshed cache
($SRIFTY_CATALOG_DIR, default ~/.cache/srifty), then the snapshot shipped with srifty.
"""


def _console() -> Any:
    from rich.console import Console

    return Console(soft_wrap=False, width=None if sys.stdout.isatty() else 160)


def _load(ctx: click.Context) -> Any:
    from srifty.catalog import Catalog

    opts = ctx.obj or {}
    cat = Catalog.default(opts.get("catalog"), opts.get("advisor_snapshot"))
    for w in cat.warnings:
        click.echo(f"warning: {w}", err=True)
    return cat


def _money(x: float | None) -> str:
    return "-" if x is None else f"${x:,.3f}"


def _network(it: Any) -> str:
    base, up_to = it.network_gbps, it.network_up_to_gbps
    if base is None and up_to is None:
        return "?"
    if up_to is None:
        return f"{base:g} Gbps"
    if base is None:
        return f"up to {up_to:g} Gbps"
    return f"{base:g} (up to {up_to:g}) Gbps"


def _interruption(p: Any) -> str:
    if p is None:
        return "-"
    if p.interruption_bucket:
        return f"{p.interruption_bucket}/month"
    if p.interruption_per_hour is not None:
        return f"{p.interruption_per_hour:g}/h"
    return "-"


def _accelerator(it: Any) -> tuple[str, str]:
    if it.gpu_name:
        return it.gpu_name, str(it.gpu_count)
    if it.accelerator_name:
        return it.accelerator_name, str(it.accelerator_count)
    if it.emulation is not None:
        return "(emulated)", f"{it.emulation.workers} workers"
    return "(CPU)", "-"


def list_rows(types: list[Any], region: str) -> list[dict[str, Any]]:
    """One flat record per instance type with its prices in ``region`` (what the table shows)."""
    out = []
    for it in types:
        p = it.price_in(region)
        out.append({
            "instance_type": it.name, "family": it.family, "gpu_name": it.gpu_name or it.accelerator_name,
            "gpu_count": it.gpu_count or it.accelerator_count, "vcpus": it.vcpus, "memory_gib": it.memory_gib,
            "network_gbps": it.network_gbps, "network_up_to_gbps": it.network_up_to_gbps, "efa_interfaces": it.efa_interfaces,
            "region": region,
            "ondemand_usd_per_hour": p.ondemand_usd_per_hour if p else None,
            "spot_min_usd_per_hour": p.spot_min_usd_per_hour if p else None,
            "spot_median_usd_per_hour": p.spot_median_usd_per_hour if p else None,
            "interruption_bucket": p.interruption_bucket if p else "",
            "interruption_per_hour": p.interruption_per_hour if p else None,
        })
    return out


@click.group("catalog", epilog=EPILOG)
@click.option("--catalog", "catalog_path", type=click.Path(dir_okay=False), envvar="SRIFTY_CATALOG",
              help="A catalog CSV or an emulated catalog YAML to use instead of the default ($SRIFTY_CATALOG).")
@click.option("--advisor-snapshot", default=None, metavar="COMMIT",
              help="Spot Advisor snapshot for interruption buckets: 4105b47a (default, 2026) or 5bdc33ce (2025-06-28).")
@click.pass_context
def catalog(ctx: click.Context, catalog_path: str | None, advisor_snapshot: str | None) -> None:
    """EC2 instance types, on-demand and spot prices, interruption rates."""
    ctx.obj = {"catalog": catalog_path, "advisor_snapshot": advisor_snapshot,
               "parent": ctx.obj}


@catalog.command("list")
@click.option("--gpu", help="GPU or accelerator name, e.g. V100, A100-80GB, T4, Trainium.")
@click.option("--family", help="Instance family, e.g. g5, p4d, c6i.")
@click.option("--region", help="Only types with prices in this region (and show that region's prices).")
@click.option("--instance-types", "name_glob", metavar="GLOB", help="Glob on the type name, e.g. 'g5.*'.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV on stdout.")
@click.pass_context
def list_cmd(ctx: click.Context, gpu: str | None, family: str | None, region: str | None,
             name_glob: str | None, as_json: bool, as_csv: bool) -> None:
    """List instance types with their GPUs, network and prices (like `sky show-gpus`)."""
    if as_json and as_csv:
        raise SriftyError("Give --json or --csv, not both.")
    cat = _load(ctx)
    types = cat.list(gpu=gpu, family=family, region=region, name_glob=name_glob)
    if not types:
        raise SriftyError("No instance type matches these filters.",
                          "To fix: relax the filters; `srifty catalog list` shows everything.")
    shown_region = region or cat.default_region
    rows = list_rows(types, shown_region)
    if as_json:
        click.echo(json.dumps({"schema": 1, "source": cat.source.kind, "region": shown_region, "instance_types": rows},
                              indent=1))
        return
    if as_csv:
        import csv

        w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in rows)
        return
    from rich.table import Table

    table = Table(title=f"Instance types ({cat.source.kind} catalog), prices in {shown_region}", title_justify="left")
    for col in ("GPU", "count", "instance type", "vCPUs", "memory", "network", "$/h", "spot $/h", "interruption"):
        table.add_column(col, justify="right" if col in ("count", "vCPUs", "memory", "$/h", "spot $/h") else "left")
    for it in types:
        name, count = _accelerator(it)
        p = it.price_in(shown_region)
        table.add_row(name, count, it.name, f"{it.vcpus:g}", "-" if it.memory_gib is None else f"{it.memory_gib:g} GiB",
                      _network(it), _money(p.ondemand_usd_per_hour if p else None),
                      _money(p.spot_min_usd_per_hour if p else None), _interruption(p))
    _console().print(table)
    click.echo("spot $/h: cheapest zone in the region; interruption: AWS Spot Advisor bucket (share of spot "
               "instances interrupted per month). `srifty catalog show TYPE` has every region.", err=True)


@catalog.command("show")
@click.argument("instance_type")
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
@click.pass_context
def show_cmd(ctx: click.Context, instance_type: str, as_json: bool) -> None:
    """Everything the catalog knows about one instance type, with prices in every region."""
    cat = _load(ctx)
    it = cat.get(instance_type)
    spec = cat.gpu_spec(it.gpu_name or it.accelerator_name) if (it.gpu_name or it.accelerator_name) else None
    factors = [c for c in cat.speed_corrections if spec is not None and c.gpu_name == spec.gpu_name]
    if as_json:
        doc = {"schema": 1, "source": cat.source.kind, "instance_type": it.to_dict(),
               "gpu_spec": None if spec is None else spec.__dict__,
               "gpu_speed_factors": {c.flops: c.factor for c in factors},
               "gpu_speed_conv_factors": {c.flops: c.conv_factor for c in factors}}
        click.echo(json.dumps(doc, indent=1))
        return
    from rich.table import Table

    console = _console()
    name, count = _accelerator(it)
    facts = Table(show_header=False, title=it.name, title_justify="left")
    facts.add_column("field")
    facts.add_column("value")
    facts.add_row("family", it.family)
    facts.add_row("GPUs", f"{count} × {name}" + (f" ({it.gpu_memory_gib:g} GiB each)" if it.gpu_memory_gib else ""))
    facts.add_row("vCPUs / memory", f"{it.vcpus:g} / " + ("-" if it.memory_gib is None else f"{it.memory_gib:g} GiB"))
    facts.add_row("network", _network(it) + ("" if it.network_gbps is not None else "  (baseline unknown)"))
    facts.add_row("EFA interfaces", str(it.efa_interfaces))
    facts.add_row("intra-node link", it.intra_node_link or "-")
    if it.intra_node_bandwidth_gbytes_per_s is not None:
        facts.add_row("intra-node bandwidth", f"{it.intra_node_bandwidth_gbytes_per_s:g} GB/s (as the source states it)")
    if it.emulation is not None:
        e = it.emulation
        facts.add_row("emulated host", f"cpu_share {e.cpu_share:g}, {e.workers} workers, {e.bandwidth_mbit:g} Mbit/s, "
                                       f"latency {e.latency_ms:g} ms")
    if spec is not None:
        def g(v: Any, unit: str) -> str:
            return "-" if v is None else f"{v:g}{unit}"

        facts.add_row("GPU spec", f"FP32 {g(spec.fp32_tflops, '')} / TF32 {g(spec.tf32_tflops_dense, '')} / "
                                  f"FP16-BF16 {g(spec.fp16_bf16_tensor_tflops_dense, '')} TFLOPS dense; "
                                  f"{g(spec.memory_bandwidth_gbytes_per_s, ' GB/s')}; SMs {g(spec.sm_count, '')}")
        if factors:  # srifty.gpuspeed: what transfers between two measured GPUs use
            facts.add_row("measured speed", ", ".join(f"{c.flops.upper()} ×{c.factor:.2f} (CNNs ×{c.conv_factor:.2f} more)"
                                                      for c in factors)
                          + f" on spec, against other measured GPUs ({max(c.rates for c in factors)} benchmark rates)")
    console.print(facts)
    prices = Table(title="prices ($/h)", title_justify="left")
    for col in ("region", "on-demand", "spot min", "spot median", "zones", "interruption", "rate/h", "on-demand source"):
        prices.add_column(col, justify="left" if col in ("region", "interruption", "on-demand source") else "right")
    for p in it.prices:
        prices.add_row(p.region, _money(p.ondemand_usd_per_hour), _money(p.spot_min_usd_per_hour),
                       _money(p.spot_median_usd_per_hour), str(p.spot_zones), _interruption(p),
                       "-" if p.interruption_per_hour is None else f"{p.interruption_per_hour:.2e}", p.ondemand_source or "-")
    console.print(prices)
    if spec is not None:
        click.echo(f"GPU spec source: {spec.source}", err=True)


@catalog.command("refresh")
@click.option("--region", "regions", multiple=True, default=("us-east-1",), show_default=True,
              help="Region to fetch (repeat for several). Rows of other regions are kept.")
@click.option("--force", is_flag=True, help="Overwrite a cached catalog that was edited by hand.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def refresh_cmd(regions: tuple[str, ...], force: bool, as_json: bool) -> None:
    """Rebuild the catalog from the AWS APIs into the user cache (needs AWS credentials).

    \b
    Calls DescribeInstanceTypeOfferings, DescribeInstanceTypes, DescribeSpotPriceHistory
    (per region) and the Pricing API's GetProducts (on-demand); writes
    $SRIFTY_CATALOG_DIR/ec2_catalog.csv atomically with its fetch time and content hash.
    """
    from srifty.catalog import refresh_catalog

    result = refresh_catalog(list(regions), force=force)
    for w in result.warnings:
        click.echo(f"warning: {w}", err=True)
    summary = {"path": str(result.path), "regions": result.regions, "instance_types": result.instance_types,
               "rows": result.rows, "spot_prices": result.spot_prices,
               "ondemand_from_pricing_api": result.ondemand_from_api, "fetched_at": result.fetched_at,
               "warnings": result.warnings}
    if as_json:
        click.echo(json.dumps(summary, indent=1))
        return
    click.echo(f"catalog written to {result.path}: {result.instance_types} instance types offered in "
               f"{', '.join(result.regions)}, {result.spot_prices} spot prices by zone, "
               f"{result.ondemand_from_api} on-demand prices from the Pricing API (fetched {result.fetched_at}).")

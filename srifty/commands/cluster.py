"""``srifty cluster``: bring the emulated cluster (network-namespace hosts) up and down.

A thin shell over :mod:`srifty.cluster`; data goes to stdout, messages to stderr.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict

import click

from srifty.commands import params

DEFAULT_SPEC = "configs/emulated.yaml"

EPILOG = """\b
Examples (as root):
  srifty cluster up --hosts emu.medium:2,emu.small:1
  srifty cluster up --spec configs/emulated.yaml --hosts emu.large:1,emu.net:2 --replace
  srifty cluster status
  srifty cluster calibrate          # measure each host type's real CPU slowdown
  srifty cluster check              # measure each link with a bounded TCP transfer
  srifty cluster down

Each host is a network namespace srifty-<cluster>-<host> with one interface (emu0)
on the emulated subnet, shaped with tc tbf in both directions, and a CPU quota
(cgroup). Nothing is added to the machine's own network namespace. See
docs/emulated-cluster.md.
"""

cluster_option = click.option(
    "--cluster", "cluster_name", default=lambda: os.environ.get("SRIFTY_CLUSTER", "main"), show_default="main",
    help="Name of the emulated cluster (several can coexist); env SRIFTY_CLUSTER.")


@click.group("cluster", epilog=EPILOG)
def cluster() -> None:
    """Emulated multi-host cluster on this machine (network namespaces, tc, cgroups; needs root)."""


@cluster.command("up", epilog=EPILOG)
@click.option("--spec", default=DEFAULT_SPEC, show_default=True, type=click.Path(dir_okay=False),
              help="Emulated instance catalog (YAML).")
@click.option("--hosts", required=True, help="TYPE:COUNT pairs, e.g. emu.medium:2,emu.small:1.")
@click.option("--replace", is_flag=True, help="Tear down a cluster with different hosts first.")
@click.option("--json", "as_json", is_flag=True, help="Print the cluster state as JSON.")
@cluster_option
def up_cmd(spec: str, hosts: str, replace: bool, as_json: bool, cluster_name: str) -> None:
    """Create the hosts (a no-op when the same hosts are already up)."""
    from srifty import cluster as lib

    parsed = lib.parse_hosts(hosts)
    loaded = lib.load_spec(spec)
    state = lib.up(loaded, parsed, cluster=cluster_name, replace=replace)  # SIGTERM unwinds: see srifty.cli.main
    if as_json:
        click.echo(json.dumps(state.to_dict(), indent=1))
    else:
        for h in state.hosts:
            click.echo(f"{h.name:10} {h.type_name:12} {h.address:15} {h.ifname}  "
                       f"{h.bandwidth_mbit:g} Mbit/s  {h.cpu_share:g} CPU  netns {h.namespace}")
    for note in state.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(f"cluster {state.cluster!r} is up ({len(state.hosts)} hosts, master address "
               f"{lib.master_address(state)}); state in {lib.state_path(state.cluster)}", err=True)


@cluster.command("down", epilog=EPILOG)
@click.option("--all", "all_clusters", is_flag=True, help="Also sweep every other srifty-* cluster.")
@cluster_option
def down_cmd(all_clusters: bool, cluster_name: str) -> None:
    """Kill processes on the hosts and remove everything up made (also after a crash)."""
    from srifty import cluster as lib

    report = lib.down(cluster=cluster_name, all_clusters=all_clusters)
    if report.removed_anything or report.state_file:
        click.echo(f"removed {report.summary()}", err=True)
    else:
        click.echo(f"nothing to remove for cluster {cluster_name!r}", err=True)


@cluster.command("status", epilog=EPILOG)
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@cluster_option
def status_cmd(as_json: bool, cluster_name: str) -> None:
    """Show hosts, addresses, shaping, CPU quotas, processes and leftovers."""
    from srifty import cluster as lib

    st = lib.status(cluster=cluster_name)
    if as_json:
        click.echo(json.dumps(st.to_dict(), indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    if not st.hosts:
        click.echo(f"cluster {cluster_name!r} is not up", err=True)
    else:
        table = Table(title=f"emulated cluster {st.cluster!r} ({'up' if st.up else 'DAMAGED'})")
        for col in ("host", "type", "address", "out (host->switch)", "in (switch->host)", "CPU quota",
                    "throttled", "processes"):
            table.add_column(col)
        for h in st.hosts:
            quota = (f"{h.quota_us / h.period_us:g} ({h.quota_us}/{h.period_us} us)"
                     if h.quota_us is not None and h.period_us else "missing")
            table.add_row(h.name, h.type_name, f"{h.address} ({h.ifname})" if h.present else "missing",
                          h.shaping_out, h.shaping_in, quota, f"{h.throttled_seconds:.1f} s",
                          str(len(h.processes)))
        Console(width=None if sys.stdout.isatty() else 160).print(table)
        click.echo(f"total CPU share {st.total_cpu_share:g} of {st.machine_cores:g} cores"
                   + (" (OVERSUBSCRIBED)" if st.oversubscribed else ""))
        for t, c in st.calibration.items():
            click.echo(f"CPU factor {t}: measured {c.factor:.2f}x (quota alone: {c.nominal_factor:.2f}x)")
    for p in st.problems:
        click.echo(f"problem: {p}", err=True)
    for o in st.orphans:
        click.echo(f"leftover (not in the state file; `srifty cluster down` removes it): {o}", err=True)


@cluster.command("calibrate", epilog=EPILOG)
@click.option("--repeats", type=params.whole(), default=3, show_default=True, help="Interleaved repeats per host type.")
@click.option("--iterations", type=params.whole(), default=1_500_000, show_default=True, help="Loop iterations per run.")
@click.option("--json", "as_json", is_flag=True, help="Print the factors as JSON.")
@cluster_option
def calibrate_cmd(repeats: int, iterations: int, as_json: bool, cluster_name: str) -> None:
    """Measure each host type's CPU slowdown vs an unconstrained run; store it in the state.

    Run it while the cluster is otherwise idle: it takes a few seconds per host type.
    """
    from srifty import cluster as lib

    state = lib.calibrate(lib.require_state(cluster_name), iterations=iterations, repeats=repeats)
    if as_json:
        click.echo(json.dumps({k: asdict(v) for k, v in state.calibration.items()}, indent=1))
        return
    for t, c in state.calibration.items():
        click.echo(f"{t:12} share {c.cpu_share:<5g} workers {c.workers}  measured {c.factor:.2f}x slower "
                   f"(quota alone: {c.nominal_factor:.2f}x)")


@cluster.command("check", epilog=EPILOG)
@click.option("--seconds", type=params.positive(), default=1.0, show_default=True,
              help="Target length of each transfer at the configured rate.")
@click.option("--json", "as_json", is_flag=True, help="Print the transfers as JSON.")
@cluster_option
def check_cmd(seconds: float, as_json: bool, cluster_name: str) -> None:
    """Measure each host's link: a bounded TCP transfer to the next host (hosts' own addresses only)."""
    from srifty import cluster as lib
    from srifty.cluster import probe

    state = lib.require_state(cluster_name)
    if len(state.hosts) < 2:
        raise click.ClickException("check needs at least 2 hosts.")
    rows = []
    for i, src in enumerate(state.hosts):
        dst = state.hosts[(i + 1) % len(state.hosts)]
        mbit = min(src.bandwidth_mbit, dst.bandwidth_mbit)
        t = probe.transfer(state, src.name, dst.name, nbytes=int(mbit * 1e6 / 8 * seconds))
        rows.append({"src": t.src, "dst": t.dst, "bytes": t.nbytes, "seconds": round(t.seconds, 4),
                     "configured_mbit": t.configured_mbit, "goodput_mbit": round(t.goodput_mbit, 2),
                     "ratio": round(t.ratio, 4)})
        if len(state.hosts) == 2:
            break
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    for r in rows:
        click.echo(f"{r['src']:>8} -> {r['dst']:<8} {r['bytes'] / 1e6:7.1f} MB in {r['seconds']:.3f} s: "
                   f"{r['goodput_mbit']:7.1f} Mbit/s goodput, {r['ratio']:.1%} of {r['configured_mbit']:g} Mbit/s")

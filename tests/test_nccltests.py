"""`srifty import-nccl`: the output of nccl-tests' all_reduce_perf as the network measurement
`srifty fit` reads. The logs here are the shipped nccl-tests rows (data/traces, measured on two
p4de.24xlarge nodes over EFA) printed as all_reduce_perf prints them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from conftest import ROOT, run_srifty

NCCL_CSV = ROOT / "data" / "traces" / "nccl_tests_allreduce_aws.csv"
P4DE = [r for r in csv.DictReader(NCCL_CSV.open()) if r["instance_type"] == "p4de.24xlarge" and r["nodes"] == "2"]
HOSTS = ("ip-10-1-33-1", "ip-10-1-33-2")


def _log(rows=P4DE, hosts=HOSTS, per_node=8, gpu="NVIDIA A100-SXM4-80GB", network: str | None = "AWS Libfabric",
         root=True, ranks=True, count_per_rank=1) -> str:
    """``rows`` as all_reduce_perf prints them (with nccl-tests' root column or, as older versions,
    without it); ``count_per_rank``: the element count divided so, as reduce_scatter_perf prints it."""
    lines = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 2147483648 step: 2(factor) warmup iters: 5 iters: 20 "
             "agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    if ranks:
        lines += [f"#  Rank {i:2d} Group  0 Pid {4000 + i:6d} on {hosts[i // per_node]:>12} device {i % per_node:2d} "
                  f"[0x{16 + i % per_node:02x}] {gpu}" for i in range(len(hosts) * per_node)]
    if network:
        lines.append(f"{hosts[0]}:4000:4000 [0] NCCL INFO Using network {network}")
    lines += ["#", "#       size         count      type   redop" + ("    root" if root else "")
              + "     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
              "#        (B)    (elements)" + ("        " if root else "")
              + "                    (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       "]
    for r in rows:
        cells = [r["size_bytes"], str(int(r["count"]) // count_per_rank), r["dtype"], r["redop"]]
        cells += (["-1"] if root else []) + [r["oop_time_us"], r["oop_algbw_GBps"], r["oop_busbw_GBps"], "0",
                                             r["ip_time_us"], r["ip_algbw_GBps"], r["ip_busbw_GBps"], "0"]
        lines.append(" ".join(f"{c:>12}" for c in cells))
    return "\n".join(lines + ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 41.2", "#"]) + "\n"


def _import(tmp_path: Path, text: str, instance_type: str = "p4de.24xlarge", **kw):
    from srifty.catalog import Catalog
    from srifty.nccltests import import_log

    log = tmp_path / "nccl.log"
    log.write_text(text)
    return import_log(str(log), str(tmp_path / "p4de.json"), instance_type, Catalog.default(), **kw)


def _shipped_p4de():
    from srifty.comm import measured_allreduce

    return sorted((r for r in measured_allreduce()[0] if r.instance_type == "p4de.24xlarge"), key=lambda r: r.nbytes)


def test_a_log_reads_as_the_allreduces_srifty_ships_and_fits_the_same(tmp_path: Path) -> None:
    """Every message size of the log becomes one allreduce of the profile at its out-of-place time;
    srifty reads those of 1 MiB or more exactly as it reads the shipped rows of the same run, so
    the type's EFA and NVLink efficiencies fit on them are the same."""
    from srifty import profile as profile_file
    from srifty.catalog import Catalog
    from srifty.comm import fit_fast_links
    from srifty.features import load_allreduce_rows

    got = _import(tmp_path, _log())
    assert (got.nodes, got.gpus_per_node, got.transport) == (2, [8, 8], "efa") and got.notes == []
    doc = profile_file.load(tmp_path / "p4de.json").doc  # a valid collectives profile
    assert doc["kind"] == "collectives" and doc["cluster"]["network"]["nccl_network"] == "AWS Libfabric"
    assert [c["bytes"] for c in doc["collectives"]] == [int(r["size_bytes"]) for r in P4DE]
    assert [c["median_ms"] for c in doc["collectives"]] == pytest.approx([float(r["oop_time_us"]) / 1e3 for r in P4DE])
    # nccl-tests prints GB/s, a profile holds Gbit/s (as srifty profile --collectives writes them)
    busbw = [8 * float(r["oop_busbw_GBps"]) for r in P4DE]
    assert [c["busbw_gbps"] for c in doc["collectives"]] == pytest.approx(busbw)
    rows = sorted(load_allreduce_rows([tmp_path / "p4de.json"]), key=lambda r: r.nbytes)
    shipped = _shipped_p4de()
    assert got.rows_fitted == len(rows) == len(shipped) > 10
    for mine, theirs in zip(rows, shipped):
        assert (mine.instance_type, mine.nodes, mine.gpus_per_node, mine.nbytes, mine.over_tcp) == \
            (theirs.instance_type, theirs.nodes, theirs.gpus_per_node, theirs.nbytes, False)
        assert mine.us == pytest.approx(theirs.us)
    cat = Catalog.default()
    assert fit_fast_links(cat, rows) == fit_fast_links(cat, shipped) != ()


def test_older_tables_and_logs_without_rank_lines_read_the_same(tmp_path: Path) -> None:
    from srifty.nccltests import NcclLogError

    full = _import(tmp_path, _log()).doc["collectives"]
    assert _import(tmp_path, _log(root=False)).doc["collectives"] == full
    bare = _log(ranks=False)
    with pytest.raises(NcclLogError, match="does not say how many GPUs ran on how many nodes"):
        _import(tmp_path, bare)
    assert _import(tmp_path, bare, nodes=2, gpus_per_node=8).doc["collectives"] == full
    with pytest.raises(NcclLogError, match="not the 4 --nodes says"):
        _import(tmp_path, _log(), nodes=4)


def test_hosts_that_print_one_name_are_split_as_nodes_says(tmp_path: Path) -> None:
    """Containers may all print the same hostname: 16 ranks "on" one host of an 8-GPU type cannot
    be one node, so --nodes says how many there were (an even split), and without it the log is
    refused rather than credited to the wrong link."""
    from srifty.nccltests import NcclLogError

    full = _import(tmp_path, _log())
    one_name = _log(hosts=("trainer", "trainer"))
    with pytest.raises(NcclLogError, match="all name the host trainer.*Give --nodes"):
        _import(tmp_path, one_name)
    with pytest.raises(NcclLogError, match="all name the host trainer"):
        _import(tmp_path, one_name, nodes=3)
    got = _import(tmp_path, one_name, nodes=2)
    assert (got.nodes, got.gpus_per_node) == (2, [8, 8]) and "taken as 2 nodes of 8 GPUs" in got.notes[0]
    assert got.doc["collectives"] == full.doc["collectives"]
    assert [h["spec"]["gpus"] for h in got.doc["cluster"]["hosts"]] == [["NVIDIA A100-SXM4-80GB"]] * 2


@pytest.mark.parametrize("text, words", [
    (_log(count_per_rank=16), "looks like reduce_scatter_perf's"),
    ("NCCL INFO Bootstrap : Using eth0\nall done\n", "no nccl-tests result table"),
    (_log(rows=[r for r in P4DE if int(r["size_bytes"]) < 1 << 20]), "none of its messages reaches 1 MiB"),
    (_log(gpu="NVIDIA H100 80GB HBM3"), "but p4de.24xlarge carries A100"),
    (_log(hosts=HOSTS, per_node=16, rows=P4DE), "ran 16 ranks on one host, and p4de.24xlarge has 8 GPUs"),
])
def test_a_log_that_cannot_measure_the_type_s_network_is_refused(tmp_path: Path, text: str, words: str) -> None:
    from srifty.nccltests import NcclLogError

    with pytest.raises(NcclLogError, match=words):
        _import(tmp_path, text)
    assert not (tmp_path / "p4de.json").exists()


def _one_node_rows(instance_type: str, gpus: int, nvlink_efficiency: float) -> list[dict[str, str]]:
    """P4DE's message sizes on one node of ``gpus`` GPUs of ``instance_type``, at the times the
    simulator gives its NVLink at ``nvlink_efficiency`` of the catalog's figure."""
    from srifty.catalog import Catalog
    from srifty.comm import allreduce_us
    from srifty.features import AllreduceRow, LinkScale

    rows = [AllreduceRow(instance_type, 1, gpus, float(r["size_bytes"]), 1.0) for r in P4DE]
    us = allreduce_us(Catalog.default(), rows, LinkScale(fast_links=((instance_type, nvlink_efficiency, 1.0),)))
    return [{**r, "oop_time_us": f"{t:.1f}", "oop_algbw_GBps": f"{int(r['size_bytes']) / t / 1e3:.2f}",
             "oop_busbw_GBps": f"{int(r['size_bytes']) / t / 1e3 * 2 * (gpus - 1) / gpus:.2f}"}
            for r, t in zip(P4DE, us)]


def test_a_log_of_one_nvlink_node_measures_its_nvlink_and_leaves_its_network_a_prior(tmp_path: Path) -> None:
    """Within one node of a type whose GPUs share NVLink, all_reduce_perf measures that link: the
    fit recovers the efficiency the log was made at, and the type's network across nodes stays
    a prior (its EFA efficiency unmeasured), where before any fitted entry counted as measured.
    One node whose GPUs share PCIe, or one GPU, is refused."""
    from srifty.catalog import Catalog
    from srifty.comm import fit_fast_links
    from srifty.configspec import parse_config
    from srifty.features import FeatureBuilder, LinkScale, hardware_of, load_allreduce_rows, load_job
    from srifty.model import fitted_link_types, network_source
    from srifty.nccltests import NcclLogError

    cat = Catalog.default()
    text = _log(rows=_one_node_rows("p5en.48xlarge", 8, 0.35), hosts=HOSTS[:1], gpu="NVIDIA H200",
                network=None)  # within a node no --transport is asked for
    got = _import(tmp_path, text, instance_type="p5en.48xlarge")
    assert (got.nodes, got.gpus_per_node, got.transport) == (1, [8], "nvlink")
    assert "not its network across nodes" in got.notes[0]
    rows = load_allreduce_rows([tmp_path / "p4de.json"])
    assert len(rows) == got.rows_fitted > 10 and {(r.nodes, r.over_tcp) for r in rows} == {(1, False)}
    assert fit_fast_links(cat, rows) == (("p5en.48xlarge", 0.35, None),)
    scale = LinkScale(fast_links=fit_fast_links(cat, rows))
    raw = hardware_of(cat, "p5en.48xlarge")
    hw = scale.apply(raw)
    assert hw.intra.gbytes_per_s == pytest.approx(0.35 * raw.intra.gbytes_per_s)
    assert hw.inter.gbytes_per_s == raw.inter.gbytes_per_s and not scale.network_measured(raw)
    assert LinkScale(fast_links=(("p5en.48xlarge", 0.35, 0.7),)).network_measured(raw)
    # what a prediction says of its links: within one node fitted on the type, across nodes a prior
    builder = FeatureBuilder(load_job(str(ROOT / "profiles" / "pollux" / "imagenet")), cat, scale)
    fitted = fitted_link_types(None, scale)
    assert [network_source(builder, parse_config(c).resolved(cat), fitted)
            for c in ("1xp5en.48xlarge:8", "2xp5en.48xlarge:8")] == ["fitted-on-type", "prior"]
    assert network_source(FeatureBuilder(builder.job, cat), parse_config("1xp5en.48xlarge:8").resolved(cat),
                          fitted_link_types(None, LinkScale())) == "prior"
    shown = run_srifty("show", str(tmp_path / "p4de.json"))
    assert shown.returncode == 0 and "Allreduce, nccl-tests log (p5en.48xlarge, nccl over NVLink)" in shown.stdout
    one_t4_node = _log(rows=_one_node_rows("p5en.48xlarge", 4, 1.0), hosts=HOSTS[:1], per_node=4, gpu="Tesla T4")
    with pytest.raises(NcclLogError, match="g4dn.12xlarge's GPUs share PCIe"):
        _import(tmp_path, one_t4_node, instance_type="g4dn.12xlarge")
    with pytest.raises(NcclLogError, match="one GPU"):
        _import(tmp_path, _log(hosts=HOSTS[:1], per_node=1), instance_type="p4de.24xlarge")


def test_the_transport_is_the_log_s_where_nccl_says_it(tmp_path: Path) -> None:
    """NCCL_DEBUG=INFO prints the network NCCL used: over sockets on an EFA type the log measures
    the TCP fallback (the fit keeps it apart); where the log does not say, an EFA type needs
    --transport, and a flag that contradicts the log is refused."""
    from srifty.features import load_allreduce_rows
    from srifty.nccltests import NcclLogError

    tcp = _import(tmp_path, _log(network="Socket"))
    assert tcp.transport == "tcp" and "measures the fallback" in tcp.notes[0]
    assert all(r.over_tcp for r in load_allreduce_rows([tmp_path / "p4de.json"]))
    with pytest.raises(NcclLogError, match="does not say whether NCCL ran over it"):
        _import(tmp_path, _log(network=None))
    assert _import(tmp_path, _log(network=None), transport="efa").transport == "efa"
    with pytest.raises(NcclLogError, match="not tcp as --transport says"):
        _import(tmp_path, _log(), transport="tcp")


def test_the_command_writes_a_profile_srifty_fit_reads(tmp_path: Path) -> None:
    """As a user would: the log imported beside a corpus, the model fitted on both takes the
    type's efficiencies from it; an --out over the log is refused with nothing written, and a
    bad log gets one paragraph and a non-zero exit."""
    from srifty import model as m
    from srifty.catalog import Catalog
    from srifty.comm import fit_fast_links

    log, out = tmp_path / "p4de-nccl.log", tmp_path / "mine" / "p4de.json"
    log.write_text(_log())
    res = run_srifty("import-nccl", str(log), "--instance-type", "p4de.24xlarge", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert str(out) in res.stdout and "29 message sizes" in res.stderr and "srifty fit" in res.stderr
    shown = run_srifty("show", str(out))
    assert shown.returncode == 0 and "Allreduce, nccl-tests log (p4de.24xlarge, nccl over EFA)" in shown.stdout
    res = run_srifty("fit", str(out.parent), str(ROOT / "profiles" / "emulated" / "mlp_recsys"), "--quick",
                     "--out", str(tmp_path / "m.npz"))
    assert res.returncode == 0, res.stderr
    fast = {t: (nv, efa) for t, nv, efa in m.load(str(tmp_path / "m.npz")).link_scale.fast_links}
    ((_, nv, efa),) = fit_fast_links(Catalog.default(), _shipped_p4de())
    assert fast["p4de.24xlarge"] == (nv, efa)
    before = log.read_text()
    res = run_srifty("import-nccl", str(log), "--instance-type", "p4de.24xlarge", "--out", str(log))
    assert res.returncode != 0 and "Nothing was written" in res.stderr and log.read_text() == before
    log.write_text(_log(count_per_rank=16))
    res = run_srifty("import-nccl", str(log), "--instance-type", "p4de.24xlarge", "--out", str(tmp_path / "x.json"))
    assert res.returncode != 0 and "Traceback" not in res.stderr and "reduce_scatter" in res.stderr
    assert not (tmp_path / "x.json").exists()
    json.loads(out.read_text())  # the first import is still there, whole

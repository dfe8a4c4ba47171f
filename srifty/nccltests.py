"""nccl-tests ``all_reduce_perf`` output as a collectives profile (``srifty import-nccl``).

A cluster's own allreduce measurements are the best figure srifty can have for its network, and
nccl-tests is what most clusters have already run. :func:`read_log` reads the text
``all_reduce_perf`` prints (its result table, the ``Rank ... on HOST device ... NAME`` lines that
say how many GPUs ran on how many hosts, and the ``NCCL INFO Using network ...`` line where
``NCCL_DEBUG=INFO`` was set); :func:`collectives_profile` turns it into the profile
``srifty profile --collectives`` writes, which ``srifty fit`` reads as it reads that one
(srifty.features.load_allreduce_rows: across nodes, the type's network over TCP, or its EFA and
NVLink efficiencies; within one node of an NVLink type, its NVLink efficiency alone).

The out-of-place time of each message size is taken, as for the nccl-tests rows srifty ships
(data/traces/nccl_tests_allreduce_aws.csv). A log that is not an allreduce (reduce_scatter_perf,
all_gather_perf, ... print the same table) is refused, as is one of a single host whose GPUs share
PCIe: srifty fits PCIe within a node on training runs, and a network on allreduces across nodes.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from srifty import __version__
from srifty.errors import SriftyError

if TYPE_CHECKING:  # pragma: no cover
    from srifty.catalog import Catalog

# bytes per element of the data types nccl-tests names
WORD_BYTES = {"int8": 1, "uint8": 1, "char": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "half": 2, "bfloat16": 2,
              "int32": 4, "uint32": 4, "int": 4, "float": 4, "int64": 8, "uint64": 8, "double": 8}
REDUCTIONS = ("sum", "prod", "max", "min", "avg", "mulsum", "premulsum", "all", "none")
TRANSPORTS = ("tcp", "efa")
# what a profile's network.transport says of an allreduce within one node (no network crossed)
WITHIN_NODE = "nvlink"
TRANSPORT_NAMES = {"tcp": "TCP", "efa": "EFA", WITHIN_NODE: "NVLink"}
# the smallest message srifty fits a network on (srifty.features.load_allreduce_rows)
MIN_FIT_BYTES = 1 << 20

_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+"
                   r"\[[^\]]*\]\s+(.+?)\s*$")
_HEADER = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
_ITERS = re.compile(r"warmup iters:\s*(\d+)\s+iters:\s*(\d+)")
_TESTS_VERSION = re.compile(r"nccl-tests version\s+(\S+)")
_NCCL_LIBRARY = re.compile(r"nccl-library=(\d+)")
_NCCL_VERSION = re.compile(r"NCCL version\s+(\d+\.\d+\.\d+)")
_NETWORK = re.compile(r"NCCL INFO Using network\s+(.+?)\s*$")


class NcclLogError(SriftyError):
    """A log that is not nccl-tests' allreduce across nodes, or that disagrees with what it is said to be."""


@dataclass(frozen=True)
class NcclRow:
    """One message size of the result table: out-of-place time and bandwidths (GB/s, as nccl-tests
    prints them; a profile's are Gbit/s), and the in-place time."""

    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int | None
    time_us: float
    algbw_gbytes_per_s: float
    busbw_gbytes_per_s: float
    in_place_time_us: float | None


@dataclass
class NcclLog:
    """What an ``all_reduce_perf`` log says: its results, who ran it, and with what."""

    rows: list[NcclRow]
    ranks: dict[int, tuple[str, str]] = field(default_factory=dict)  # rank -> (host, GPU name)
    tests_version: str | None = None
    nccl_version: str | None = None
    network: str | None = None  # NCCL's network plugin as its INFO line names it ("Socket", "AWS Libfabric")
    iterations: int | None = None
    warmup_iterations: int | None = None

    @property
    def transport(self) -> str | None:
        """"tcp" or "efa" where NCCL's INFO line says which network it ran on; None where it does not."""
        if self.network is None:
            return None
        word = self.network.lower()
        return "tcp" if word.startswith("socket") else "efa" if "libfabric" in word or "ofi" in word else None

    def hosts(self) -> dict[str, int]:
        """Ranks per host, in order of first rank."""
        return dict(Counter(host for _, (host, _gpu) in sorted(self.ranks.items())))


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _row(tokens: list[str]) -> NcclRow | None:
    """A result-table line (with nccl-tests' root column or without it), else None."""
    if len(tokens) not in (12, 13) or not (tokens[0].isdigit() and tokens[1].isdigit()):
        return None
    dtype, redop = tokens[2], tokens[3]
    if dtype not in WORD_BYTES or redop not in REDUCTIONS:
        return None
    root = None
    rest = tokens[4:]
    if len(tokens) == 13:
        try:
            root = int(rest[0])
        except ValueError:
            return None
        rest = rest[1:]
    t, alg, bus, ip_t = _number(rest[0]), _number(rest[1]), _number(rest[2]), _number(rest[4])
    if t is None or alg is None or bus is None or t <= 0:
        return None
    return NcclRow(int(tokens[0]), int(tokens[1]), dtype, redop, root, t, alg, bus, ip_t)


def read_log(text: str, source: str = "the log") -> NcclLog:
    """The results and set-up of an ``all_reduce_perf`` log (:class:`NcclLogError` if it has none,
    or is another collective's)."""
    log = NcclLog(rows=[])
    for line in text.splitlines():
        stripped = line.strip()
        if m := _RANK.match(stripped):
            log.ranks[int(m.group(1))] = (m.group(2), m.group(3))
        elif m := _NETWORK.search(stripped):
            log.network = log.network or m.group(1)
        elif stripped.startswith("#"):
            if m := _ITERS.search(stripped):
                log.warmup_iterations, log.iterations = int(m.group(1)), int(m.group(2))
            if m := _TESTS_VERSION.search(stripped):
                log.tests_version = m.group(1)
            if m := _NCCL_LIBRARY.search(stripped):
                code = int(m.group(1))  # NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch
                log.nccl_version = log.nccl_version or f"{code // 10000}.{code // 100 % 100}.{code % 100}"
        else:
            if m := _NCCL_VERSION.search(stripped):
                log.nccl_version = m.group(1)
            if (row := _row(stripped.split())) is not None:
                log.rows.append(row)
    if not log.rows:
        raise NcclLogError(f"{source}: no nccl-tests result table found.",
                           "Give the output all_reduce_perf prints (its stdout, with the '# size count type redop "
                           "...' table), run across two or more nodes.")
    for r in log.rows:
        per_rank = r.size_bytes != r.count * WORD_BYTES[r.dtype]
        if r.redop == "none" or (r.root is not None and r.root != -1) or per_rank:
            what = ("broadcast or all_gather" if r.redop == "none" else "reduce" if r.root not in (None, -1)
                    else "reduce_scatter")
            raise NcclLogError(f"{source}: its table is not an allreduce's (the {r.size_bytes}-byte row looks like "
                               f"{what}_perf's: {r.count} {r.dtype} elements, reduction {r.redop}"
                               + (f", root {r.root}" if r.root is not None else "") + ").",
                               "Give the output of all_reduce_perf: srifty fits a network on allreduces, which "
                               "is what data-parallel training runs.")
    return log


@dataclass
class NcclImport:
    """A log read as a collectives profile (``doc``), with what the reader should know."""

    doc: dict[str, Any]
    notes: list[str]
    nodes: int
    gpus_per_node: list[int]
    transport: str
    rows_fitted: int  # messages of MIN_FIT_BYTES or more: what srifty fits the network on


def _gpu_matches(catalog_gpu: str, device_name: str) -> bool:
    """Whether the GPU a log's rank names is the catalog's board (its name's words, e.g. "A100",
    among the device name's: "NVIDIA A100-SXM4-40GB")."""
    words = set(re.split(r"[\s\-_]+", device_name.upper()))
    want = [w for w in re.split(r"[\s\-_]+", catalog_gpu.upper()) if w and w not in ("NVIDIA", "TESLA")]
    return bool(want) and all(w in words for w in want)


def collectives_profile(log: NcclLog, text: str, instance_type: str, catalog_gpu: str | None, gpu_count: int,
                        efa_capable: bool, transport: str | None = None, placement_group: bool = False,
                        nodes: int | None = None, gpus_per_node: int | None = None,
                        source: str = "the log", created_at: str = "", nvlink: bool = False) -> NcclImport:
    """The collectives profile of ``log`` (whose text is ``text``) measured on ``instance_type``
    (``catalog_gpu``, ``gpu_count``: its GPU as the catalog names it, and how many a node has;
    ``efa_capable``: whether srifty takes its network across nodes as EFA, Hardware.inter_kind;
    ``nvlink``: whether its GPUs share NVLink/NVSwitch, Hardware.intra_kind, which a log of one node
    measures).

    ``transport`` (tcp/efa) where NCCL's INFO line does not say; ``nodes`` and ``gpus_per_node``
    where the log has no ``Rank`` lines (they must agree with those it has)."""
    hosts = log.hosts()
    notes: list[str] = []
    if len(hosts) == 1 and gpu_count and len(log.ranks) > gpu_count:  # one name for several hosts: containers
        ((name, ranks),) = hosts.items()
        if nodes is None or ranks % nodes or ranks // nodes > gpu_count:
            raise NcclLogError(f"{source}: its {ranks} ranks all name the host {name}, and {instance_type} has "
                               f"{gpu_count} GPUs, so the log does not say how many nodes ran it (containers whose "
                               "hostnames are the same print one name).",
                               "Give --nodes, the nodes the run used (each with the same number of ranks), and "
                               "check --instance-type.")
        hosts = {f"{name} ({i + 1} of {nodes})": ranks // nodes for i in range(nodes)}
        notes.append(f"the log's ranks all name the host {name}: taken as {nodes} nodes of {ranks // nodes} GPUs, as "
                     "--nodes says")
    if hosts:
        per_node = list(hosts.values())
        if nodes is not None and nodes != len(per_node):
            raise NcclLogError(f"{source}: its ranks ran on {len(per_node)} host(s) ({', '.join(hosts)}), "
                               f"not the {nodes} --nodes says.", "Drop --nodes, or give the log of that run.")
        if gpus_per_node is not None and set(per_node) != {gpus_per_node}:
            raise NcclLogError(f"{source}: its ranks ran {'+'.join(map(str, per_node))} per host, not the "
                               f"{gpus_per_node} --gpus-per-node says.", "Drop --gpus-per-node, or give the log of "
                               "that run.")
    elif nodes is None or gpus_per_node is None:
        raise NcclLogError(f"{source}: it has no '# Rank N ... on HOST device ...' lines, so it does not say how "
                           "many GPUs ran on how many nodes.",
                           "Give --nodes and --gpus-per-node, or the whole output of all_reduce_perf.")
    else:
        per_node = [gpus_per_node] * nodes
    if gpu_count and max(per_node) > gpu_count:
        raise NcclLogError(f"{source}: it ran {max(per_node)} ranks on one host, and {instance_type} has {gpu_count} "
                           "GPUs.", "Check --instance-type (and --gpus-per-node): the fit would credit this network "
                           "to it.")
    if len(per_node) < 2 and (not nvlink or per_node[0] < 2):
        why = ("one GPU, where the allreduce crosses no link" if per_node[0] < 2 else
               f"one node, and {instance_type}'s GPUs share PCIe, which srifty fits on training runs (srifty "
               "profile --nproc N on one node), not on allreduces")
        raise NcclLogError(f"{source}: it ran on {why}.",
                           "Run all_reduce_perf across two or more nodes of the type (e.g. mpirun -np 16 -N 8 -x "
                           "NCCL_DEBUG=INFO all_reduce_perf -b 8 -e 2G -f 2 on two nodes of 8 GPUs): srifty fits a "
                           "type's network on allreduces across nodes.")
    gpus = sorted({gpu for _, gpu in log.ranks.values()})
    if catalog_gpu and gpus and not all(_gpu_matches(catalog_gpu, g) for g in gpus):
        raise NcclLogError(f"{source}: its ranks ran on {', '.join(gpus)}, but {instance_type} carries "
                           f"{catalog_gpu}.", "Check --instance-type: the fit would credit this network to it.")
    found = log.transport
    if transport is not None and found is not None and transport != found:
        raise NcclLogError(f"{source}: NCCL says it used the network '{log.network}' ({found}), not {transport} "
                           "as --transport says.", "Drop --transport: the log's own line is the measurement's.")
    if len(per_node) == 1:  # within one node NCCL runs over NVLink whatever network it loaded
        chosen = WITHIN_NODE
        notes.append(f"one node: this measures the NVLink between {instance_type}'s GPUs, not its network across "
                     "nodes, which stays a prior until a log across nodes is imported")
    else:
        chosen = transport or found or (None if efa_capable else "tcp")
    if chosen is None:
        raise NcclLogError(f"{source}: {instance_type} has EFA, and the log does not say whether NCCL ran over it "
                           "or fell back to TCP sockets (no 'NCCL INFO Using network' line).",
                           "Give --transport efa (the aws-ofi-nccl plugin was loaded) or --transport tcp; "
                           "NCCL_DEBUG=INFO makes all_reduce_perf print it.")
    if chosen == "efa" and not efa_capable:
        notes.append(f"NCCL ran over EFA, but srifty takes {instance_type}'s network as TCP sockets (EFA only at "
                     "100 Gbit/s or more), and fits that network on this run")
    world = sum(per_node)
    by_size: dict[int, NcclRow] = {}
    for r in log.rows:  # one row per size (a log of several runs: the first)
        by_size.setdefault(r.size_bytes, r)
    collectives = [{
        "op": "allreduce", "world_size": world, "nodes": len(per_node), "workers_per_node": per_node,
        "instance_types": [instance_type], "bytes": r.size_bytes, "dtype": r.dtype,
        "times_ms": [r.time_us / 1e3], "median_ms": r.time_us / 1e3, "p10_ms": r.time_us / 1e3,
        "p90_ms": r.time_us / 1e3, "algbw_gbps": r.algbw_gbytes_per_s * 8, "busbw_gbps": r.busbw_gbytes_per_s * 8,
    } for r in sorted(by_size.values(), key=lambda r: r.size_bytes)]
    fitted = sum(1 for r in by_size.values() if r.size_bytes >= MIN_FIT_BYTES)
    if len(by_size) < len(log.rows):
        notes.append(f"{len(log.rows) - len(by_size)} repeated message size(s): the first row of each was taken")
    if not fitted:
        raise NcclLogError(f"{source}: none of its messages reaches 1 MiB, and srifty fits a network on messages "
                           "that large or larger (smaller ones measure latency alone).",
                           "Run all_reduce_perf up to a large message (-e 1G or more) and give that log.")
    if chosen == "tcp" and efa_capable:
        notes.append(f"{instance_type} has EFA, but this run used TCP sockets: it measures the fallback, the slow "
                     "end of the type's interval, not its EFA network")
    ranks = sorted(log.ranks.items())
    every_gpu = sorted({g for _, g in log.ranks.values()})  # hosts named by --nodes: any rank's
    host_names = list(hosts) or [f"node{i}" for i in range(len(per_node))]
    doc = {
        "schema_version": 2, "kind": "collectives", "status": "complete", "partial_reason": None,
        "stop_reason": "imported", "created_at": created_at, "srifty_version": __version__,
        "cluster": {
            "launcher": "nccl-tests", "backend": "nccl", "device": "cuda", "world_size": world,
            "nodes": len(per_node), "workers_per_node": per_node, "instance_types": [instance_type],
            "hosts": [{"name": h, "instance_type": instance_type, "workers": n,
                       "spec": {"gpus": sorted({g for _, (host, g) in ranks if host == h}) or every_gpu}}
                      for h, n in zip(host_names, per_node)],
            "network": {"transport": chosen, "placement_group": placement_group,
                        "nccl_network": log.network,
                        "transport_from": "one node" if chosen == WITHIN_NODE else "the log" if found
                        else "--transport" if transport else "the catalog"},
        },
        "environment": {"python": "unknown", "torch": None, "srifty": __version__, "nccl": log.nccl_version,
                        "nccl_tests": log.tests_version},
        "measurement": {"target_rel_ci": 1.0, "source": "nccl-tests all_reduce_perf",
                        "log_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
                        **({"iterations_used": log.iterations} if log.iterations else {}),
                        **({"warmup_iterations": log.warmup_iterations} if log.warmup_iterations is not None else {})},
        "collectives": collectives,
        "warnings": notes,
    }
    return NcclImport(doc, notes, len(per_node), per_node, chosen, fitted)


def import_log(log_path: str, out: str, instance_type: str, catalog: "Catalog", transport: str | None = None,
               placement_group: bool = False, nodes: int | None = None, gpus_per_node: int | None = None
               ) -> NcclImport:
    """``srifty import-nccl``: the all_reduce_perf log ``log_path``, run on ``instance_type``, as a
    collectives profile written to ``out`` (never over the log itself)."""
    from srifty import profile as profile_file
    from srifty.features.hardware import hardware_of
    from srifty.outputs import Input, Output, check_writable, refuse_clobbering

    out_file = Output(out, "--out")
    refuse_clobbering([out_file], [Input(log_path, "the log")])
    check_writable(out_file)
    it = catalog.get(instance_type)  # unknown: one error with 'Did you mean'
    if not it.gpu_count:
        raise NcclLogError(f"{instance_type} has no NVIDIA GPU, so NCCL's allreduce does not run on it.",
                           "Give the instance type the log was recorded on (--instance-type).")
    try:
        text = Path(log_path).read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise NcclLogError(f"Cannot read the log {log_path}: {exc.strerror}.", "Check the path.") from None
    log = read_log(text, log_path)
    hw = hardware_of(catalog, instance_type)
    got = collectives_profile(log, text, instance_type, it.gpu_name, it.gpu_count, hw.inter_kind == "efa", transport,
                              placement_group, nodes, gpus_per_node, log_path, profile_file.utc_now(),
                              hw.intra_kind == "nvlink")
    profile_file.save(got.doc, out)
    return got

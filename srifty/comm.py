"""The communication model: what links achieve, fitted on measurements (:class:`CommModel`).

On real clusters, TCP/PCIe efficiencies and the latency factor are fitted on measured multi-worker
training runs, each TCP type's own network on its runs across nodes or its allreduces, and NVLink
and EFA efficiencies on measured allreduces (nccl-tests rows); on the emulated cluster, the links'
goodput and latency come from the allreduce sweeps and only the overlap slowdown from the training
runs. The result is a :class:`srifty.features.LinkScale`, which the latency model
(srifty.model) simulates every configuration with.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from srifty.errors import SriftyError
from srifty.features import (INTER_LATENCY_US, TBF_GOODPUT, AllreduceRow, CollectivePoint, FeatureBuilder,
                             JobProfile, LinkScale, Run, hardware_of, run_config, with_fitted_overlap)

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from srifty.catalog import Catalog

MIN_OVERLAP_RUNS = 6  # emulated multi-host training runs needed to fit the overlap slowdown
MIN_SWEEP_BYTES = 256 * 1024  # below this, allreduces on CPU-throttled emulated hosts are mostly scheduler noise
BULK_SWEEP_BYTES = 4 * 1024 * 1024  # sustained goodput: messages at least this large (DDP streams its buckets)
MIN_RATE_POINTS = 3  # bulk sweep points a link rate needs for a goodput of its own
# runs across one node count of a measured TCP type needed to fit that count's share of its network
# (LinkScale.tcp_node_shares), the shares tried (quarter octaves), and how much a share must lower
# those runs' median absolute log error to be kept: more than repeated measurements of one
# configuration scatter (Pollux's noise floor, 4.9%: docs/ACCURACY.md); a smaller gain is noise
MIN_NODE_COUNT_RUNS = 150
NODE_SHARE_GRID = (0.5, 0.59, 0.71, 0.84, 1.19, 1.41, 1.68, 2.0)
NODE_SHARE_MIN_GAIN = 0.05


def _ring_terms(pts: Sequence[CollectivePoint]) -> tuple["np.ndarray", "np.ndarray", "np.ndarray"]:
    """Of sweep points: measured ms, the ring's ms at the configured rate of the slowest link
    (2(p−1)/p · S/B) and its step count 2(p−1), so that t = x1 / goodput + x2 · α."""
    import numpy as np

    t = np.array([p.ms for p in pts])
    x1 = np.array([2 * (p.world - 1) / p.world * p.nbytes * 8 / (p.bottleneck_mbit * 1e6) * 1e3 for p in pts])
    x2 = np.array([2.0 * (p.world - 1) for p in pts])
    return t, x1, x2


def _bounded_goodput(inv_g: float) -> float:
    """1 / ``inv_g`` kept within 0.2-1 of the configured rate (a positive ``inv_g``)."""
    return float(min(max(1.0 / inv_g, 0.2), 1.0))


def fit_emulated_links(points: Sequence[CollectivePoint]) -> tuple[float, float, int]:
    """(goodput, per-step latency µs, points used) of ring allreduce across emulated hosts.

    Fits t = 2(p−1)/p · S/(g·B) + 2(p−1)·α to the allreduce sweeps (messages of at least
    MIN_SWEEP_BYTES) by least squares on relative error, B being the configured rate of the
    slowest host's link. Without sweeps: the tbf framing prior (TBF_GOODPUT) and
    INTER_LATENCY_US.
    """
    import numpy as np

    pts = [p for p in points if p.nbytes >= MIN_SWEEP_BYTES and p.world >= 2 and p.ms > 0 and not p.slowest_hosts]
    if len(pts) < 4:
        return TBF_GOODPUT, INTER_LATENCY_US, 0
    t, x1, x2 = _ring_terms(pts)
    A = np.stack([x1, x2], axis=1) / t[:, None]
    (inv_g, alpha_ms), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    if alpha_ms < 0:  # latency not resolvable: bandwidth alone
        alpha_ms = 0.0
        inv_g = float(np.sum(x1 / t) / np.sum((x1 / t) ** 2))
    goodput = _bounded_goodput(inv_g) if inv_g > 0 else TBF_GOODPUT
    return goodput, float(max(alpha_ms * 1e3, 1.0)), len(pts)


def _inverse_goodput(pts: Sequence[CollectivePoint], latency_us: float) -> float:
    """1 / goodput of the α–β ring formula on ``pts`` with the per-step latency fixed, least
    squares on relative error (not positive when the points cannot give one)."""
    import numpy as np

    t, x1, x2 = _ring_terms(pts)
    x1, rest = x1 / t, 1.0 - x2 * latency_us / 1e3 / t
    return float(np.sum(x1 * rest) / np.sum(x1 ** 2))


def fit_emulated_mixed_ring(points: Sequence[CollectivePoint], scale: LinkScale) -> tuple[float, float]:
    """``LinkScale.emulated_mixed_ring`` from the sweeps of rings that mix link rates: for each
    such sweep, the goodput of its slowest link (the α–β formula with ``scale``'s per-step
    latency, least squares on relative error over its messages of BULK_SWEEP_BYTES or more)
    over what ``scale`` gives a ring of that rate alone; the median of those ratios over the
    sweeps with one host at the slowest rate, and over those with two or more (1 where none)."""
    import numpy as np

    by_config: dict[str, list[CollectivePoint]] = {}
    for p in points:
        if p.slowest_hosts and p.nbytes >= BULK_SWEEP_BYTES and p.world >= 2 and p.ms > 0:
            by_config.setdefault(p.config, []).append(p)
    ratios: dict[bool, list[float]] = {False: [], True: []}
    for pts in by_config.values():
        inv_g = _inverse_goodput(pts, scale.emulated_latency_us)
        if inv_g > 0:
            alone = scale.emulated_goodput_at(pts[0].bottleneck_mbit)
            ratios[pts[0].slowest_hosts >= 2].append(_bounded_goodput(inv_g) / alone)
    one, many = (float(min(np.median(r), 1.0)) if r else 1.0 for r in (ratios[False], ratios[True]))
    return one, many


def fit_emulated_goodput_by_rate(points: Sequence[CollectivePoint], latency_us: float
                                 ) -> tuple[tuple[float, float], ...]:
    """(configured Mbit/s, sustained goodput) for every bottleneck rate the sweeps measured with
    at least MIN_RATE_POINTS messages of BULK_SWEEP_BYTES or more: the goodput of the α–β
    formula with the pooled per-step latency, least squares on relative error."""
    by_rate: dict[float, list[CollectivePoint]] = {}
    for p in points:
        if p.nbytes >= BULK_SWEEP_BYTES and p.world >= 2 and p.ms > 0 and not p.slowest_hosts:
            by_rate.setdefault(float(p.bottleneck_mbit), []).append(p)
    table = []
    for mbit, pts in sorted(by_rate.items()):
        if len(pts) < MIN_RATE_POINTS:
            continue
        inv_g = _inverse_goodput(pts, latency_us)
        if inv_g > 0:
            table.append((mbit, _bounded_goodput(inv_g)))
    return tuple(table)


# --------------------------------------------------------------------------- measured allreduces (nccl-tests)

NCCL_TESTS = Path(__file__).resolve().parent.parent / "data" / "traces" / "nccl_tests_allreduce_aws.csv"
NCCL_MIN_BYTES = 1 << 20  # DDP's buckets are 1-25 MiB: the bandwidth regime is what matters
FAST_LINK_GRID = (0.1, 0.18, 0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0)
TCP_ALLREDUCE_GRID = tuple(round(10 ** (-2 + 0.05 * i), 5) for i in range(41))  # 1% to 100% of the catalog rate


def measured_allreduce(path: str | Path = NCCL_TESTS) -> tuple[list[AllreduceRow], list[str]]:
    """nccl-tests ``all_reduce_perf`` out-of-place rows of at least NCCL_MIN_BYTES whose source
    states the node count, and notes on what was left out."""
    import csv

    rows, no_nodes = [], 0
    if not Path(path).exists():
        return [], [f"{path}: not found; NVLink/EFA links keep the catalog's figures."]
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            if r["test"] != "all_reduce_perf" or int(r["size_bytes"]) < NCCL_MIN_BYTES:
                continue
            if not r["nodes"].strip():
                no_nodes += 1
                continue
            rows.append(AllreduceRow(r["instance_type"], int(r["nodes"]), int(r["gpus_per_node"]),
                                     float(r["size_bytes"]), float(r["oop_time_us"])))
    notes = [f"nccl-tests: {no_nodes} rows of at least 1 MiB whose source does not state the node count were "
             "left out."] if no_nodes else []
    return rows, notes


def allreduce_us(catalog: "Catalog", rows: Sequence[AllreduceRow], scale: LinkScale | None) -> "np.ndarray":
    """The simulator's allreduce estimate for each row, in µs (the flat ring, or the best of it and
    the hierarchical form on NVLink/NVSwitch nodes, as in the iteration's simulation). A row of an
    EFA type that ran over TCP goes over its TCP fallback (LinkScale.tcp_gbps)."""
    import numpy as np

    from srifty import simulate

    scale = scale or LinkScale()
    hws: dict[tuple[str, bool, bool], Any] = {}
    out = []
    for r in rows:
        key = (r.instance_type, r.placement_group or scale.placement_group, r.over_tcp)  # as the row's nodes sat
        if key not in hws:
            sat = replace(scale, placement_group=key[1])
            raw = hardware_of(catalog, r.instance_type)
            hw = sat.apply(raw)
            if r.over_tcp and raw.inter_kind == "efa":
                tcp = simulate.Link(sat.tcp_gbps(raw) / 8.0, raw.inter.latency_us * sat.latency_factor)
                hw = replace(hw, inter=tcp)
            hws[key] = hw
        hw = hws[key]
        out.append(simulate.allreduce_ms(r.nbytes, [r.gpus_per_node] * r.nodes, hw.intra, hw.inter,
                                         hierarchical=hw.hierarchical_allreduce) * 1e3)
    return np.array(out)


def rows_in_catalog(catalog: "Catalog", rows: Sequence[AllreduceRow]) -> tuple[list[AllreduceRow], list[str]]:
    """The rows whose instance type the catalog knows, and the (sorted) types it does not."""
    known_types: dict[str, bool] = {}
    for t in {r.instance_type for r in rows}:
        try:
            catalog.get(t)
            known_types[t] = True
        except SriftyError:
            known_types[t] = False
    return [r for r in rows if known_types[r.instance_type]], sorted(t for t, ok in known_types.items() if not ok)


def fit_tcp_allreduce(catalog: "Catalog", rows: Sequence[AllreduceRow], scale: LinkScale
                      ) -> tuple[tuple[str, float], ...]:
    """Per TCP (ENA) type with allreduces measured across 2+ nodes of it: the effective Gbit/s
    (LinkScale.tcp_links) minimising the median absolute log error of the allreduce estimate on
    them, over efficiencies on the catalog rate from 1% to 100% (the other figures of ``scale``
    fixed)."""
    known, _ = rows_in_catalog(catalog, rows)
    out = []
    for itype in sorted({r.instance_type for r in known if r.nodes >= 2}):
        hw = hardware_of(catalog, itype)
        if hw.emulated or hw.inter_kind != "tcp":
            continue
        mine = [r for r in known if r.instance_type == itype and r.nodes >= 2]
        out.append((itype, _best_tcp_gbps(catalog, mine, scale, itype, "tcp_links")))
    return tuple(out)


def _best_tcp_gbps(catalog: "Catalog", rows: Sequence[AllreduceRow], scale: LinkScale, itype: str,
                   field: str) -> float:
    """The Gbit/s of ``itype``'s TCP path, set as ``scale``'s ``field`` (``tcp_links`` or
    ``tcp_fallback``), whose allreduce estimate of ``rows`` has the least median absolute log error,
    over TCP_ALLREDUCE_GRID efficiencies on the catalog rate (rounded as LinkScale keeps it)."""
    import numpy as np

    y = np.array([r.us for r in rows])
    cap = hardware_of(catalog, itype).inter.gbytes_per_s * 8.0
    best = min((float(np.median(np.abs(np.log(allreduce_us(catalog, rows, replace(
        scale, **{field: ((itype, cap * e),)})) / y)))), cap * e) for e in TCP_ALLREDUCE_GRID)
    return round(best[1], 4)


TCP_ON_EFA_NOTE = ("the allreduce sweeps across {itype} nodes ran over TCP (srifty's EC2 backend attaches no EFA "
                   "interface): they measure the fallback, the slow end of {itype}'s interval, not the EFA network "
                   "predictions take for {itype}, which stays a prior")


def tcp_on_efa(catalog: "Catalog", rows: Sequence[AllreduceRow]) -> list[str]:
    """The EFA types whose only measured allreduces across nodes ran over TCP (srifty's EC2
    backend attaches no EFA interface): they measure the TCP fallback, not the EFA network that
    predictions take for the type, so nothing is fitted from them."""
    known, _ = rows_in_catalog(catalog, rows)
    over_efa = {r.instance_type for r in known if not r.over_tcp and r.nodes >= 2}
    return sorted({r.instance_type for r in known if r.over_tcp and r.nodes >= 2
                   and r.instance_type not in over_efa and hardware_of(catalog, r.instance_type).inter_kind == "efa"})


def fit_tcp_fallback(catalog: "Catalog", rows: Sequence[AllreduceRow], scale: LinkScale
                     ) -> tuple[tuple[str, float], ...]:
    """Per EFA type whose allreduces across nodes ran over TCP only (:func:`tcp_on_efa`): the
    effective Gbit/s of that fallback (LinkScale.tcp_fallback, as outside a placement group)
    minimising the median absolute log error of the allreduce estimate on them, over efficiencies
    on the catalog rate from 1% to 100% (the other figures of ``scale`` fixed)."""
    known, _ = rows_in_catalog(catalog, rows)
    out = []
    for itype in tcp_on_efa(catalog, known):
        mine = [r for r in known if r.instance_type == itype and r.nodes >= 2 and r.over_tcp]
        out.append((itype, _best_tcp_gbps(catalog, mine, scale, itype, "tcp_fallback")))
    return tuple(out)


def fit_fast_links(catalog: "Catalog", rows: Sequence[AllreduceRow]
                   ) -> tuple[tuple[str, float, float | None], ...]:
    """Per instance type with measured allreduces: the NVLink and EFA efficiencies minimising the
    median absolute log error of the allreduce estimate on that type's rows (types the catalog
    does not know are skipped; NVLink stays 1.0 where the rows cannot tell it). A type whose rows
    all ran within one node measures NVLink alone: its EFA efficiency is None, its network across
    nodes a prior still (LinkScale.network_measured); such rows of a type whose GPUs share PCIe
    measure no fast link. Rows that ran over TCP (:func:`tcp_on_efa`) measure no fast link."""
    import numpy as np

    known, _ = rows_in_catalog(catalog, [r for r in rows if not r.over_tcp])
    out = []
    for itype in sorted({r.instance_type for r in known}):
        mine = [r for r in known if r.instance_type == itype]
        across = any(r.nodes >= 2 for r in mine)
        if not across and hardware_of(catalog, itype).intra_kind != "nvlink":
            continue
        y = np.array([r.us for r in mine])
        best = None
        for nv in (1.0,) + FAST_LINK_GRID:  # 1.0 first: ties keep the catalog's figure
            for efa in ((1.0,) + FAST_LINK_GRID if across else (1.0,)):
                err = float(np.median(np.abs(np.log(allreduce_us(catalog, mine, LinkScale(
                    fast_links=((itype, nv, efa),))) / y))))
                if best is None or err < best[0] - 1e-9:
                    best = (err, nv, efa)
        out.append((itype, best[1], best[2] if across else None))
    return tuple(out)


class RunSimulator:
    """The simulator's step times of fixed (job, run) pairs under link figures that vary, as a grid
    search of them asks: each job's compute is worked out once, and only what the links set anew
    (FeatureBuilder.with_link_scale)."""

    def __init__(self, pairs: Sequence[tuple[JobProfile, Run]], catalog: "Catalog") -> None:
        import numpy as np

        self.pairs = list(pairs)
        self.measured_ms = np.array([r.step_ms for _, r in self.pairs])
        self._builders = {j.model: FeatureBuilder(j, catalog) for j, _ in self.pairs}
        self._rows = [(run_config(r), r.local_batch_size) for _, r in self.pairs]

    def simulated_ms(self, scale: LinkScale) -> "np.ndarray":
        """Each pair's simulated iteration time with the link figures ``scale``."""
        import numpy as np

        builders = {model: b.with_link_scale(scale) for model, b in self._builders.items()}
        return np.array([builders[j.model].sim_ms(config, batch)
                         for (j, _), (config, batch) in zip(self.pairs, self._rows)])

    def median_log_error(self, scale: LinkScale) -> float:
        """Median |log(simulated / measured)| of the pairs' step times with the link figures ``scale``."""
        import numpy as np

        return float(np.median(np.abs(np.log(self.simulated_ms(scale) / self.measured_ms))))


def simulated_ms(pairs: Sequence[tuple[JobProfile, Run]], catalog: "Catalog", scale: LinkScale) -> "np.ndarray":
    """The simulator's iteration time of each (job, run) with the link figures ``scale``."""
    return RunSimulator(pairs, catalog).simulated_ms(scale)


@dataclass
class CommModel:
    """Achieved link efficiency: fitted on measured multi-worker runs of real clusters (a grid
    search minimising the simulator's median absolute log error); for emulated hosts the link
    goodput and latency come from the allreduce sweeps (:func:`fit_emulated_links`), never from
    the training runs, and only the overlap slowdown is fitted on the emulated training runs."""

    inter_grid: tuple[float, ...] = tuple(round(10 ** (-2.5 + 0.25 * i), 5) for i in range(11))
    intra_grid: tuple[float, ...] = (0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0)
    latency_grid: tuple[float, ...] = (1.0, 10.0)
    # backward's slowdown per busy peer while a collective runs on the same CPU (LinkScale.emulated_overlap_slowdown)
    overlap_grid: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
    max_rows: int = 600
    link_scale_: LinkScale | None = None
    score_: float | None = None
    n_rows_: int = 0
    n_sweep_points_: int = 0
    n_allreduce_rows_: int = 0
    tcp_on_efa_types_: tuple[str, ...] = ()
    n_overlap_runs_: int = 0

    def fit(self, jobs: Sequence[JobProfile], catalog: "Catalog", collectives: Sequence[CollectivePoint] = (),
            allreduce: Sequence[AllreduceRow] = ()) -> "CommModel":
        """TCP/PCIe efficiencies and latency on the multi-worker runs whose every host has TCP
        networking and PCIe within the node; NVLink/EFA efficiencies on measured allreduces
        (``allreduce``: nccl-tests rows, see :func:`measured_allreduce`); emulated links on the
        sweeps."""
        import numpy as np

        goodput, lat_us, self.n_sweep_points_ = fit_emulated_links(collectives)
        self.n_allreduce_rows_ = len(allreduce)
        self.tcp_on_efa_types_ = tuple(tcp_on_efa(catalog, allreduce))
        emu = {"emulated_goodput": goodput, "emulated_latency_us": lat_us,
               "emulated_goodput_by_mbit": fit_emulated_goodput_by_rate(collectives, lat_us),
               "fast_links": fit_fast_links(catalog, allreduce) if allreduce else ()}
        emu["emulated_mixed_ring"] = fit_emulated_mixed_ring(collectives, LinkScale(**emu))
        kinds: dict[str, bool] = {}

        def tcp_pcie(r: Run) -> bool:
            for t in run_config(r).instance_types:
                if t not in kinds:
                    hw = hardware_of(catalog, t)
                    kinds[t] = not hw.emulated and hw.intra_kind == "pcie" and hw.inter_kind == "tcp"
                if not kinds[t]:
                    return False
            return True

        # a size estimated from sync times was read through these links: it cannot also fit them
        known = [j for j in jobs if (j.grad_bytes or j.param_count) and not j.grad_bytes_estimated]
        emu["emulated_overlap_slowdown"] = self._fit_overlap_slowdown(known, catalog, LinkScale(**emu))
        pairs = [(j, r) for j in known for r in j.runs if r.world_size >= 2 and tcp_pcie(r)]
        if not pairs:
            emu["tcp_links"] = fit_tcp_allreduce(catalog, allreduce, LinkScale(**emu))
            emu["tcp_fallback"] = fit_tcp_fallback(catalog, allreduce, LinkScale(**emu))
            self.link_scale_, self.score_, self.n_rows_ = LinkScale(**emu), None, 0
            return self
        one_node = [(j, r) for j, r in pairs if r.nodes == 1]
        every = pairs
        rng = np.random.default_rng(0)
        pairs = self._sampled(pairs, rng)
        grid = (LinkScale(*figures) for figures in itertools.product(self.inter_grid, self.intra_grid,
                                                                     self.latency_grid))
        sim = RunSimulator(pairs, catalog)
        self.score_, scale = min(((sim.median_log_error(s), s) for s in grid), key=lambda t: t[0])
        links = dict(self._fit_tcp_links(pairs, catalog, scale))
        links.update(dict(fit_tcp_allreduce(catalog, allreduce, scale)))  # an allreduce measures the link itself
        fitted = LinkScale(scale.inter_efficiency, scale.intra_efficiency, scale.latency_factor, **emu,
                           node_intra_efficiency=self._fit_node_intra(one_node, catalog, scale),
                           tcp_links=tuple(sorted(links.items())))
        fitted = replace(fitted, tcp_fallback=fit_tcp_fallback(catalog, allreduce, fitted))
        self.link_scale_ = replace(fitted, tcp_node_shares=self._fit_tcp_node_shares(every, catalog, fitted))
        self.n_rows_ = len(pairs)
        return self

    def fit_with_overlap(self, jobs: Sequence[JobProfile], catalog: "Catalog",
                         collectives: Sequence[CollectivePoint] = (),
                         allreduce: Sequence[AllreduceRow] = ()) -> list[JobProfile]:
        """:meth:`fit`, then each imported trace's overlap window read off its sync times with those
        links (:func:`srifty.features.overlap.with_fitted_overlap`), and :meth:`fit` again on the
        jobs so read where any changed: a trace whose allreduce backward does not hide would
        otherwise make every link look slower. Returns the jobs as the links were fitted on them."""
        self.fit(jobs, catalog, collectives, allreduce)
        # a size read off a job's runs is for predicting it, not for training on: it was read
        # through these links, and the residual learns from the sizes the corpus states
        read = [with_fitted_overlap(j, catalog, self.link_scale_, estimate_size=False) for j in jobs]
        if any(r.backward_fraction != j.backward_fraction for r, j in zip(read, jobs)):
            self.fit(read, catalog, collectives, allreduce)
        return read

    def _sampled(self, pairs: list[tuple[JobProfile, Run]], rng: "np.random.Generator") -> list[tuple[JobProfile, Run]]:
        """``pairs``, or a sample of ``max_rows`` of them drawn with ``rng`` (in their order) beyond it."""
        if len(pairs) <= self.max_rows:
            return pairs
        return [pairs[i] for i in sorted(rng.choice(len(pairs), self.max_rows, replace=False))]

    def _fit_tcp_links(self, pairs: Sequence[tuple[JobProfile, Run]], catalog: "Catalog",
                       scale: LinkScale) -> tuple[tuple[str, float], ...]:
        """Per TCP type with runs across nodes of it alone: its effective Gbit/s (LinkScale.tcp_links):
        the catalog rate times the grid efficiency whose simulation of those runs has the least
        median absolute log error, the other figures fixed, or the fitted PCIe share of its GPU-to-NIC
        hop when that is slower (on such a type the ring runs at it)."""
        by_type: dict[str, list[tuple[JobProfile, Run]]] = {}
        for j, r in pairs:
            if r.nodes >= 2 and not r.mixed:
                by_type.setdefault(r.instance_type, []).append((j, r))
        out = []
        for itype, mine in sorted(by_type.items()):
            sim = RunSimulator(mine, catalog)
            eff = min(self.inter_grid, key=lambda e: sim.median_log_error(replace(scale, inter_efficiency=e)))
            hw = hardware_of(catalog, itype)
            pcie = hw.intra.gbytes_per_s * 8.0 * scale.intra_efficiency if hw.intra_kind == "pcie" else float("inf")
            out.append((itype, round(min(eff * hw.inter.gbytes_per_s * 8.0, pcie), 4)))
        return tuple(out)

    def _fit_tcp_node_shares(self, pairs: Sequence[tuple[JobProfile, Run]], catalog: "Catalog",
                             scale: LinkScale) -> tuple[tuple[str, int, float], ...]:
        """Per measured TCP type and node count with at least MIN_NODE_COUNT_RUNS runs across that
        many nodes of the type alone: the NODE_SHARE_GRID share of its network whose simulation of
        those runs (a seeded sample of ``max_rows`` beyond it) has the least median absolute log
        error, the other figures fixed (LinkScale.tcp_node_shares), kept where that error is
        NODE_SHARE_MIN_GAIN or more below the type's figure's."""
        import numpy as np

        by_count: dict[tuple[str, int], list[tuple[JobProfile, Run]]] = {}
        for j, r in pairs:
            if r.nodes >= 2 and not r.mixed and scale.tcp_measured(r.instance_type):
                by_count.setdefault((r.instance_type, r.nodes), []).append((j, r))
        rng = np.random.default_rng(0)
        out = []
        for (itype, nodes), mine in sorted(by_count.items()):
            if len(mine) < MIN_NODE_COUNT_RUNS:
                continue
            sim = RunSimulator(self._sampled(mine, rng), catalog)
            error, share = min((sim.median_log_error(replace(scale, tcp_node_shares=((itype, nodes, s),))), s)
                               for s in NODE_SHARE_GRID)
            if error <= sim.median_log_error(scale) - NODE_SHARE_MIN_GAIN:
                out.append((itype, nodes, share))
        return tuple(out)

    def _fit_node_intra(self, pairs: Sequence[tuple[JobProfile, Run]], catalog: "Catalog",
                        scale: LinkScale) -> float | None:
        """PCIe efficiency of rings within one node (LinkScale.node_intra_efficiency): the grid
        value whose simulation of the single-node multi-worker runs has the least median
        absolute log error, the other figures fixed. None without such runs."""
        if not pairs:
            return None
        sim = RunSimulator(pairs, catalog)
        return min(self.intra_grid, key=lambda eff: sim.median_log_error(replace(scale, node_intra_efficiency=eff)))

    def _fit_overlap_slowdown(self, jobs: Sequence[JobProfile], catalog: "Catalog", scale: LinkScale) -> float:
        """How much slower backward runs on emulated hosts while an allreduce is in flight, per
        busy peer (LinkScale.emulated_overlap_slowdown, features.busy_peers): the grid value whose simulated
        step times of the emulated multi-host training runs have the least spread of
        log(measured / simulated) around its median (the residual model takes the median).
        Fewer than MIN_OVERLAP_RUNS such runs: 0 (overlap taken as free)."""
        import numpy as np

        def emulated(r: Run) -> bool:
            return r.nodes >= 2 and all(hardware_of(catalog, t).emulated for t in run_config(r).instance_types)

        pairs = [(j, r) for j in jobs for r in j.runs if emulated(r)]
        self.n_overlap_runs_ = len(pairs)
        if len(pairs) < MIN_OVERLAP_RUNS:
            return 0.0
        sim = RunSimulator(pairs, catalog)
        best = None
        for s in self.overlap_grid:
            r = np.log(sim.measured_ms / sim.simulated_ms(replace(scale, emulated_overlap_slowdown=s)))
            spread = float(np.mean(np.abs(r - np.median(r))))
            if best is None or spread < best[0] - 1e-9:
                best = (spread, s)
        return best[1]

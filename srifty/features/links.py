"""What links achieve (LinkScale): fitted efficiencies of measured link kinds and types, the
emulated links' goodput, and the documented prior of a network nobody measured."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Sequence

from srifty.features.hardware import INTER_LATENCY_US, INTRA_BANDWIDTH_NOTE, Hardware
from srifty.simulate import Link

# tc tbf shapes Ethernet frames: a 1514-byte frame carries 1448 bytes of TCP payload
# (20 IP + 32 TCP-with-timestamps + 14 Ethernet header bytes), so goodput = 1448/1514 of the
# configured rate; docs/emulated-cluster.md measured 95.4-95.9% with iperf-like transfers.
TBF_GOODPUT = 1448.0 / 1514.0
# TCP payload share of an Ethernet frame at the usual MTU: the most of an instance's network rate a
# TCP network can carry (EC2's ENA, like the emulated tbf links, counts whole frames)
FRAME_GOODPUT = TBF_GOODPUT
# AWS documents that one TCP flow between instances runs at up to 5 Gbit/s outside a cluster
# placement group and 10 Gbit/s inside one, the instance's rate capping the aggregate
FLOW_GBPS, PLACEMENT_GROUP_FLOW_GBPS = 5.0, 10.0
# NCCL over sockets on an AWS (ENA) NIC opens 2 threads x 8 sockets per peer (net_socket.cc's
# defaults for vendor 0x1d0f): the flow-limited rate where no TCP run was ever measured
NCCL_AWS_FLOWS = 16
# how far a network nobody measured may be from its prior, either way (a factor on its bandwidth):
# FeatureBuilder.estimate widens a multi-node row's interval by what that does to its step
PRIOR_NETWORK_SPREAD = 2.0


def mixed_ring_slowest_hosts(rates_mbit: Sequence[float]) -> int:
    """How many hosts of a ring sit at its slowest configured link rate, when the rates mix; 0
    when every host has the same rate (see ``LinkScale.emulated_mixed_ring``)."""
    if not rates_mbit or min(rates_mbit) == max(rates_mbit):
        return 0
    return sum(1 for r in rates_mbit if r == min(rates_mbit))



MIN_SHORTFALL = 1e-3  # goodput's shortfall (1 − goodput) floor for its log


@dataclass(frozen=True)
class LinkScale:
    """Achieved fraction of the stated link bandwidth, per kind of link (1.0 = the catalog's
    figures). TCP networks and PCIe within a node (with a latency multiplier) are fitted by the
    communication model on measured multi-worker training runs; NVLink/NVSwitch and EFA links
    keep the catalog's figures, except on instance types with measured allreduces (nccl-tests),
    which get their own efficiencies (``fast_links``: (type, NVLink efficiency, EFA efficiency), the
    EFA one None where the type's allreduces all ran within one node and so never crossed its network).
    A figure fitted on one kind of link never stands in for another: one fitted on TCP g4dn
    clusters put p4d/p5 allreduces at 3-10x their measured time."""

    # TCP (ENA) for every type alike, as CommModel's grid tries it; None: per type (tcp_gbps)
    inter_efficiency: float | None = None
    intra_efficiency: float = 1.0  # PCIe
    latency_factor: float = 1.0  # TCP and PCIe latencies
    fast_links: tuple[tuple[str, float, float | None], ...] = ()
    # Emulated hosts (tc tbf links) are not scaled by the fitted efficiencies above (those are
    # fitted on real clusters): their goodput is the tbf framing prior or a fit on the
    # allreduce sweeps (srifty.model.fit_emulated_links), with a per-step latency in µs.
    emulated_goodput: float = TBF_GOODPUT
    emulated_latency_us: float = INTER_LATENCY_US
    # Sustained goodput measured at each configured link rate (Mbit/s, goodput) by the sweeps'
    # large messages (srifty.model.fit_emulated_goodput_by_rate): TCP through a tbf shaper keeps
    # less of a slow link (0.86 of 50 Mbit/s against 0.93 of 200 and 0.96 of 800: the shortfall
    # 1 − goodput about halves per 4× rate). Between two measured rates the shortfall is
    # interpolated in log–log; outside them it follows the power law fitted over all measured
    # rates (exponent clamped to [−1, 0]) from the nearest; one rate: its figure; no table: the
    # pooled ``emulated_goodput``.
    emulated_goodput_by_mbit: tuple[tuple[float, float], ...] = ()
    # A ring that mixes emulated link rates keeps less of its slowest link than a ring of that
    # rate alone (docs/emulated-cluster.md, Limits): the goodput above is multiplied by the
    # first figure when one host sits at the slowest rate, by the second when two or more do.
    # Fitted on sweeps of mixed rings (srifty.model.fit_emulated_mixed_ring); 1 = no loss.
    emulated_mixed_ring: tuple[float, float] = (1.0, 1.0)
    # Backward on an emulated host runs 1 + emulated_overlap_slowdown × (busy peers) times slower
    # while an allreduce is in flight: the collective's thread competes for the host's CPU quota,
    # and the peers still computing for the machine's cores (busy_peers: each peer weighted by
    # the share of the step it computes). Fitted on the emulated multi-host training runs
    # (CommModel); 0 = overlap is free. See docs/latency-model.md.
    emulated_overlap_slowdown: float = 0.0
    # PCIe efficiency of a ring that stays inside one node (None: ``intra_efficiency``). Fitted
    # on the runs of one node alone (CommModel): in a ring across nodes the fitted PCIe figure
    # stands for the whole GPU-to-GPU path through the NICs, which is slower than a peer-to-peer
    # copy within a node, so one figure for both put single-node allreduces about 4x too slow.
    node_intra_efficiency: float | None = None
    # TCP (ENA) networks, per instance type: the effective Gbit/s of an allreduce ring across its
    # nodes (the slower of its fitted network and PCIe figures), fitted on that type's own
    # multi-node runs or allreduces (CommModel). A type measured here keeps its fitted figures; any
    # other TCP type gets the prior of :meth:`tcp_gbps` and PCIe at its line rate.
    tcp_links: tuple[tuple[str, float], ...] = ()
    # (type, nodes, share) of a measured TCP type whose rings across exactly that many nodes of it
    # ran at ``share`` of its fitted network (bandwidth at share times its figure, each network
    # hop's latency at 1/share), fitted on its runs at that node count where they are many enough
    # (CommModel). A ring across any other number of nodes, or a mix of types, runs at 1.
    tcp_node_shares: tuple[tuple[str, int, float], ...] = ()
    # whether the nodes sit in a cluster placement group (AWS: 10 Gbit/s per TCP flow, not 5)
    placement_group: bool = False
    # EFA types whose TCP fallback was measured (sweeps over TCP: srifty's EC2 backend attaches no
    # EFA interface): (type, effective Gbit/s as outside a placement group), fitted on those sweeps
    # (srifty.comm.fit_tcp_fallback). It is the slow end of the type's EFA prior (prior_inter), what
    # NCCL runs over without the EFA plugin; the EFA network itself stays a prior.
    tcp_fallback: tuple[tuple[str, float], ...] = ()

    def tcp_measured(self, name: str) -> bool:
        """Whether ``name``'s TCP network was measured (its own runs or allreduces)."""
        return any(t == name for t, _ in self.tcp_links)

    def tcp_node_share(self, instance_types: Sequence[str], nodes: int) -> float:
        """The share of its fitted network that a ring across ``nodes`` nodes of ``instance_types``
        runs at (``tcp_node_shares``; 1 unless every node is of one type with a share there)."""
        if len(set(instance_types)) != 1:
            return 1.0
        return next((s for t, n, s in self.tcp_node_shares if t == instance_types[0] and n == nodes), 1.0)

    def tcp_gbps(self, hw: Hardware) -> float:
        """Effective inter-node Gbit/s of a TCP (ENA) type: the instance's rate (the catalog's
        baseline) times the frame goodput, or what NCCL's TCP flows carry, whichever is less. The
        flows carry the type's own measured figure; on a type never measured, the median of the
        measured types' figures (flows are NCCL's and AWS's, not the type's), or with nothing
        measured NCCL's 16 flows at AWS's per-flow limit. In a cluster placement group the flows
        carry twice as much (10 Gbit/s per flow, not 5). No measured type and ``inter_efficiency``
        set (CommModel's grid): the catalog rate times it. An EFA type's TCP fallback, where a sweep
        over TCP measured it (``tcp_fallback``), carries its own figure."""
        cap = hw.inter.gbytes_per_s * 8.0
        measured = dict(self.tcp_links)
        fallback = dict(self.tcp_fallback)
        if hw.inter_kind == "efa" and hw.name in fallback:
            flows = fallback[hw.name]
        elif not measured and self.inter_efficiency is not None:
            return cap * self.inter_efficiency
        elif hw.name in measured:
            flows = measured[hw.name]
        elif measured:
            flows = statistics.median(measured.values())
        else:
            flows = NCCL_AWS_FLOWS * FLOW_GBPS
        if self.placement_group:
            flows *= PLACEMENT_GROUP_FLOW_GBPS / FLOW_GBPS
        return min(cap * FRAME_GOODPUT, flows)

    def within_node(self, raw: Hardware, scaled: Hardware) -> Link:
        """The intra-node link of a ring on one node of ``raw`` (catalog figures; ``scaled`` is
        ``apply(raw)``): the single-node PCIe efficiency where one is fitted, else ``scaled.intra``."""
        if self.node_intra_efficiency is None or raw.emulated or raw.intra_kind != "pcie":
            return scaled.intra
        return Link(raw.intra.gbytes_per_s * self.node_intra_efficiency, scaled.intra.latency_us)

    def prior_inter(self, scaled: Hardware) -> Link:
        """The slowest the network between nodes of ``scaled`` (``apply``'s figures) may be where
        nobody measured it: PRIOR_NETWORK_SPREAD times slower than its prior, and an EFA type no
        faster than TCP, which is what NCCL runs over without the EFA plugin (its measured fallback,
        ``tcp_fallback``, or the TCP prior)."""
        slow = scaled.inter.gbytes_per_s / PRIOR_NETWORK_SPREAD
        if scaled.inter_kind == "efa":
            slow = min(slow, self.tcp_gbps(scaled) / 8.0)
        return Link(slow, scaled.inter.latency_us)

    def mixed_ring_factor(self, rates_mbit: Sequence[float]) -> float:
        """What an emulated ring over links of ``rates_mbit`` keeps of its slowest link's goodput."""
        k = mixed_ring_slowest_hosts(rates_mbit)
        return 1.0 if k == 0 else self.emulated_mixed_ring[0 if k == 1 else 1]

    def emulated_goodput_at(self, mbit: float) -> float:
        """Goodput of an emulated link configured at ``mbit`` (see ``emulated_goodput_by_mbit``)."""
        table = sorted(self.emulated_goodput_by_mbit)
        if not table:
            return self.emulated_goodput
        if len(table) == 1:
            return table[0][1]
        xs = [math.log(r) for r, _ in table]
        ys = [math.log(max(1.0 - g, MIN_SHORTFALL)) for _, g in table]
        x = math.log(mbit)
        if x <= xs[0] or x >= xs[-1]:
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            slope = sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)
            slope = min(max(slope, -1.0), 0.0)
            x0, y0 = (xs[0], ys[0]) if x <= xs[0] else (xs[-1], ys[-1])
            y = y0 + slope * (x - x0)
        else:
            i = next(i for i in range(1, len(xs)) if x <= xs[i])
            w = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
            y = ys[i - 1] + w * (ys[i] - ys[i - 1])
        return min(max(1.0 - math.exp(y), 0.2), 1.0)

    def apply(self, hw: Hardware) -> Hardware:
        if hw.emulated:
            goodput = self.emulated_goodput_at(hw.inter.gbytes_per_s * 8000.0)
            return replace(hw, inter=Link(hw.inter.gbytes_per_s * goodput,
                                          max(hw.inter.latency_us, self.emulated_latency_us)))
        measured = next(((nv, efa) for name, nv, efa in self.fast_links if name == hw.name), (1.0, 1.0))
        if hw.intra_kind == "nvlink":
            intra_eff, intra_lat = measured[0], 1.0
        elif not self.tcp_links or self.tcp_measured(hw.name):
            # the PCIe share fitted with the network of the measured types is part of their path
            intra_eff, intra_lat = self.intra_efficiency, self.latency_factor
        else:  # a type whose network was never measured: PCIe at its line rate, the network its prior
            intra_eff, intra_lat = 1.0, self.latency_factor
        if hw.inter_kind == "efa":
            inter = Link(hw.inter.gbytes_per_s * (1.0 if measured[1] is None else measured[1]), hw.inter.latency_us)
        else:
            inter = Link(self.tcp_gbps(hw) / 8.0, hw.inter.latency_us * self.latency_factor)
        notes = hw.notes
        if hw.intra_kind == "pcie" and self.tcp_measured(hw.name):  # the PCIe share is fitted on the type
            notes = tuple(n for n in notes if not n.startswith(f"{hw.name}: {INTRA_BANDWIDTH_NOTE}"))
        return replace(hw, intra=Link(hw.intra.gbytes_per_s * intra_eff, hw.intra.latency_us * intra_lat),
                       inter=inter, notes=notes)

    def network_measured(self, hw: Hardware) -> bool:
        """Whether ``hw``'s inter-node network was measured (emulated links always are, by the
        sweeps or their prior; EFA by nccl-tests across nodes; TCP by runs or allreduces on the type)."""
        if hw.emulated:
            return True
        if hw.inter_kind == "efa":
            return any(name == hw.name and efa is not None for name, _, efa in self.fast_links)
        return self.tcp_measured(hw.name)


# --------------------------------------------------------------------------- features

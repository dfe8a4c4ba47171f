"""How many nodes of each type (and market) can be had: what `recommend --available` and
`--quotas aws` tell the solver.

A limit caps a weighted count of the nodes a configuration uses in one market: ``--available
g5.xlarge=4`` counts g5.xlarge nodes (on demand; ``g5.xlarge@spot=4`` spot ones), an AWS quota
counts the vCPUs of every running instance of the families it covers (EC2's vCPU quotas are per
family group and market: "Running On-Demand G and VT instances", "All P Spot Instance Requests",
...). A mix of two types of one family group shares that group's quota.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from srifty.catalog import Market
from srifty.errors import SriftyError

# EC2's vCPU quotas of the family groups GPU instances belong to, per market (Service Quotas codes)
QUOTAS: dict[tuple[str, Market], tuple[str, str]] = {
    ("G and VT", Market.ON_DEMAND): ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("P", Market.ON_DEMAND): ("L-417A185B", "Running On-Demand P instances"),
    ("Standard", Market.ON_DEMAND): ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
    ("G and VT", Market.SPOT): ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    ("P", Market.SPOT): ("L-7212CCBC", "All P Spot Instance Requests"),
    ("Standard", Market.SPOT): ("L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"),
}
_STANDARD = set("acdhimrtz")


@dataclass(frozen=True)
class CapacityLimit:
    """At most ``limit`` of Σ nodes × ``units[type]`` over the nodes of ``market`` a configuration uses."""

    what: str  # how to name it in a message ("--available g5.xlarge=4", "AWS quota L-… (…): 64 vCPUs")
    market: Market
    limit: float
    units: dict[str, float] = field(default_factory=dict)

    def max_nodes(self, instance_type: str) -> float:
        """The most nodes of ``instance_type`` alone within this limit (inf: not counted)."""
        u = self.units.get(instance_type, 0.0)
        return math.floor(self.limit / u + 1e-9) if u > 0 else math.inf


def family_group(family: str) -> str | None:
    """EC2's quota group of an instance family ("g5" → "G and VT"); None for the groups srifty
    does not read (F, Inf, Trn, DL, X, ...)."""
    f = family.lower()
    if f.startswith("vt") or f.startswith("g"):
        return "G and VT"
    if f.startswith("p"):
        return "P"
    if re.match(r"^(inf|trn|dl|x|f|u-)", f):
        return None
    return "Standard" if f[:1] in _STANDARD else None


def parse_available(text: str, known: Iterable[str]) -> list[CapacityLimit]:
    """``TYPE[@spot]=N,...`` (``--available``): at most N nodes of TYPE in that market."""
    known = set(known)
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = re.fullmatch(r"([A-Za-z0-9.\-]+)(@spot)?=(\d+)", part)
        if not m:
            raise SriftyError(f"--available takes TYPE[@spot]=N items joined by commas, not {part!r}.",
                              "e.g. --available p4d.24xlarge=1,g5.12xlarge@spot=4")
        itype, spot, n = m.group(1), bool(m.group(2)), int(m.group(3))
        if itype not in known:
            from srifty.catalog import did_you_mean

            raise SriftyError(f"--available names {itype!r}, which the catalog does not list.{did_you_mean(itype, known)}",
                              "See the names with `srifty catalog list`.")
        out.append(CapacityLimit(f"--available {part}", Market.SPOT if spot else Market.ON_DEMAND, float(n),
                                 {itype: 1.0}))
    return out


def quota_limits(values: dict[tuple[str, Market], float], vcpus: dict[str, float],
                 families: dict[str, str]) -> list[CapacityLimit]:
    """Limits from quota values (vCPUs per (family group, market)) over the catalog's types."""
    out = []
    for (group, market), value in sorted(values.items(), key=lambda kv: (kv[0][0], kv[0][1].value)):
        code, name = QUOTAS[(group, market)]
        units = {t: float(v) for t, v in vcpus.items() if v and family_group(families.get(t, "")) == group}
        out.append(CapacityLimit(f"AWS quota {code} ({name}): {value:g} vCPUs", market, float(value), units))
    return out


def read_aws_quotas(client: Any, groups: Sequence[str] = ("G and VT", "P")) -> dict[tuple[str, Market], float]:
    """The account's vCPU quotas of ``groups`` in both markets, through the Service Quotas API
    (``client``: boto3 ``service-quotas``); a quota the account has never changed is the AWS default."""
    from botocore.exceptions import BotoCoreError, ClientError

    out = {}
    for (group, market), (code, name) in QUOTAS.items():
        if group not in groups:
            continue
        try:
            try:
                value = client.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "NoSuchResourceException":
                    raise
                value = client.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]
        except (ClientError, BotoCoreError) as exc:
            raise SriftyError(f"Could not read the EC2 quota {code} ({name}): {exc}",
                              "Check your AWS credentials and that they allow servicequotas:GetServiceQuota and "
                              "servicequotas:GetAWSDefaultServiceQuota, or give the limits with --available.") from None
        out[(group, market)] = float(value)
    return out


def capacity_limits(catalog: Any, available: str | None = None, quotas_client: Any = None) -> list[CapacityLimit]:
    """The limits of ``--available`` (parsed against ``catalog``) and, given a boto3
    ``service-quotas`` client, of the account's EC2 vCPU quotas (``--quotas aws``)."""
    out = parse_available(available, catalog.df["instance_type"]) if available else []
    if quotas_client is not None:
        df = catalog.df.drop_duplicates("instance_type")
        vcpus = {t: float(v) for t, v in zip(df["instance_type"], df["vcpus"]) if v == v and v}
        out += quota_limits(read_aws_quotas(quotas_client), vcpus, dict(zip(df["instance_type"], df["family"])))
    return out


# How many spot groups one `recommend --spot-scores` asks AWS about: AWS limits how many different
# requests an account may have scored in 24 hours, so only the groups of the first rows shown are.
MAX_SPOT_SCORE_QUERIES = 6
# AWS's scale: 1 (a request of this size is not likely to succeed now) to 10 (highly likely).
LOW_SPOT_SCORE = 3


@dataclass(frozen=True)
class SpotScore:
    """AWS's spot placement score (1-10) for ``nodes`` spot instances of ``instance_type`` in
    ``region``: how likely a request of that size is to be filled now (a hint, not a limit).
    ``score`` is None where AWS returned none for the region."""

    instance_type: str
    nodes: int
    region: str
    score: int | None

    @property
    def low(self) -> bool:
        return self.score is not None and self.score <= LOW_SPOT_SCORE

    def to_dict(self) -> dict[str, Any]:
        return {"instance_type": self.instance_type, "nodes": self.nodes, "region": self.region, "score": self.score}


def spot_groups(configs: Iterable[str], limit: int = MAX_SPOT_SCORE_QUERIES) -> list[tuple[str, int]]:
    """The distinct (instance type, node count) spot groups of ``configs`` (configuration strings,
    in rank order), the first ``limit`` of them."""
    from srifty.configspec import parse_config

    out: list[tuple[str, int]] = []
    for config in configs:
        for g in parse_config(config).groups:
            if g.spot and (g.instance_type, g.count) not in out:
                out.append((g.instance_type, g.count))
    return out[:limit]


def read_spot_scores(client: Any, region: str, groups: Sequence[tuple[str, int]]) -> list[SpotScore]:
    """One EC2 GetSpotPlacementScores request per group (``client``: boto3 ``ec2``), scored for the
    region as a whole (not one zone); a SriftyError says what AWS refused."""
    from botocore.exceptions import BotoCoreError, ClientError

    out = []
    for instance_type, nodes in groups:
        try:
            answer = client.get_spot_placement_scores(
                InstanceTypes=[instance_type], TargetCapacity=nodes, TargetCapacityUnitType="units",
                SingleAvailabilityZone=False, RegionNames=[region])
        except (ClientError, BotoCoreError) as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
            hint = ("AWS limits how many different requests one account may have scored in 24 hours; try again "
                    "later, or read fewer rows (--top)." if "Limit" in code else
                    "Check your AWS credentials and that they allow ec2:GetSpotPlacementScores.")
            raise SriftyError(f"Could not read the spot placement score of {nodes} x {instance_type} in {region}: "
                              f"{exc}", hint) from None
        scores = [int(s["Score"]) for s in answer.get("SpotPlacementScores", [])
                  if s.get("Region") == region and s.get("Score") is not None]
        out.append(SpotScore(instance_type, nodes, region, max(scores) if scores else None))
    return out

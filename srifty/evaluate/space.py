"""What an evaluation asks and ranges over: a constraint setting (:class:`Case`, parsed from
``--case``), one configuration of the space with its prediction and measurement
(:class:`Candidate`), and the space itself (:func:`candidate_space`: homogeneous configurations
and mixes of two types that fit this machine's cores). The rest of the package reads these.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Sequence

from srifty.errors import SriftyError

OBJECTIVES = ("throughput", "cost", "cost-per-sample")


@dataclass(frozen=True)
class Case:
    """One constraint setting: what the user asks of the recommendation."""

    budget_per_hour: float | None = None
    min_throughput: float | None = None
    objective: str | None = None
    # at most N hosts of a type can be had: ("emu.large=1", ...), as `recommend --available` takes them
    available: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> "Case":
        """``budget=0.4``, ``min_throughput=50``, ``objective=cost``, ``available=TYPE=N`` (any
        number of them) joined by commas."""
        kw: dict[str, Any] = {}
        available: list[str] = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, _, value = part.partition("=")
            key = key.strip().replace("-", "_")
            if key == "budget":
                key = "budget_per_hour"
            if key not in ("budget_per_hour", "min_throughput", "objective", "available") or not value:
                raise SriftyError(f"--case {text!r}: {part!r} is not budget=N, min_throughput=N, objective=NAME or "
                                  "available=TYPE=N.")
            if key == "available":
                itype, _, n = value.partition("=")
                if not itype or "@" in itype or not n.isdigit():
                    raise SriftyError(f"--case {text!r}: {part!r} is not available=TYPE=N (on-demand hosts; the "
                                      "evaluation has no spot market).")
                available.append(f"{itype.strip()}={int(n)}")
            elif key == "objective":
                if value not in OBJECTIVES:
                    raise SriftyError(f"--case {text!r}: objective must be one of {', '.join(OBJECTIVES)}.")
                kw[key] = value
            else:
                try:
                    kw[key] = float(value)
                except ValueError:
                    raise SriftyError(f"--case {text!r}: {key} needs a number, got {value!r}.") from None
        return cls(**kw, available=tuple(available))

    @property
    def limits(self) -> dict[str, int]:
        """The most hosts of each type that can be had (types not named: any number)."""
        return {t: int(n) for t, _, n in (a.partition("=") for a in self.available)}

    @property
    def resolved_objective(self) -> str:
        """As ``srifty recommend`` decides: cheapest meeting a throughput floor, else fastest."""
        if self.objective:
            return self.objective
        return "cost" if self.min_throughput is not None else "throughput"

    def label(self) -> str:
        parts = []
        if self.budget_per_hour is not None:
            parts.append(f"budget ${self.budget_per_hour:g}/h")
        if self.min_throughput is not None:
            parts.append(f"at least {self.min_throughput:g} samples/s")
        parts.extend(f"at most {n} {t}" for t, n in self.limits.items())
        parts.append(f"objective {self.resolved_objective}")
        return ", ".join(parts)


@dataclass
class Candidate:
    """One configuration of the space, with its prediction and (once run) its measurement."""

    config: str
    hosts: list[str]  # host type per node, in order
    usd_per_hour: float
    cpu_share: float
    predicted_samples_per_s: float | None = None
    predicted_interval: tuple[float, float] | None = None
    source: str | None = None
    measured_samples_per_s: float | None = None
    measured_rel_ci: float | None = None
    measure_seconds: float | None = None
    measured_at: str | None = None  # when the run that measured it was recorded (its profile's created_at)
    # per-worker batch on each type where it is not the evaluation's batch everywhere: a mix as
    # srifty recommend splits the batch (faster types take more), run as its plan
    batch_by_type: dict[str, int] | None = None

    @property
    def homogeneous(self) -> bool:
        return len(set(self.hosts)) == 1

    @property
    def mixed(self) -> bool:
        return not self.homogeneous

    def global_batch(self, batch_size: int, workers: dict[str, int]) -> int:
        """Samples per step: each host's workers at its type's batch (``workers``: per host type)."""
        return sum(workers[t] * (self.batch_by_type or {}).get(t, batch_size) for t in self.hosts)

    def within_limits(self, limits: dict[str, int]) -> bool:
        """Whether the hosts it uses are no more than can be had (``Case.limits``)."""
        return all(self.hosts.count(t) <= n for t, n in limits.items())

    @property
    def prediction_error(self) -> float | None:
        if self.predicted_samples_per_s is None or not self.measured_samples_per_s:
            return None
        return abs(self.predicted_samples_per_s - self.measured_samples_per_s) / self.measured_samples_per_s

    @property
    def within_measurement_ci(self) -> bool | None:
        """Whether the prediction lies inside the measured throughput's own 95% CI (the run's median
        iteration time ± its relative half-width, as throughput); None without both figures."""
        if self.predicted_samples_per_s is None or not self.measured_samples_per_s or self.measured_rel_ci is None:
            return None
        c = min(self.measured_rel_ci, 0.999)
        lo, hi = self.measured_samples_per_s / (1 + c), self.measured_samples_per_s / (1 - c)
        return lo <= self.predicted_samples_per_s <= hi


def candidate_space(spec: Any, types: Sequence[str], max_hosts: int, cores: float) -> list[Candidate]:
    """Homogeneous configurations and mixes of two types, up to ``max_hosts`` hosts, whose
    CPU shares add up to at most ``cores`` (what this machine can run without oversubscribing)."""
    from srifty.profiling.emulated import config_string

    out: list[Candidate] = []

    def add(hosts: list[str]) -> None:
        share = sum(spec.instance_types[t].cpu_share for t in hosts)
        if share <= cores + 1e-9:
            price = sum(spec.instance_types[t].price_per_hour for t in hosts)
            out.append(Candidate(config_string(hosts), hosts, round(price, 6), round(share, 6)))

    for t in types:
        for n in range(1, max_hosts + 1):
            add([t] * n)
    for a, b in itertools.combinations(types, 2):
        for na in range(1, max_hosts):
            for nb in range(1, max_hosts - na + 1):
                add([a] * na + [b] * nb)
    return out

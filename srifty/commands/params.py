"""Types for srifty's numeric options: finite, in range, whole where they must be.

A bad value stops the command at parsing, before anything is loaded, with click's usage
error (``Invalid value for '--top': -1 is not >= 1.``) and exit status 2. NaN and infinities
are never accepted: ``--budget inf`` is no budget, which is said by leaving it out.
"""

from __future__ import annotations

import math
import re
from typing import Any

import click

from srifty.configspec import MAX_NODES, MAX_SEARCH_NODES, MAX_WORKERS_PER_NODE

MAX_BATCH = 10_000_000  # samples per worker: far beyond any real job, so a typo is refused


def _num(x: float) -> str:
    return f"{int(x):,}" if x == int(x) else f"{x:g}"


class Number(click.ParamType):
    """A finite int or float within [low, high] (open at ``low`` with ``low_open``)."""

    def __init__(self, whole: bool, low: float | None = None, low_open: bool = False, high: float | None = None):
        self.whole, self.low, self.low_open, self.high = whole, low, low_open, high
        self.name = "integer" if whole else "number"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "INTEGER" if self.whole else "NUMBER"

    def _range(self) -> str:
        if self.low is not None and self.high is not None and not self.low_open:
            return f"between {_num(self.low)} and {_num(self.high)}"
        parts = []
        if self.low is not None:
            parts.append(f"{'above' if self.low_open else 'at least'} {_num(self.low)}")
        if self.high is not None:
            parts.append(f"at most {_num(self.high)}")
        return " and ".join(parts)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, bool):
            self.fail(f"{value!r} is not a {self.name}.", param, ctx)
        if isinstance(value, (int, float)):
            x: float = value
        else:
            text = str(value).strip()
            try:
                x = int(text) if self.whole else float(text)
            except ValueError:
                self.fail(f"{value!r} is not {'a whole number' if self.whole else 'a number'}.", param, ctx)
        if not math.isfinite(x):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        if self.whole and x != int(x):
            self.fail(f"{value!r} is not a whole number.", param, ctx)
        too_low = self.low is not None and (x <= self.low if self.low_open else x < self.low)
        if too_low or (self.high is not None and x > self.high):
            self.fail(f"{value} is not {self._range()}.", param, ctx)
        return int(x) if self.whole else float(x)

    def __repr__(self) -> str:
        return f"Number({self.name} {self._range()})"


def whole(low: int = 1, high: int | None = None) -> Number:
    """A whole number from ``low`` (default 1) up to ``high``."""
    return Number(True, low, False, high)


def positive() -> Number:
    """A finite number above 0."""
    return Number(False, 0.0, True)


def non_negative() -> Number:
    """A finite number of 0 or more."""
    return Number(False, 0.0, False)


def fraction() -> Number:
    """A finite number above 0, at most 1."""
    return Number(False, 0.0, True, 1.0)


BATCH = whole(1, MAX_BATCH)
NODES = whole(1, MAX_NODES)
WORKERS = whole(1, MAX_WORKERS_PER_NODE)
SEARCH_NODES = whole(1, MAX_SEARCH_NODES)


# what a duration's unit is worth in hours
HOURS_PER_UNIT = {"s": 1 / 3600, "m": 1 / 60, "min": 1 / 60, "h": 1.0, "d": 24.0}
# what a count's suffix multiplies it by (thousands, millions, billions)
COUNT_SUFFIXES = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9}


class WithUnit(Number):
    """A positive (or, with ``zero``, non-negative) number, plain or followed by one of ``units``
    (case aside), which multiplies it: ``90m`` of a duration in hours is 1.5."""

    def __init__(self, units: dict[str, float], name: str, metavar: str, examples: str, zero: bool = False):
        super().__init__(False, 0.0, not zero)
        self.units, self.name, self.metavar, self.examples = units, name, metavar, examples
        self._pattern = re.compile(r"(.+?)\s*(" + "|".join(sorted(units, key=len, reverse=True)) + ")")

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return self.metavar

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return super().convert(value, param, ctx)
        text = value.strip().lower()
        match = self._pattern.fullmatch(text)
        if match is None:
            try:
                float(text)  # a number, as Number reads it (its range and finiteness checked there)
            except ValueError:
                self.fail(f"{value!r} is not a {self.name}: give {self.examples}.", param, ctx)
            return super().convert(value, param, ctx)
        return super().convert(match.group(1), param, ctx) * self.units[match.group(2)]


def hours(zero: bool = False) -> WithUnit:
    """A duration above 0 (or of 0 or more, with ``zero``), in hours or with a unit."""
    return WithUnit(HOURS_PER_UNIT, "duration", "HOURS", "hours (2.5) or a number with a unit (90m, 36h, 2d, 45s)", zero)


def count() -> WithUnit:
    """A count above 0, plain (1281167, 5e7) or with a suffix: 1.28M, 50k, 2B."""
    return WithUnit(COUNT_SUFFIXES, "count", "NUMBER", "a number (1281167, 5e7) or one with a suffix (50k, 1.28M, 2B)")

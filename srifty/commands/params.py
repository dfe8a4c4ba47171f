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


class Hours(Number):
    """A duration in hours: a plain number (hours), or a number with a unit, 90m, 36h, 2d, 45s."""

    def __init__(self, low_open: bool):
        super().__init__(False, 0.0, low_open)
        self.name = "duration"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "HOURS"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = value.strip().lower() if isinstance(value, str) else value
        match = re.fullmatch(r"(.+?)\s*(s|min|m|h|d)", text) if isinstance(text, str) else None
        if match is None:
            if isinstance(text, str) and not re.fullmatch(r"[-+.\deE]+|[-+]?(inf\w*|nan)", text):
                self.fail(f"{value!r} is not a duration: give hours (2.5) or a number with a unit (90m, 36h, 2d, "
                          "45s).", param, ctx)
            return super().convert(value, param, ctx)
        number = super().convert(match.group(1), param, ctx)
        return number * HOURS_PER_UNIT[match.group(2)]


def hours(zero: bool = False) -> Hours:
    """A duration above 0 (or of 0 or more, with ``zero``), in hours or with a unit."""
    return Hours(low_open=not zero)

"""Config syntax: parse/format round trips (hypothesis), catalog validation with 'Did you mean'."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from srifty.catalog import Catalog
from srifty.configspec import ClusterConfig, ConfigSyntaxError, NodeGroup, from_placement, parse_config
from srifty.errors import SriftyError

names = st.from_regex(r"[a-z][a-z0-9]{0,5}\.[a-z0-9]{1,8}", fullmatch=True)
groups = st.builds(NodeGroup, count=st.integers(1, 64), instance_type=names,
                   workers_per_node=st.one_of(st.none(), st.integers(1, 16)), spot=st.booleans())


@given(st.lists(groups, min_size=1, max_size=5))
def test_round_trip(gs: list[NodeGroup]) -> None:
    config = ClusterConfig(tuple(gs))
    assert parse_config(config.format()) == config


@pytest.mark.parametrize("text,expected", [
    ("4xg4dn.12xlarge", (NodeGroup(4, "g4dn.12xlarge"),)),
    ("2xp3.8xlarge+1xg5.12xlarge", (NodeGroup(2, "p3.8xlarge"), NodeGroup(1, "g5.12xlarge"))),
    ("g4dn.12xlarge:1+g4dn.12xlarge:3", (NodeGroup(1, "g4dn.12xlarge", 1), NodeGroup(1, "g4dn.12xlarge", 3))),
    ("3xemu.medium@spot", (NodeGroup(3, "emu.medium", None, True),)),
])
def test_examples(text: str, expected: tuple[NodeGroup, ...]) -> None:
    assert parse_config(text).groups == expected


@pytest.mark.parametrize("bad", ["", "0xg4dn.12xlarge", "4x", "g4dn.12xlarge:0", "2xg4dn.12xlarge@moon", "a+"])
def test_bad_syntax(bad: str) -> None:
    with pytest.raises(ConfigSyntaxError):
        parse_config(bad)


def test_resolve_against_catalog() -> None:
    cat = Catalog.default()
    c = parse_config("2xg4dn.12xlarge+g4dn.12xlarge:1").resolved(cat)
    assert c.workers_per_node() == [4, 4, 1] and c.world_size == 9
    with pytest.raises(SriftyError, match="Did you mean 'g4dn.12xlarge'"):
        parse_config("2xg4dn.12xlarg").resolved(cat)
    with pytest.raises(SriftyError, match="at most :4"):
        parse_config("g4dn.12xlarge:8").resolved(cat)


def test_from_placement_merges_neighbours() -> None:
    assert from_placement("t", [1, 1, 3]).format() == "2xt:1+1xt:3"

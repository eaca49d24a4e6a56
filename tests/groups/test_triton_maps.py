"""``--triton-input-map`` / ``--triton-output-map`` parsing (attacker D9): linear in the number of pairs, and an
absurd map is refused before any work (exit 2) with the limit in the message."""
from __future__ import annotations

import pytest

from gapcheck.cli.app import main
from gapcheck.errors import UsageError
from gapcheck.groups.triton import MAX_MAP_ITEMS, TritonTarget, _name_map


def _pairs(count: int) -> str:
    return ",".join(f"g{i}=s{i}" for i in range(count))


def test_a_map_at_the_limit_is_read_whole() -> None:
    mapping = _name_map((_pairs(MAX_MAP_ITEMS),), "--triton-input-map", "graph_name=served_name[,...]")
    assert len(mapping) == MAX_MAP_ITEMS and mapping["g0"] == "s0" and mapping[f"g{MAX_MAP_ITEMS - 1}"] == \
        f"s{MAX_MAP_ITEMS - 1}"


def test_a_map_past_the_limit_is_refused_naming_it() -> None:
    with pytest.raises(UsageError, match=f"more than {MAX_MAP_ITEMS} name pairs"):
        TritonTarget(url="http://h:8000", output_map=(_pairs(MAX_MAP_ITEMS + 1),)).check()


def test_a_huge_map_is_refused_before_it_is_read_whole() -> None:
    # 200,000 pairs once took minutes (a scan of the served names per pair); the limit stops such a map at the
    # 10,001st pair
    with pytest.raises(UsageError, match=str(MAX_MAP_ITEMS)):
        _name_map((_pairs(2 * MAX_MAP_ITEMS),), "--triton-output-map", "torch_name=served_name[,...]")


def test_a_served_name_given_twice_is_still_refused_far_down_a_long_map() -> None:
    items = (_pairs(MAX_MAP_ITEMS - 1) + ",late=s5",)
    with pytest.raises(UsageError, match="maps two names to served 's5'"):
        _name_map(items, "--triton-input-map", "graph_name=served_name[,...]")


def test_the_cli_exits_2_for_an_absurd_map(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["nightly", "--golden", "/nonexistent", "--triton-input-map", _pairs(MAX_MAP_ITEMS + 5)])
    assert code == 2 and f"more than {MAX_MAP_ITEMS}" in capsys.readouterr().err

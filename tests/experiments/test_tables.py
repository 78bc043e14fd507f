"""The shared table helpers of the experiments: grouping, Markdown, CSV."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass

import pytest

from fleetgym.experiments.tables import as_row, group_by, markdown_table, mean_std, write_csv


@dataclass
class Row:
    name: str
    value: float


def test_group_by_keeps_first_seen_order():
    groups = group_by([Row("b", 1.0), Row("a", 2.0), Row("b", 3.0)], key=lambda r: r.name)
    assert list(groups) == ["b", "a"]
    assert [r.value for r in groups["b"]] == [1.0, 3.0]


def test_mean_std_skips_nan_and_is_the_population_std():
    assert mean_std([1.0, 3.0, math.nan]) == (2.0, 1.0)
    assert mean_std([5.0]) == (5.0, 0.0)
    mean, std = mean_std([math.nan])
    assert math.isnan(mean) and math.isnan(std)


def test_markdown_table_lines():
    assert markdown_table(["a", "b"], [["1", "2"]]) == ["| a | b |", "|---|---|", "| 1 | 2 |"]


def test_write_csv_from_dataclasses_and_dicts(tmp_path):
    path = write_csv(tmp_path / "sub" / "rows.csv", [Row("x", 1.5), {"name": "y", "extra": 1}])
    with path.open() as fh:
        assert list(csv.reader(fh)) == [["name", "value"], ["x", "1.5"], ["y", ""]]
    empty = write_csv(tmp_path / "empty.csv", [], fieldnames=["name", "value"])
    assert empty.read_text().strip() == "name,value"
    with pytest.raises(ValueError, match="rows: expected at least one row"):
        write_csv(tmp_path / "none.csv", [])
    with pytest.raises(TypeError, match="record: expected a dataclass instance or a mapping"):
        as_row(3)

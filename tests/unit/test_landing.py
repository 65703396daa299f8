"""Landed-file locations in pipeline messages: absolute paths and URIs only, so every Spark reads the same file."""

from __future__ import annotations

from pathlib import Path

import pytest

from functions.pipeline import local_path, unreadable


def test_an_absolute_path_and_a_file_uri_are_checked_on_this_machine(tmp_path: Path) -> None:
    landed = tmp_path / "day one" / "part-0.csv"
    landed.parent.mkdir()
    landed.write_text("event_id\n", encoding="utf-8")

    assert unreadable(str(landed)) is None
    assert unreadable(landed.as_uri()) is None
    assert local_path(landed.as_uri()) == landed
    assert unreadable(str(tmp_path / "gone.csv")) == f"landed file {tmp_path / 'gone.csv'} does not exist"
    assert unreadable((tmp_path / "gone.csv").as_uri()) == f"landed file {(tmp_path / 'gone.csv').as_uri()} does not exist"


@pytest.mark.parametrize(
    "uri",
    [
        "abfss://landing@acct.dfs.core.windows.net/2026-11-19/part-0.csv",
        "s3a://bucket/landing/2026-11-19/part-1.jsonl",
        "hdfs://nn:8020/l/part-2.json",
    ],
)
def test_other_uris_pass_to_spark_untouched(uri: str) -> None:
    assert local_path(uri) is None
    assert unreadable(uri) is None


def test_a_relative_path_is_refused_saying_why() -> None:
    problem = unreadable("landing/2026-11-19/part-0.csv")
    assert problem is not None and "is relative; give an absolute path or a URI" in problem


def test_a_file_that_is_neither_csv_nor_json_lines_is_refused(tmp_path: Path) -> None:
    assert unreadable(str(tmp_path / "notes.txt")) == f"landed file {tmp_path / 'notes.txt'} is neither CSV nor JSON lines"

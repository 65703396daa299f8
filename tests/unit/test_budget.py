"""The performance budget (bench/budget.json) is readable by bench/budget.py and names benchmarks that exist."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
spec = importlib.util.spec_from_file_location("budget", BENCH / "budget.py")
assert spec is not None and spec.loader is not None
budget = importlib.util.module_from_spec(spec)
sys.modules["budget"] = budget  # its dataclass looks its module up
spec.loader.exec_module(budget)


def test_every_ratio_names_a_benchmark_that_takes_its_arguments_and_a_recorded_value() -> None:
    tolerance, ratios = budget.load()
    assert tolerance == 0.03
    assert {r.command[0] for r in ratios} >= {"throughput.py", "processes.py", "sqs_throughput.py"}
    for ratio in ratios:
        script = (BENCH / ratio.command[0]).read_text()
        assert ratio.recorded > 0, ratio.name
        re.compile(ratio.pattern)
        for option in (a for a in ratio.command[1:] if a.startswith("--")):
            assert f'"{option}"' in script, f"{ratio.name}: {ratio.command[0]} has no option {option}"


@pytest.mark.parametrize(
    ("higher_is_better", "before", "after", "worse"),
    [(True, 2.0, 1.9, 0.05), (True, 2.0, 2.1, -0.05), (False, 1.0, 1.04, 0.04), (False, 1.0, 0.9, -0.1)],
)
def test_change_counts_worse_in_the_ratio_s_own_direction(
    higher_is_better: bool, before: float, after: float, worse: float
) -> None:
    ratio = budget.Ratio("r", ["x.py"], r"r = ([0-9.]+)", 1.0, higher_is_better)
    assert ratio.change(before, after) == pytest.approx(worse)


def test_a_ratio_is_read_from_the_benchmark_s_line_or_its_absence_is_named() -> None:
    ratio = budget.Ratio("CPU", ["throughput.py"], r"worker py/ceiling py = ([0-9.]+)", 1.0, False)
    assert ratio.read("...\nworker py/ceiling py = 0.964   (CPU per message...)\n") == 0.964
    with pytest.raises(ValueError, match="CPU: no line matching"):
        ratio.read("worker/ceiling = 0.98\n")

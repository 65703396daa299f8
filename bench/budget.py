"""The performance budget: the ratios the message path must keep, and a side-by-side check of a change against them.

bench/budget.json records, for each ratio, the benchmark that prints it, its value when recorded and which way is
better. A change to the message path runs ``--vs REF`` (REF: main, or the commit before the change): each benchmark
runs on REF's tree and on this one, alternately, in one run, and every ratio must stay within the budget's tolerance
(3 %) of REF's. Ratios, not absolute rates, so that the machine's load moves both sides alike.

    python bench/budget.py                 # this tree's ratios beside the recorded ones
    python bench/budget.py --vs main       # REF's and this tree's, alternately; exit 1 when one is worse by > 3 %
    python bench/budget.py --record        # measure this tree and write bench/budget.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET = Path(__file__).with_name("budget.json")


@dataclass(frozen=True)
class Ratio:
    """One recorded ratio: the benchmark command (bench/ script and its arguments) and how to read its value."""

    name: str
    command: list[str]
    pattern: str
    recorded: float
    higher_is_better: bool

    def read(self, output: str) -> float:
        found = re.search(self.pattern, output)
        if found is None:
            raise ValueError(f"{self.name}: no line matching {self.pattern!r} in the benchmark's output")
        return float(found.group(1))

    def change(self, before: float, after: float) -> float:
        """How much worse ``after`` is than ``before``, as a fraction (negative: better)."""
        worse = before - after if self.higher_is_better else after - before
        return worse / before


def load(path: Path = BUDGET) -> tuple[float, list[Ratio]]:
    data = json.loads(path.read_text())
    return float(data["tolerance"]), [Ratio(**entry) for entry in data["ratios"]]


def run(command: list[str], tree: Path) -> str:
    """One benchmark run on ``tree``'s code, with this venv's interpreter; its output, or an error naming it."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, str(tree / "bench" / command[0]), *command[1:]],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench/{' '.join(command)} on {tree} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return done.stdout


def worktree(ref: str) -> Path:
    """A detached checkout of ``ref`` beside this one, sharing its node_modules (Azurite)."""
    path = Path(tempfile.mkdtemp(prefix="budget-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), ref], check=True)
    (path / "node_modules").symlink_to(ROOT / "node_modules")
    return path


def measure(ratios: list[Ratio], tree: Path) -> dict[str, float]:
    """Each ratio's value on ``tree``: each distinct benchmark command runs once, however many ratios it prints."""
    outputs: dict[tuple[str, ...], str] = {}
    for ratio in ratios:
        key = tuple(ratio.command)
        if key not in outputs:
            outputs[key] = run(ratio.command, tree)
    return {ratio.name: ratio.read(outputs[tuple(ratio.command)]) for ratio in ratios}


def compare(ref: str, ratios: list[Ratio], tolerance: float, rounds: int) -> bool:
    """REF's and this tree's ratios, measured alternately; False when one is worse than REF's by over ``tolerance``."""
    base = worktree(ref)
    try:
        runs = [(measure(ratios, base), measure(ratios, ROOT)) for _ in range(rounds)]
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    ok = True
    for ratio in ratios:
        b = statistics.median(before[ratio.name] for before, _ in runs)
        a = statistics.median(after[ratio.name] for _, after in runs)
        change = ratio.change(b, a)
        verdict = "ok" if change <= tolerance else f"WORSE by more than {tolerance:.0%}"
        ok = ok and change <= tolerance
        print(f"{ratio.name:<44} {ref}: {b:6.3f}  this tree: {a:6.3f}  ({-change:+.1%})  {verdict}", flush=True)
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--vs", metavar="REF", help="compare with REF's tree, side by side, in one run")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each benchmark per tree (median compared)")
    parser.add_argument("--record", action="store_true", help="write this tree's ratios into bench/budget.json")
    parser.add_argument("--only", help="the ratios whose name contains this text")
    args = parser.parse_args(argv)
    tolerance, ratios = load()
    chosen = [r for r in ratios if args.only is None or args.only in r.name]
    if args.vs:
        return 0 if compare(args.vs, chosen, tolerance, args.rounds) else 1
    measured = measure(chosen, ROOT)
    for r in chosen:
        print(f"{r.name:<44} recorded: {r.recorded:6.3f}  this tree: {measured[r.name]:6.3f}", flush=True)
    if args.record:
        data = json.loads(BUDGET.read_text())
        data["recorded"] = f"by budget.py --record at {subprocess.getoutput('git rev-parse --short HEAD')}"
        for entry in data["ratios"]:
            entry["recorded"] = measured.get(entry["name"], entry["recorded"])
        BUDGET.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

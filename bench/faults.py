"""Reliability under storage faults, at length: the fault test's scenario with 20,000 messages by default.

The same run as tests/reliability/test_faults.py (tests/reliability/scenario.py does the work):
an Azurite of its own on disk, a fault proxy of the project's own
(tests/reliability/faultproxy.py) in front of it failing ``--fault-rate`` of the worker's
storage calls, spread over its kinds (500 and 503 answers, latency, dropped and reset
connections, and the same failures after Azurite did the operation), and one ``worker run``
subprocess whose handler records each success under UNIQUE (message id, outcome), so that a
second success of a message is seen. The messages are put straight into Azurite while the
worker starts; the run ends when every message is recorded and the queue is empty.

Printed: messages sent; handled (distinct messages); duplicated, split into duplicates whose
delivery the worker logged a lost lease for, duplicates after a delete it gave up, and
unexplained ones; lost; leases the worker counted lost that were not (the message never came
back: that delivery had deleted it); poisoned; requests the proxy saw and forwarded; faults by
kind and the after-forwarding ones on receives, renewals and deletes; failed calls injected
beside the retries the worker counted; the worker's counters; sending, handling and total
seconds. Then every way the run departs from what a correct worker does (the test's
assertions), or "no problems". Exit status 1 if a message was lost or a duplicate is
unexplained, 0 otherwise (counter mismatches are printed, not fatal, so the figures of a run
are never lost to a known counting bug).

Run: ``.venv/bin/python bench/faults.py [--messages 20000] [--fault-rate 0.2] [--seed 1] [--lease 2s]``.
It takes about 1 s per 60-100 messages on two shared cores (20,000: roughly 4-6 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.reliability.scenario import Settings, account, format_figures, problems, run_scenario  # noqa: E402
from worker.observability.logs import configure_logging  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    defaults = Settings()
    parser = argparse.ArgumentParser(
        description="Messages through a real worker while a proxy faults its storage calls; what came of them.",
        epilog="See the module docstring (bench/faults.py) for what is printed.",
    )
    parser.add_argument("--messages", type=int, default=20000, help="messages to send (default 20000)")
    parser.add_argument(
        "--fault-rate",
        type=float,
        default=defaults.fault_rate,
        help=f"share of storage calls faulted (default {defaults.fault_rate})",
    )
    parser.add_argument("--seed", type=int, default=defaults.seed, help="the proxy's random seed")
    parser.add_argument("--lease", default=defaults.lease, help=f"worker.leaseDuration (default {defaults.lease})")
    parser.add_argument(
        "--slow-every",
        type=int,
        default=defaults.slow_every,
        help=f"every n-th message works --slow-seconds (default {defaults.slow_every}; 0: none)",
    )
    parser.add_argument("--slow-seconds", type=float, default=defaults.slow_seconds)
    parser.add_argument("--max-dequeue-count", type=int, default=defaults.max_dequeue_count)
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds the worker gets to handle everything (default: 60 + messages / 20)",
    )
    parser.add_argument(
        "--keep", type=Path, default=None, help="keep the run's folder (worker log, handled.sqlite3, Azurite's files) here"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging("WARNING", json_lines=False)
    settings = Settings(
        messages=args.messages,
        fault_rate=args.fault_rate,
        seed=args.seed,
        lease=args.lease,
        slow_every=args.slow_every,
        slow_seconds=args.slow_seconds,
        max_dequeue_count=args.max_dequeue_count,
        timeout=args.timeout if args.timeout is not None else 60 + args.messages / 20,
    )
    if args.keep is not None:
        run = asyncio.run(run_scenario(settings, args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="bench-faults-") as folder:
            run = asyncio.run(run_scenario(settings, Path(folder)))
    print(format_figures(run))
    found = problems(run)
    print("problems:" if found else "no problems")
    for problem in found:
        print(f"  - {problem}")
    acc = account(run)
    return 1 if acc.lost or acc.unexplained_duplicates or run.left_in_queue else 0


if __name__ == "__main__":
    sys.exit(main())

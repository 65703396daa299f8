"""A realistic raw data set for the pipeline: order events landed as CSV and JSON-lines files, faults included.

The generator is seeded, so the same arguments give the same files, and it
returns a manifest that counts exactly what it put in: how many rows, and how
many of them are malformed, missing a field, of a wrong type, duplicated or
late. Tests compare the pipeline's output with these counts.

Layout: ``<root>/<day>/part-<n>.csv`` or ``.jsonl``, one day per folder.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path

COLUMNS = ["event_id", "order_id", "customer_id", "sku", "quantity", "unit_price", "country", "event_time"]
SKUS = [f"SKU-{n:03d}" for n in range(1, 41)]
COUNTRIES = ["DE", "FR", "NL", "PL", "SE", "ES", "IT", "GB"]
#: Share of rows carrying each fault.
FAULT_RATES = {"malformed": 0.02, "missing": 0.02, "wrong_type": 0.02, "duplicate": 0.03, "late": 0.03}
#: Roughly how many bytes one row takes, to turn a size into a row count.
BYTES_PER_ROW = 130


@dataclass
class Manifest:
    """What the generator wrote, counted exactly."""

    files: list[str] = field(default_factory=list)
    rows: int = 0
    faults: Counter[str] = field(default_factory=Counter)

    @property
    def quarantined(self) -> int:
        """Rows the pipeline must reject: malformed, missing a field, or of a wrong type."""
        return self.faults["malformed"] + self.faults["missing"] + self.faults["wrong_type"]

    @property
    def clean(self) -> int:
        """Rows the pipeline must keep: every valid row once (late ones included, flagged)."""
        return self.rows - self.quarantined - self.faults["duplicate"]

    def as_dict(self) -> dict[str, object]:
        return {
            "files": self.files,
            "rows": self.rows,
            "faults": dict(self.faults),
            "quarantined": self.quarantined,
            "clean": self.clean,
        }


def _valid_row(rng: random.Random, day: date, serial: int, late: bool) -> dict[str, str]:
    when = datetime.combine(day, datetime.min.time()) + timedelta(seconds=rng.randrange(86400))
    if late:
        when -= timedelta(days=rng.randint(3, 10))
    return {
        "event_id": f"ev-{day:%Y%m%d}-{serial:07d}",
        "order_id": f"ord-{rng.randrange(10**6):06d}",
        "customer_id": f"cus-{rng.randrange(5000):04d}",
        "sku": rng.choice(SKUS),
        "quantity": str(rng.randint(1, 12)),
        "unit_price": f"{rng.uniform(1, 250):.2f}",
        "country": rng.choice(COUNTRIES),
        "event_time": when.isoformat(timespec="seconds"),
    }


def _faulty(rng: random.Random, row: dict[str, str], fault: str) -> dict[str, str]:
    row = dict(row)
    if fault == "missing":
        row[rng.choice(["sku", "quantity", "event_time"])] = ""
    elif fault == "wrong_type":
        column, value = rng.choice([("quantity", "three"), ("unit_price", "n/a"), ("event_time", "yesterday")])
        row[column] = value
    return row


def _render(rows: list[dict[str, str] | str], fmt: str) -> str:
    """File text: each row is a dict, or a string for a malformed line written as it is."""
    out = io.StringIO()
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(COLUMNS)
        for row in rows:
            if isinstance(row, str):
                out.write(row + "\n")
            else:
                writer.writerow([row[c] for c in COLUMNS])
    else:
        for row in rows:
            if isinstance(row, str):
                out.write(row + "\n")
            else:
                # Missing fields are left out of JSON, as a real producer would.
                out.write(json.dumps({k: v for k, v in row.items() if v != ""}) + "\n")
    return out.getvalue()


def generate(
    root: Path,
    size_bytes: int = 1_000_000,
    files: int = 8,
    days: int = 4,
    seed: int = 20261123,
    start: date = date(2026, 11, 16),
) -> Manifest:
    """Write about ``size_bytes`` of order events in ``files`` files over ``days`` days under ``root``."""
    rng = random.Random(seed)
    manifest = Manifest()
    rows_per_file = max(10, size_bytes // BYTES_PER_ROW // files)
    for n in range(files):
        day = start + timedelta(days=n % days)
        fmt = "csv" if n % 2 == 0 else "jsonl"
        rows: list[dict[str, str] | str] = []
        valid: list[dict[str, str]] = []
        for i in range(rows_per_file):
            serial = n * rows_per_file + i
            draw = rng.random()
            edges = list(FAULT_RATES.items())
            fault, cumulative = None, 0.0
            for name, rate in edges:
                cumulative += rate
                if draw < cumulative:
                    fault = name
                    break
            if fault == "duplicate" and valid:
                rows.append(dict(rng.choice(valid)))
            elif fault == "malformed":
                rows.append("###,truncated" if fmt == "csv" else '{"event_id": "broken", ')
            elif fault in ("missing", "wrong_type"):
                rows.append(_faulty(rng, _valid_row(rng, day, serial, late=False), fault))
            else:
                fault = "late" if fault == "late" else None
                row = _valid_row(rng, day, serial, late=fault == "late")
                valid.append(row)
                rows.append(row)
            if fault is not None:
                manifest.faults[fault] += 1
        path = root / day.isoformat() / f"part-{n:04d}.{fmt}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_render(rows, fmt), encoding="utf-8")
        manifest.files.append(str(path))
        manifest.rows += len(rows)
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--size-mb", type=float, default=1.0, help="about this many MB in all (1 to 1000)")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--days", type=int, default=4)
    parser.add_argument("--seed", type=int, default=20261123)
    args = parser.parse_args()
    manifest = generate(args.root, int(args.size_mb * 1e6), args.files, args.days, args.seed)
    print(json.dumps(manifest.as_dict(), indent=2))


if __name__ == "__main__":
    main()

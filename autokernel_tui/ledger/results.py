"""results.tsv: one row per experiment, written only by the engine from harness verdicts.

Append-only and crash-safe (see ``durable``): a torn last line left by a crash
is cut when the file is opened, so the file always parses.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from autokernel_tui.ledger import crashpoints
from autokernel_tui.ledger.durable import append_line, repair_torn_tail

COLUMNS = (
    "experiment", "timestamp", "task", "commit", "status", "correctness", "latency_us",
    "speedup_vs_baseline", "speedup_vs_incumbent", "ci_low", "ci_high", "pct_roofline",
    "tflops", "gbps", "peak_vram_mb", "agent", "tokens", "cost_usd", "description",
)
STATUSES = ("keep", "discard", "fail", "crash", "timeout", "rejected", "vetoed", "reverted")
FLOAT_COLUMNS = ("latency_us", "speedup_vs_baseline", "speedup_vs_incumbent", "ci_low", "ci_high",
                 "pct_roofline", "tflops", "gbps", "peak_vram_mb", "cost_usd")
INT_COLUMNS = ("experiment", "tokens")
HEADER = "\t".join(COLUMNS)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return ""
        return f"{value:.6g}"
    # Tabs and newlines would break the table: a description is one line.
    return " ".join(str(value).split())


def format_row(row: dict[str, Any]) -> str:
    unknown = set(row) - set(COLUMNS)
    if unknown:
        raise ValueError(f"unknown results columns: {sorted(unknown)}")
    if row.get("status") not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, not {row.get('status')!r}")
    return "\t".join(_cell(row.get(c)) for c in COLUMNS)


def parse_value(column: str, text: str) -> Any:
    """Typed value of one cell: ints and floats for numeric columns, None for empty ones."""
    if column in INT_COLUMNS:
        return int(text) if text else None
    if column in FLOAT_COLUMNS:
        return float(text) if text else None
    return text


def read_rows(path: Path, typed: bool = False) -> list[dict[str, Any]]:
    """Every complete row (a torn tail is ignored, not repaired: readers never write)."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    if not text.endswith("\n"):
        lines = lines[:-1]  # torn tail
    rows = []
    for line in lines[1:]:
        if not line:
            continue
        cells = line.split("\t")
        if len(cells) != len(COLUMNS):
            continue
        row = dict(zip(COLUMNS, cells))
        rows.append({c: parse_value(c, v) for c, v in row.items()} if typed else row)
    return rows


class ResultsLog:
    """The writer: opened once per engine session, after repairing the file."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair_torn_tail(self.path)
        if not self.path.exists() or self.path.stat().st_size == 0:
            append_line(self.path, HEADER)
        self.rows: list[dict[str, Any]] = read_rows(self.path, typed=True)

    def experiments(self) -> set[int]:
        return {r["experiment"] for r in self.rows}

    def append(self, row: dict[str, Any]) -> dict[str, Any]:
        line = format_row(row)
        n = int(row["experiment"])
        if n in self.experiments():
            raise ValueError(f"experiment {n} already has a results row")
        if crashpoints.armed("torn-row", n):
            with open(self.path, "ab") as fh:  # the window a real kill rarely hits
                fh.write(line.encode()[: len(line) // 2])
                fh.flush()
                os.fsync(fh.fileno())
            crashpoints.crash_point("torn-row", n)
        append_line(self.path, line)
        typed = {c: parse_value(c, v) for c, v in zip(COLUMNS, line.split("\t"))}
        self.rows.append(typed)
        return typed

"""results.tsv: one row per experiment, written only by the engine from harness verdicts.

Append-only and crash-safe (see ``durable``): a torn last line left by a crash
is cut when the file is opened, so the file always parses.

Every column's name says its unit (``_us``, ``_pct`` = percent 0-100, ``_mib``,
``speedup_*`` and ``ci_*`` = ratios, > 1 faster). Columns renamed since a file
was written (``RENAMED``) are read under their new names; the engine rewrites
an old header when it opens the file to append (values and units unchanged).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from autokernel_tui.ledger import crashpoints
from autokernel_tui.ledger.durable import append_line, repair_torn_tail, write_file_atomic

COLUMNS = (
    "experiment", "timestamp", "task", "commit", "status", "correctness", "latency_us",
    "speedup_vs_baseline", "speedup_vs_incumbent", "ci_low", "ci_high", "roofline_pct",
    "tflops", "gbps", "peak_vram_mib", "agent", "tokens", "cost_usd", "description",
)
# Old name -> new name, for results.tsv headers, result rows and harness reports written before
# the rename (issue 24). Same values, same units: these names only did not say their unit
# (pct_roofline was already percent in results.tsv and reports; peak_vram_mb was MiB).
RENAMED = {"pct_roofline": "roofline_pct", "peak_vram_mb": "peak_vram_mib"}
STATUSES = ("keep", "discard", "fail", "crash", "timeout", "rejected", "vetoed", "reverted")
FLOAT_COLUMNS = ("latency_us", "speedup_vs_baseline", "speedup_vs_incumbent", "ci_low", "ci_high",
                 "roofline_pct", "tflops", "gbps", "peak_vram_mib", "cost_usd")
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


def header_columns(header: str) -> tuple[str, ...]:
    """The columns a header line names, old names read as their new ones. A header that is not
    a permutation of COLUMNS (none such was ever written) is read as COLUMNS, by position."""
    names = tuple(RENAMED.get(name, name) for name in header.rstrip("\r").split("\t"))
    return names if len(names) == len(COLUMNS) and set(names) == set(COLUMNS) else COLUMNS


def read_rows(path: Path, typed: bool = False) -> list[dict[str, Any]]:
    """Every complete row, keyed by COLUMNS in their order, whatever the file's header called
    them (a torn tail is ignored, not repaired: readers never write)."""
    path = Path(path)
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    if not text.endswith("\n"):
        lines = lines[:-1]  # torn tail
    if not lines:
        return []
    columns = header_columns(lines[0])
    rows = []
    for line in lines[1:]:
        if not line:
            continue
        cells = line.split("\t")
        if len(cells) != len(COLUMNS):
            continue
        cell = dict(zip(columns, cells))
        row = {c: cell[c] for c in COLUMNS}
        rows.append({c: parse_value(c, v) for c, v in row.items()} if typed else row)
    return rows


def upgrade_row(row: dict[str, Any]) -> dict[str, Any]:
    """A results row (e.g. from an old ``result`` event) under today's column names."""
    return {RENAMED.get(k, k): v for k, v in row.items()}


def _upgrade_header(path: Path) -> None:
    """Give a file written before a rename today's header (only the engine, holding the workspace
    lock, calls this). Rows are untouched: the renamed columns kept their place and unit."""
    text = path.read_text(encoding="utf-8")
    header, sep, rest = text.partition("\n")
    if header != HEADER and tuple(RENAMED.get(n, n) for n in header.split("\t")) == COLUMNS:
        write_file_atomic(path, HEADER + sep + rest)


class ResultsLog:
    """The writer: opened once per engine session, after repairing the file."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair_torn_tail(self.path)
        if not self.path.exists() or self.path.stat().st_size == 0:
            append_line(self.path, HEADER)
        else:
            _upgrade_header(self.path)
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

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

from autokernel_tui.ledger import badinput, crashpoints
from autokernel_tui.ledger.durable import append_line, repair_torn_tail, write_file_atomic

COLUMNS = (
    "experiment", "timestamp", "task", "commit", "status", "correctness", "latency_us",
    "speedup_vs_baseline", "speedup_vs_incumbent", "ci_low", "ci_high", "roofline_pct",
    "tflops", "gbps", "peak_vram_mib", "agent", "tokens", "cost_usd", "description",
    "disturbed_shapes",
)
# Columns added at the end after files were written without them (issue 21: a shape whose timed
# calls stayed too spread out after a retake is counted here, its time left out of the speedups).
# A row or header without them reads them as empty; the engine gives an old file today's header.
ADDED = ("disturbed_shapes",)
# Old name -> new name, for results.tsv headers, result rows and harness reports written before
# the rename (issue 24). Same values, same units: these names only did not say their unit
# (pct_roofline was already percent in results.tsv and reports; peak_vram_mb was MiB).
RENAMED = {"pct_roofline": "roofline_pct", "peak_vram_mb": "peak_vram_mib"}
STATUSES = ("keep", "discard", "fail", "crash", "timeout", "rejected", "vetoed", "reverted")
FLOAT_COLUMNS = ("latency_us", "speedup_vs_baseline", "speedup_vs_incumbent", "ci_low", "ci_high",
                 "roofline_pct", "tflops", "gbps", "peak_vram_mib", "cost_usd")
INT_COLUMNS = ("experiment", "tokens", "disturbed_shapes")
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


# Allowed range of each numeric column: a value outside it is read as empty (and reported).
POSITIVE_COLUMNS = ("speedup_vs_baseline", "speedup_vs_incumbent", "ci_low", "ci_high")


def _in_range(column: str, value: Any) -> Any:
    if column in INT_COLUMNS and value < (1 if column == "experiment" else 0):
        raise ValueError(f"{column} must be {'at least 1' if column == 'experiment' else 'at least 0'}")
    if column in FLOAT_COLUMNS:
        if not math.isfinite(value):
            raise ValueError(f"{column} must be a finite number")
        if value < 0 or (value == 0 and column in POSITIVE_COLUMNS):
            raise ValueError(f"{column} must be {'above' if column in POSITIVE_COLUMNS else 'at least'} 0")
    return value


def parse_value(column: str, text: str) -> Any:
    """Typed value of one cell: ints and floats for numeric columns, None for empty ones.
    Raises ValueError for a cell that is not a number of that column's kind and range."""
    if not text:
        return None
    if column in INT_COLUMNS:
        return _in_range(column, int(text))
    if column in FLOAT_COLUMNS:
        return _in_range(column, float(text))
    return text


def typed_value(column: str, value: Any) -> Any:
    """A row's value as results.tsv will hold it and readers will read it back, without writing
    and parsing it: a float rounded to the six significant digits the file keeps, text on one
    line, anything else read as its cell would be. Raises ValueError as ``parse_value`` does."""
    if column in FLOAT_COLUMNS and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            return None  # written empty (``_cell``), as it always was
        return _in_range(column, float(f"{value:.6g}"))
    if column in INT_COLUMNS and isinstance(value, int) and not isinstance(value, bool):
        return _in_range(column, value)
    return parse_value(column, _cell(value))


def header_columns(header: str) -> tuple[str, ...] | None:
    """The columns a header line names, old names read as their new ones, when it is today's header
    or an older one (from before a rename, or without the columns added since: ``ADDED``); None for a
    line that is not a header."""
    names = tuple(RENAMED.get(name, name) for name in header.rstrip("\r").split("\t"))
    return names if len(set(names)) == len(names) and set(names) | set(ADDED) == set(COLUMNS) else None


def parse_cells(cells: list[str], where: str, problems: list[str] | None) -> dict[str, Any] | None:
    """One row's cells, typed and checked: None when the row cannot be used (wrong number of
    columns, no valid experiment number, unknown status), a bad number read as empty. Each
    problem is reported as one line starting with ``where``."""
    if len(COLUMNS) - len(ADDED) <= len(cells) < len(COLUMNS):  # written before a column was added
        cells = cells + [""] * (len(COLUMNS) - len(cells))
    if len(cells) != len(COLUMNS):
        badinput.report(problems, f"{where}: {len(cells)} columns, expected {len(COLUMNS)}; row skipped")
        return None
    return _typed(zip(COLUMNS, cells), parse_value, where, problems)


def _typed(values: Any, convert: Any, where: str, problems: list[str] | None) -> dict[str, Any] | None:
    """(column, value) pairs typed by ``convert``, checked as ``parse_cells`` says."""
    row: dict[str, Any] = {}
    for column, value in values:
        text = _cell(value)
        try:
            row[column] = convert(column, value)
        except ValueError as exc:
            if column == "experiment":
                badinput.report(problems, f"{where}: experiment {badinput.short(text)} is not a whole number "
                                          "of at least 1; row skipped")
                return None
            why = f"but {str(exc).removeprefix(column + ' ')}" if "must be" in str(exc) else "not a number"
            badinput.report(problems, f"{where}: {column} is {badinput.short(text)}, {why}; read as empty")
            row[column] = None
    if row["experiment"] is None:
        badinput.report(problems, f"{where}: no experiment number; row skipped")
        return None
    if row["status"] not in STATUSES:
        badinput.report(problems, f"{where}: status {badinput.short(row['status'])} is not one of "
                                  f"{', '.join(STATUSES)}; row skipped")
        return None
    return row


def check_row(row: Any, where: str, problems: list[str] | None) -> dict[str, Any] | None:
    """A row given as a dict (a ``result`` event's ``row``), typed and checked like a line of the file."""
    if not isinstance(row, dict):
        badinput.report(problems, f"{where}: the row is not an object; skipped")
        return None
    unknown = set(row) - set(COLUMNS)
    if unknown:
        badinput.report(problems, f"{where}: unknown columns {sorted(unknown)[:3]}; row skipped")
        return None
    return typed_row(row, where, problems)


def typed_row(row: dict[str, Any], where: str, problems: list[str] | None) -> dict[str, Any] | None:
    """A row's values as results.tsv holds them (``typed_value``), checked like a line of the file;
    missing columns are empty."""
    return _typed(((c, row.get(c)) for c in COLUMNS), typed_value, where, problems)


def _clean_text(row: dict[str, Any], cells: list[str]) -> dict[str, str]:
    """The untyped form of a checked row: the file's own text, empty where a value was rejected."""
    return {c: (text if row[c] is not None or c not in INT_COLUMNS + FLOAT_COLUMNS else "")
            for c, text in zip(COLUMNS, cells)}


def read_rows(path: Path, typed: bool = False, problems: list[str] | None = None) -> list[dict[str, Any]]:
    """Every usable row (a torn tail is ignored, not repaired: readers never write).

    A line that cannot be used (wrong column count, no experiment number, unknown status, a
    second row for one experiment) is skipped; a number that is not one (``abc``, ``nan``,
    ``inf``, a negative count) is read as empty; bytes that are not UTF-8 are replaced. Each
    is reported once, naming the file and the line (see ``badinput``).
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    if not data.endswith(b"\n"):
        lines = lines[:-1]  # torn tail
    if not lines:
        return []
    columns = COLUMNS
    rows = []
    seen: set[int] = set()
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = badinput.at(path, lineno)
        line = badinput.decode_line(raw, path, lineno, problems)
        if lineno == 1:
            if line.rstrip("\r") == HEADER:
                continue
            named = header_columns(line)
            if named is not None:
                columns = named  # a header from before a rename or an added column: its names
                continue
            badinput.report(problems, f"{where}: not the header line; read as a row")
        cells = line.rstrip("\r").split("\t")
        if columns != COLUMNS and len(cells) == len(columns):
            by_name = dict(zip(columns, cells))
            cells = [by_name.get(c, "") for c in COLUMNS]
        row = parse_cells(cells, where, problems)
        if row is None:
            continue
        if row["experiment"] in seen:
            badinput.report(problems, f"{where}: a second row for experiment {row['experiment']}; skipped")
            continue
        seen.add(row["experiment"])
        rows.append(row if typed else _clean_text(row, cells))
    return rows


def upgrade_row(row: dict[str, Any]) -> dict[str, Any]:
    """A results row (e.g. from an old ``result`` event) under today's column names."""
    return {RENAMED.get(k, k): v for k, v in row.items()}


def _upgrade_header(path: Path) -> None:
    """Give a file written before a rename or an added column today's header (only the engine, holding
    the workspace lock, calls this). Rows are untouched: the renamed columns kept their place and unit,
    and a row without the added columns at its end reads them as empty."""
    data = path.read_bytes()  # bytes: a row that is not UTF-8 is the reader's to report, untouched here
    header, sep, rest = data.partition(b"\n")
    text = header.decode("utf-8", "replace")
    names = header_columns(text)
    # Only a header in today's order (the added columns are the last ones) keeps every row's cells in place.
    if text != HEADER and names is not None and names == COLUMNS[:len(names)]:
        write_file_atomic(path, HEADER.encode() + sep + rest)


class ResultsLog:
    """The writer: opened once per engine session, after repairing the file.

    ``problems`` holds what opening found (a cut last line, lines that could not be used,
    bad numbers), one line each; ``needs_rewrite`` says the file holds lines that readers
    would skip or numbers they would blank, so the engine rewrites it clean (``rewrite``).
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.problems: list[str] = []
        if self.path.exists():
            last = self.path.read_bytes().count(b"\n") + 1
            cut = repair_torn_tail(self.path)
            if cut:
                self.problems.append(f"{badinput.at(self.path, last)}: an incomplete last line "
                                     f"({cut} bytes, no newline) was cut")
        if not self.path.exists() or self.path.stat().st_size == 0:
            append_line(self.path, HEADER)
        else:
            _upgrade_header(self.path)
        found: list[str] = []
        self.rows: list[dict[str, Any]] = read_rows(self.path, typed=True, problems=found)
        self.problems += found
        self.needs_rewrite = bool(found)

    def experiments(self) -> set[int]:
        return {r["experiment"] for r in self.rows}

    def rewrite(self, rows: list[dict[str, Any]], backup: bool) -> Path | None:
        """Replace the file with ``rows`` in experiment order (atomically). With ``backup`` the
        old file is kept first as ``results.tsv.bad-<n>``; returns that path."""
        rows = sorted(rows, key=lambda r: r["experiment"])
        saved = None
        if backup and self.path.exists():
            k = 1
            while self.path.with_name(f"{self.path.name}.bad-{k}").exists():
                k += 1
            saved = self.path.with_name(f"{self.path.name}.bad-{k}")
            saved.write_bytes(self.path.read_bytes())
        write_file_atomic(self.path, "".join(line + "\n" for line in [HEADER, *map(format_row, rows)]))
        self.rows = read_rows(self.path, typed=True, problems=[])
        self.needs_rewrite = False
        return saved

    def append(self, row: dict[str, Any]) -> dict[str, Any]:
        """Write ``row``; returns it as readers will read it back (a value out of its column's range
        empty, floats to the file's precision), which is what the ``result`` event carries."""
        unknown = set(row) - set(COLUMNS)
        if unknown:
            raise ValueError(f"unknown results columns: {sorted(unknown)}")
        problems: list[str] = []
        typed = typed_row(row, f"{self.path}: new row", problems)
        if typed is None:
            raise ValueError(problems[0])
        line = format_row(typed)
        n = typed["experiment"]
        if n in self.experiments():
            raise ValueError(f"experiment {n} already has a results row")
        if crashpoints.armed("torn-row", n):
            with open(self.path, "ab") as fh:  # the window a real kill rarely hits
                fh.write(line.encode()[: len(line) // 2])
                fh.flush()
                os.fsync(fh.fileno())
            crashpoints.crash_point("torn-row", n)
        append_line(self.path, line)
        self.rows.append(typed)
        return typed

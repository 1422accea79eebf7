"""results.tsv as a live table: statuses coloured, sortable by any column with one key."""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from typing import Callable

from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._two_way_dict import TwoWayDict
from textual.cache import LRUCache
from textual.renderables.styled import Styled
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, Row, RowKey

from autokernel_tui.tui import formatting as fmt

STATUS_STYLE = {
    "keep": "bold #5fd75f", "discard": "#8a8a8a", "fail": "#ff5f5f", "crash": "bold #ff5f5f",
    "timeout": "#ff8700", "rejected": "bold #d75fd7", "vetoed": "#d7af5f", "reverted": "#87afd7",
}
_NUM = fmt.to_float


def _num_sort(value):
    return (0, value) if value is not None else (1, 0)


@dataclass(frozen=True)
class Column:
    """One results column: what it shows, how wide it may be, how much it matters.

    ``width``: the content width it takes (None: as wide as its widest cell so far, up to
    ``cap``); ``rank``: the order in which columns claim room when the table is narrow (0 first);
    ``flex``: takes the room left over, its text cut with an ellipsis, down to ``width``.
    """
    key: str
    label: str
    text: Callable[[dict], str]
    rank: int
    width: int | None = None
    cap: int = 40
    justify: str = "left"
    style: Callable[[dict], str] = lambda r: ""
    flex: bool = False


def _disturbed(n) -> str:
    n = int(_NUM(n) or 0)
    return f"{n} shape{'s' if n != 1 else ''}" if n else ""


def _speed(key: str) -> Callable[[dict], str]:
    return lambda r: fmt.speedup(r.get(key))


SPEED_VS_START = Column("speedup_vs_start", "vs start", _speed("speedup_vs_start"), 2, 8, justify="right")
COLUMNS = (
    Column("experiment", "exp", lambda r: str(r.get("experiment", "")), 0, justify="right"),
    Column("task", "kernel", lambda r: str(r.get("task", "")), 3, cap=16),
    Column("status", "status", lambda r: str(r.get("status", "")), 1, 8,
           style=lambda r: STATUS_STYLE.get(r.get("status", ""), "")),
    Column("speedup_vs_baseline", "vs base", _speed("speedup_vs_baseline"), 2, 7, justify="right"),
    Column("speedup_vs_incumbent", "vs inc", _speed("speedup_vs_incumbent"), 4, 7, justify="right"),
    Column("ci", "CI", lambda r: fmt.interval(r.get("ci_low"), r.get("ci_high")), 9, 12, style=lambda r: "dim"),
    Column("latency_us", "latency", lambda r: fmt.micros(r.get("latency_us")), 8, 9, justify="right"),
    Column("roofline_pct", "roof", lambda r: fmt.percent(r.get("roofline_pct")), 6, 6, justify="right"),
    Column("agent", "agent", lambda r: str(r.get("agent", "")), 7, cap=12, style=lambda r: "dim"),
    # Shapes whose times stayed too spread out after a retake (left out of the speedups): ranked with
    # vs inc, since it says which speedups not to trust; shown only once a row has one.
    Column("disturbed_shapes", "disturbed", lambda r: _disturbed(r.get("disturbed_shapes")), 4, 9,
           style=lambda r: "#ff8700"),
    Column("description", "description", lambda r: str(r.get("description", "")), 5, 16, flex=True),
)
BY_KEY = {c.key: c for c in COLUMNS + (SPEED_VS_START,)}
# Columns that say nothing on a run's rows so far are left out to make room (roof on the CPU).
SPARSE = ("ci", "latency_us", "roofline_pct", "agent", "disturbed_shapes")
EMPTY = ("", "-")
FLEX_MIN = 8  # the description, cut, is still worth showing down to this many cells


def cell(column: Column, row: dict) -> Text:
    return Text(column.text(row), column.style(row), justify=column.justify,  # type: ignore[arg-type]
                overflow="ellipsis", no_wrap=True)


def plan_columns(columns: tuple[Column, ...], room: int, widths: dict[str, int], filled: set[str] | None,
                 padding: int = 2) -> tuple[list[str], int]:
    """Which columns fit in ``room`` cells (each takes its width plus ``padding``), by rank, and
    the width of the flexible one (0 when none is shown). Shown in ``columns``' order.
    ``filled``: the sparse columns that have a value in some row (None: no rows yet, all count)."""
    chosen: set[str] = set()
    used = reserved = 0
    for column in sorted(columns, key=lambda c: c.rank):
        if filled is not None and column.key in SPARSE and column.key not in filled:
            continue
        width = column.width if column.flex else widths.get(column.key, column.width or len(column.label))
        if column.flex and used + width + padding > room:
            width = max(0, room - used - padding)  # less than it likes: it still comes before lower ranks
            if width < FLEX_MIN:
                continue
        if used + width + padding <= room:
            chosen.add(column.key)
            used += width + padding
            if column.flex:
                reserved = width
    flex = next((c for c in columns if c.flex and c.key in chosen), None)
    flex_width = 0
    if flex is not None:
        flex_width = max(reserved, min(room - used + reserved, widths.get(flex.key, 0)))
    return [c.key for c in columns if c.key in chosen], flex_width


SORT_VALUE = {
    "experiment": lambda r: (_NUM(r.get("experiment")) or 0, str(r.get("timestamp", ""))),
    "ci": lambda r: _num_sort(_NUM(r.get("ci_low"))),
}


def sort_value(column_key: str):
    """The sort key of one column: numbers first in numeric order, then the rest as text."""
    if column_key in SORT_VALUE:
        return SORT_VALUE[column_key]

    def value(row):
        number = _NUM(row.get(column_key))
        return (0, number, "") if number is not None else (1, 0, str(row.get(column_key, "")))
    return value


def insertion_point(keys: list, key, reverse: bool) -> int:
    """Where ``key`` goes in ``keys`` (sorted ascending, or descending when ``reverse``): after
    the equal keys, so the newest of equals comes last, as a stable sort would put it."""
    lo, hi = 0, len(keys)
    while lo < hi:
        mid = (lo + hi) // 2
        if (keys[mid] < key) if reverse else (key < keys[mid]):
            hi = mid
        else:
            lo = mid + 1
    return lo


class ResultsTable(DataTable):
    """A DataTable that keeps its own display order and fits its columns to its width.

    A new result goes in at its sorted place (bisect) instead of re-sorting all rows:
    with 10,000 rows a re-sort on every result was most of the cost of an approval.
    Columns claim room by rank (exp, status, speedup, kernel, vs inc, description, agent, ...);
    the description takes what is left, cut with an ellipsis; sparse columns with nothing in
    them yet (roof on the CPU) are left out. On a CPU run the speedup column is vs the starter
    kernel (rows carry ``speedup_vs_start``, from LiveState): vs baseline means nothing there.
    """

    DEFAULT_CSS = "ResultsTable { scrollbar-size-vertical: 1; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._arrived: list[tuple[dict, Row]] = []  # (result row, table row), oldest first
        self._order: list[Row] = []  # display order, top to bottom (Rows: RowKey hashing is slow)
        self._order_keys: list = []  # the sort key of each row in _order (only while sorted)
        self.sorted_by: tuple[str, bool] | None = None
        self._offsets: list[tuple[RowKey, int]] = []  # (row, line in row) per line: rows are one line high
        self._cell_lines: LRUCache = LRUCache(1024)  # see _render_cell
        self.vs_start = False  # the speedup column: vs the starter kernel (CPU) instead of vs baseline
        self._shown: list[Column] = []  # the columns on screen, in order
        self._widest: dict[str, int] = {}  # per variable-width column: its widest cell so far
        self._filled: set[str] = set()  # sparse columns with a value in some row
        self._room = 0  # content width the columns were planned for

    @property
    def all_columns(self) -> tuple[Column, ...]:
        return tuple(SPEED_VS_START if self.vs_start and c.key == "speedup_vs_baseline" else c for c in COLUMNS)

    def on_mount(self) -> None:
        self.cursor_type = "cell"
        self.zebra_stripes = True
        self._relayout(force=True)

    def on_resize(self) -> None:
        self._relayout()

    def use_vs_start(self, on: bool) -> None:
        """Show the speedup vs the starter kernel (CPU runs) or vs the baseline (GPU)."""
        if on != self.vs_start:
            self.vs_start = on
            self._relayout(force=True)

    def _measure(self, row: dict) -> None:
        for column in (BY_KEY["experiment"], BY_KEY["task"], BY_KEY["agent"], BY_KEY["description"]):
            width = min(len(column.text(row)), column.cap) if not column.flex else len(column.text(row))
            if width > self._widest.get(column.key, len(column.label)):
                self._widest[column.key] = width
        for key in SPARSE:
            if key not in self._filled and BY_KEY[key].text(row) not in EMPTY:
                self._filled.add(key)

    def _relayout(self, force: bool = False) -> None:
        """Plan the columns for the current width; change the table only where the plan changed."""
        room = self.size.width - self.styles.scrollbar_size_vertical  # a scrollbar may come: keep room for it
        if room <= 0 or (not force and room == self._room and not self._stale):
            return
        self._room = room
        self._stale = False
        widths = {c.key: max(len(c.label), self._widest.get(c.key, c.width or 0)) for c in self.all_columns}
        keys, flex_width = plan_columns(self.all_columns, room, widths, self._filled if self._arrived else None,
                                        2 * self.cell_padding)
        columns = [BY_KEY[k] for k in keys]
        if [c.key for c in columns] != [c.key for c in self._shown]:
            self._set_columns(columns)
        for column in columns:
            current = self.columns[ColumnKey(column.key)]
            if column.flex:
                current.width, current.auto_width = flex_width, False
        self._require_update_dimensions = True
        self.refresh()

    _stale = False

    def _set_columns(self, columns: list[Column]) -> None:
        """Take out the columns not planned, add the new ones (their cells made from the kept result
        rows) and put them in order. A resize, not a result, does this: O(rows) is fine here."""
        wanted = {c.key for c in columns}
        for column in self._shown:
            if column.key not in wanted:
                self.remove_column(ColumnKey(column.key))
        have = {c.key for c in self._shown}
        for column in columns:
            if column.key not in have:
                key = self.add_column(column.label, key=column.key)
                for row, table_row in self._arrived:
                    self._data[table_row.key][key] = cell(column, row)
        self._shown = list(columns)
        self._column_locations = TwoWayDict({ColumnKey(c.key): i for i, c in enumerate(columns)})
        self._update_count += 1
        self._cell_lines.clear()

    def add_results(self, rows: list[dict]) -> None:
        """Append rows (the newest last); a sorted table stays sorted, an unsorted one follows the newest."""
        if not rows:
            return
        following = self.row_count == 0 or self.cursor_row >= self.row_count - 1
        key_of = sort_value(self.sorted_by[0]) if self.sorted_by is not None else None
        reverse = bool(self.sorted_by and self.sorted_by[1])
        before = (dict(self._widest), set(self._filled), bool(self._arrived))
        for row in rows:
            self._measure(row)
            table_row = self.rows[self.add_row(*(cell(column, row) for column in self._shown))]
            self._arrived.append((row, table_row))
            if key_of is None:
                at = len(self._order)
            else:
                key = key_of(row)
                at = insertion_point(self._order_keys, key, reverse)
                self._order_keys.insert(at, key)
            self._order.insert(at, table_row)
            self._offsets.insert(at, (table_row.key, 0))
        if key_of is not None:
            self._set_locations()
        elif following:
            self.move_cursor(row=self.row_count - 1, animate=False)
        if before != (self._widest, self._filled, True):
            self._stale = True  # a wider kernel name, a first CI: plan the columns again
            self._relayout()

    def sort_by_cursor_column(self) -> str:
        """Sort by the column under the cursor; the same column again reverses. Returns what it did."""
        column = self._shown[min(max(0, self.cursor_column), len(self._shown) - 1)]
        column_key, label = column.key, column.label
        reverse = bool(self.sorted_by and self.sorted_by[0] == column_key and not self.sorted_by[1])
        self.sorted_by = (column_key, reverse)
        key_of = sort_value(column_key)
        # Stable, also reversed: equal keys keep their arrival order.
        keyed = sorted(((key_of(row), table_row) for row, table_row in self._arrived), key=itemgetter(0), reverse=reverse)
        self._order_keys = [key for key, _ in keyed]
        self._order = [table_row for _, table_row in keyed]
        self._offsets = [(table_row.key, 0) for table_row in self._order]
        self._set_locations()
        return f"{label} {'descending' if reverse else 'ascending'}"

    def _set_locations(self) -> None:
        """Tell the DataTable the new display order (what DataTable.sort does after sorting)."""
        self._row_locations = TwoWayDict({row.key: index for index, row in enumerate(self._order)})
        self._update_count += 1
        self.refresh()

    # Every row is one line high, so the line -> row map is the display order itself. DataTable
    # rebuilds both lists from every row on each change (10,000 new tuples per result, which
    # also drove the cyclic GC into frequent full passes); here they are kept up to date in place.
    @property
    def ordered_rows(self) -> list[Row]:
        return self._order

    @property
    def _y_offsets(self) -> list[tuple[RowKey, int]]:
        return self._offsets

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                     cursor: bool = False, hover: bool = False):
        """DataTable re-renders every visible cell after any row is added or moved (its cell cache
        is keyed on a table-wide update count), and a rich render costs ~0.1 ms a cell. Result
        cells repeat ("keep", "1.04x", "tuner"), so body cells are rendered once per look (text,
        styles, width) and reused; only the row/column mouse metadata differs, added afterwards.
        Same segments, same styles as DataTable's own path, which still draws headers and labels."""
        row_key = self._row_locations.get_key(row_index) if row_index >= 0 and column_index >= 0 else None
        row = self.rows.get(row_key) if row_key is not None else None
        if row is None or row.height != 1 or self.fixed_rows or self.fixed_columns:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        cell = self._get_row_renderables(row_index)[1][column_index]
        if not isinstance(cell, Text) or cell.spans:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        component_style, post_style = self._get_styles_to_render_cell(
            False, False, False, hover, cursor, self.show_cursor, self._show_hover_cursor,
            self.cursor_foreground_priority == "css", self.cursor_background_priority == "css")
        pre_style = base_style + component_style
        key = (cell.plain, cell.style, cell.justify, cell.overflow, cell.no_wrap, cell.end, width, pre_style,
               post_style, self._pseudo_class_state)
        lines = self._cell_lines.get(key)
        if lines is None:
            options = self.app.console_options.update_dimensions(width, 1).update(no_wrap=True)
            lines = self.app.console.render_lines(
                Styled(Padding(cell, (0, self.cell_padding)), pre_style=pre_style, post_style=post_style), options)
            self._cell_lines[key] = lines
        meta = Style.from_meta({"row": row_index, "column": column_index})
        return [list(Segment.apply_style(line, post_style=meta)) for line in lines]

"""results.tsv as a live table: statuses coloured, sortable by any column with one key."""

from __future__ import annotations

from operator import itemgetter

from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._two_way_dict import TwoWayDict
from textual.cache import LRUCache
from textual.renderables.styled import Styled
from textual.widgets import DataTable
from textual.widgets.data_table import Row, RowKey

from autokernel_tui.tui import formatting as fmt

STATUS_STYLE = {
    "keep": "bold #5fd75f", "discard": "#8a8a8a", "fail": "#ff5f5f", "crash": "bold #ff5f5f",
    "timeout": "#ff8700", "rejected": "bold #d75fd7", "vetoed": "#d7af5f", "reverted": "#87afd7",
}
# (column key, label, cell maker, sort key)
_NUM = fmt.to_float


def _num_sort(value):
    return (0, value) if value is not None else (1, 0)


COLUMNS = (
    ("experiment", "exp", lambda r: Text(str(r.get("experiment", "")), justify="right")),
    ("task", "kernel", lambda r: Text(r.get("task", ""))),
    ("status", "status", lambda r: Text(r.get("status", ""), STATUS_STYLE.get(r.get("status", ""), ""))),
    ("speedup_vs_baseline", "vs base", lambda r: Text(fmt.speedup(r.get("speedup_vs_baseline")), justify="right")),
    ("speedup_vs_incumbent", "vs inc", lambda r: Text(fmt.speedup(r.get("speedup_vs_incumbent")), justify="right")),
    ("ci", "CI", lambda r: Text(fmt.interval(r.get("ci_low"), r.get("ci_high")), "dim")),
    ("latency_us", "latency", lambda r: Text(fmt.micros(r.get("latency_us")), justify="right")),
    ("roofline_pct", "roof", lambda r: Text(fmt.percent(r.get("roofline_pct")), justify="right")),
    ("agent", "agent", lambda r: Text(r.get("agent", ""), "dim")),
    ("description", "description", lambda r: Text(r.get("description", ""))),
)
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
    """A DataTable that keeps its own display order.

    A new result goes in at its sorted place (bisect) instead of re-sorting all rows:
    with 10,000 rows a re-sort on every result was most of the cost of an approval.
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._arrived: list[tuple[dict, Row]] = []  # (result row, table row), oldest first
        self._order: list[Row] = []  # display order, top to bottom (Rows: RowKey hashing is slow)
        self._order_keys: list = []  # the sort key of each row in _order (only while sorted)
        self.sorted_by: tuple[str, bool] | None = None
        self._offsets: list[tuple[RowKey, int]] = []  # (row, line in row) per line: rows are one line high
        self._cell_lines: LRUCache = LRUCache(1024)  # see _render_cell

    def on_mount(self) -> None:
        self.cursor_type = "cell"
        self.zebra_stripes = True
        for key, label, _ in COLUMNS:
            self.add_column(label, key=key)

    def add_results(self, rows: list[dict]) -> None:
        """Append rows (the newest last); a sorted table stays sorted, an unsorted one follows the newest."""
        if not rows:
            return
        following = self.row_count == 0 or self.cursor_row >= self.row_count - 1
        key_of = sort_value(self.sorted_by[0]) if self.sorted_by is not None else None
        reverse = bool(self.sorted_by and self.sorted_by[1])
        for row in rows:
            table_row = self.rows[self.add_row(*(make(row) for _, _, make in COLUMNS))]
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

    def sort_by_cursor_column(self) -> str:
        """Sort by the column under the cursor; the same column again reverses. Returns what it did."""
        column_key, label, _ = COLUMNS[max(0, self.cursor_column)]
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

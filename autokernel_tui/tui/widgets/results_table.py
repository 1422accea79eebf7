"""results.tsv as a live table: statuses coloured, sortable by any column with one key."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

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
    ("pct_roofline", "roof", lambda r: Text(fmt.share(r.get("pct_roofline")), justify="right")),
    ("agent", "agent", lambda r: Text(r.get("agent", ""), "dim")),
    ("description", "description", lambda r: Text(r.get("description", ""))),
)
SORT_VALUE = {
    "experiment": lambda r: (_NUM(r.get("experiment")) or 0, str(r.get("timestamp", ""))),
    "ci": lambda r: _num_sort(_NUM(r.get("ci_low"))),
}


class ResultsTable(DataTable):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._row_of_cell: dict[int, dict] = {}
        self.sorted_by: tuple[str, bool] | None = None

    def on_mount(self) -> None:
        self.cursor_type = "cell"
        self.zebra_stripes = True
        for key, label, _ in COLUMNS:
            self.add_column(label, key=key)

    def add_results(self, rows: list[dict]) -> None:
        """Append rows (the newest last); a sorted table stays sorted, an unsorted one follows the newest."""
        following = self.row_count == 0 or self.cursor_row >= self.row_count - 1
        for row in rows:
            cells = [make(row) for _, _, make in COLUMNS]
            # The first cell's identity leads back to the row dict when sorting (DataTable sorts cells).
            self._row_of_cell[id(cells[0])] = row
            self.add_row(*cells)
        if not rows:
            return
        if self.sorted_by is not None:
            self._apply_sort()
        elif following:
            self.move_cursor(row=self.row_count - 1, animate=False)

    def sort_by_cursor_column(self) -> str:
        """Sort by the column under the cursor; the same column again reverses. Returns what it did."""
        column_key, label, _ = COLUMNS[max(0, self.cursor_column)]
        reverse = bool(self.sorted_by and self.sorted_by[0] == column_key and not self.sorted_by[1])
        self.sorted_by = (column_key, reverse)
        self._apply_sort()
        return f"{label} {'descending' if reverse else 'ascending'}"

    def _apply_sort(self) -> None:
        assert self.sorted_by is not None
        column_key, reverse = self.sorted_by
        value = SORT_VALUE.get(column_key)
        if value is None:
            def value(row, _k=column_key):
                number = _NUM(row.get(_k))
                return (0, number, "") if number is not None else (1, 0, str(row.get(_k, "")))
        rows = self._row_of_cell
        self.sort(COLUMNS[0][0], key=lambda cell: value(rows[id(cell)]), reverse=reverse)

"""Knobs: the module-level UPPER_CASE int constants of a kernel.py, read and rewritten.

Reading uses ``ast`` (no import, no execution: the text is untrusted). Rewriting
replaces only the integer literal of each changed constant, so comments, spacing
and every other byte of the file stay as they were and the diff shows exactly
the move.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

KNOB_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
POW2_FLOOR, POW2_CEIL = 16, 1 << 17


@dataclass(frozen=True)
class Knob:
    name: str
    value: int
    line: int  # 1-based line of the literal
    col: int  # character span of the literal on that line
    end_col: int


def _int_literal(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def parse_knobs(source: str) -> dict[str, Knob]:
    """Module-level ``NAME = <int>`` (or ``NAME: int = <int>``) lines, in file order."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    lines = source.splitlines(keepends=True)
    knobs: dict[str, Knob] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name) or not KNOB_NAME.match(target.id):
            continue
        number = _int_literal(value)
        if number is None or value.lineno != value.end_lineno:
            continue
        # ast columns are UTF-8 byte offsets; convert to character offsets on that line.
        raw = lines[value.lineno - 1].encode("utf-8")
        col = len(raw[: value.col_offset].decode("utf-8"))
        end = len(raw[: value.end_col_offset].decode("utf-8"))
        knobs[target.id] = Knob(target.id, number, value.lineno, col, end)  # a later assignment wins, like Python
    return knobs


def rewrite(source: str, changes: dict[str, int]) -> str:
    """``source`` with each named constant set to its new value; every other byte unchanged."""
    knobs = parse_knobs(source)
    missing = sorted(set(changes) - set(knobs))
    if missing:
        raise KeyError(f"kernel.py has no int constant named {', '.join(missing)}")
    lines = source.splitlines(keepends=True)
    for name, value in changes.items():
        k = knobs[name]
        line = lines[k.line - 1]
        lines[k.line - 1] = line[: k.col] + str(int(value)) + line[k.end_col:]
    return "".join(lines)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def default_values(name: str, current: int) -> tuple[int, ...]:
    """A search range for a knob the task's [knobs] table does not list, judged by its name.

    Unknown names stay fixed: guessing the range of an arbitrary constant could
    change what the kernel computes (a knob listed in task.toml is the way to
    tune it).
    """
    upper = name.upper()
    if "WARPS" in upper:
        return (1, 2, 4, 8, 16, 32)
    if "STAGES" in upper:
        return (1, 2, 3, 4, 5)
    if "GROUP" in upper:
        return (1, 2, 4, 8, 16)
    if ("BLOCK" in upper or "TILE" in upper or "ELEMS" in upper) and _pow2(current):
        lo, hi = max(POW2_FLOOR, current // 8), min(POW2_CEIL, current * 8)
        return tuple(1 << i for i in range(lo.bit_length() - 1, hi.bit_length()) if lo <= 1 << i <= hi)
    return (current,)


def search_space(source: str, declared: dict[str, tuple] | None) -> dict[str, tuple[int, ...]]:
    """Sorted candidate values per tunable knob of ``source``: task.toml's list (plus the current
    value), else a name-based default. Knobs with a single candidate are left out."""
    declared = declared or {}
    space: dict[str, tuple[int, ...]] = {}
    for name, knob in parse_knobs(source).items():
        if name in declared:
            values = {v for v in declared[name] if type(v) is int}
        else:
            values = set(default_values(name, knob.value))
        values.add(knob.value)
        if len(values) > 1:
            space[name] = tuple(sorted(values))
    return space

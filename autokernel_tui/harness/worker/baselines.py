"""Baseline timings (eager reference and torch.compile of it), cached per
GPU x torch version x task hash x shape x dtype: in the warm worker's memory and
on disk under ~/.cache/autokernel-tui/baselines/, so an evaluation never re-times
or recompiles them.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from autokernel_tui.harness.roofline import _safe, cache_dir


class BaselineCache:
    def __init__(self, device_name: str, torch_version: str, persist: bool = True) -> None:
        self.path: Path = cache_dir() / "baselines" / f"{_safe(device_name)}--torch{_safe(torch_version)}.json"
        self.persist = persist
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, Any]] = {}
        if persist:
            try:
                self._data = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                self._data = {}

    @staticmethod
    def key(task_hash: str, shape_label: str, dtype: str) -> str:
        return f"{task_hash[:16]}|{shape_label}|{dtype}"

    def get(self, key: str) -> dict[str, Any] | None:
        return self._data.get(key)

    def put(self, key: str, value: dict[str, Any]) -> None:
        with self._lock:
            self._data[key] = value
            if self.persist:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(json.dumps(self._data, indent=0), encoding="utf-8")
                tmp.replace(self.path)

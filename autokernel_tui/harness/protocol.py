"""Framed JSON messages over a private pipe between the runner and the worker.

The worker's stdout and stderr belong to candidate code (it may print anything),
so requests and replies travel on their own file descriptors: a 4-byte big-endian
length, then UTF-8 JSON.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

_HEADER = struct.Struct(">I")
MAX_MESSAGE = 256 << 20  # a reply from a contestant is never trusted to size the judge's memory


def send(fd: int, message: dict[str, Any]) -> None:
    body = json.dumps(message, allow_nan=True).encode("utf-8")
    data = _HEADER.pack(len(body)) + body
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            return None  # the other side closed the pipe (exited or crashed)
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv(fd: int) -> dict[str, Any] | None:
    """The next message, or None when the pipe was closed. Raises ValueError on a malformed frame."""
    header = _read_exact(fd, _HEADER.size)
    if header is None:
        return None
    size = _HEADER.unpack(header)[0]
    if size > MAX_MESSAGE:
        raise ValueError(f"message of {size} bytes, over the {MAX_MESSAGE} byte limit")
    body = _read_exact(fd, size)
    if body is None:
        return None
    try:
        return json.loads(body.decode("utf-8"))
    except RecursionError:
        raise ValueError("message nested too deeply") from None

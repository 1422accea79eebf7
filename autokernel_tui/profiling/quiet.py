"""Keep the profiler's native chatter off the user's terminal, and everything else on it.

torch's profiler (Kineto, and CUPTI in a CUDA build) writes to file descriptor 2 from C++, past
Python's ``sys.stderr``: ``gpuGetDeviceCount failed with code 35`` from a CUDA build on a machine
without a GPU, ``STAGE:... Completed Stage: Warm Up``, ``USDT:... profiler_start`` /
``profiler_stop`` on every capture. None of it is for the user. ``filtered_stderr()`` points fd 2
at a pipe for the duration and a thread copies every line to the real stderr as it comes, except
the lines ``NOISE`` knows. Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from typing import Iterator, TextIO

NOISE = re.compile(
    r"gpuGetDeviceCount failed with code \d+"                               # CUDA build, no GPU (CUPTI/Kineto)
    r"|^\S*:?\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \w+\.cpp:\d+\] "
    r"(profiler_start|profiler_stop|Completed Stage: .*)\s*$"               # Kineto's STAGE/USDT markers
)


def is_noise(line: str) -> bool:
    return bool(NOISE.search(line))


@contextlib.contextmanager
def filtered_stderr(noise: re.Pattern[str] = NOISE) -> Iterator[None]:
    """Within the block, lines written to fd 2 (by Python or native code) reach the real stderr
    unless they match ``noise``. Without a usable fd 2 it does nothing."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    read_fd, write_fd = os.pipe()
    os.dup2(write_fd, 2)
    os.close(write_fd)

    def pump() -> None:
        with os.fdopen(read_fd, "rb") as pipe:
            for raw in pipe:
                if noise.search(raw.decode("utf-8", "replace")):
                    continue
                try:
                    os.write(saved, raw)
                except OSError:  # the terminal went away: keep draining so writers never block
                    pass

    thread = threading.Thread(target=pump, name="stderr-filter", daemon=True)
    thread.start()
    try:
        yield
    finally:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(saved, 2)  # closes the pipe's last write end: the pump sees its end and finishes
        thread.join(timeout=5)
        os.close(saved)


@contextlib.contextmanager
def terminal_stderr() -> Iterator[TextIO]:
    """A text stream on the real stderr as it is now (a duplicate of fd 2), for what must reach the
    user unfiltered and unbuffered while ``filtered_stderr`` holds fd 2: a progress bar redraws its
    line with carriage returns, which a line-by-line filter would hold back until the next newline.
    When ``sys.stderr`` is not fd 2 (a test's capture, a redirect in Python) its writes never pass
    the filter anyway: ``sys.stderr`` itself."""
    try:
        if sys.stderr.fileno() != 2:
            raise ValueError("sys.stderr is not fd 2")
        sys.stderr.flush()
        stream = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is both OSError and ValueError
        yield sys.stderr
        return
    try:
        yield stream
    finally:
        try:
            stream.close()
        except OSError:
            pass

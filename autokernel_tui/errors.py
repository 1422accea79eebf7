"""Errors a user can act on. Each carries a one-line message meant for a human."""


class AutokernelError(Exception):
    """Base for errors that the CLI prints as one line (no traceback)."""


class TaskFormatError(AutokernelError):
    """A task folder is missing a file or its task.toml is malformed."""


class WorkspaceError(AutokernelError):
    """The workspace is not usable as it is (not a repo, dirty task folder...)."""


class ConfigError(AutokernelError):
    """The settings file, an environment variable or a flag is malformed."""

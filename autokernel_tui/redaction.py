"""Secret values never reach disk, a log or the screen (stdlib only).

The last line behind the sandbox (which never gives candidate code a secret in
the first place): every text the harness or an agent records passes through
``redact``, which replaces the value of every secret-looking environment
variable (at least 8 characters long) with ``[redacted NAME]``.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE", re.IGNORECASE)
MIN_SECRET_LEN = 8


def secret_values(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """value -> variable name, for every secret-looking variable set in ``env``."""
    env = os.environ if env is None else env
    found = {}
    for name, value in env.items():
        if SECRET_NAME.search(name) and value and len(value) >= MIN_SECRET_LEN:
            found[value] = name
    return found


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """``text`` with every secret value replaced by the name of its variable."""
    if not text:
        return text
    for value, name in sorted(secret_values(env).items(), key=lambda kv: -len(kv[0])):
        if value in text:
            text = text.replace(value, f"[redacted {name}]")
    return text


def redact_obj(obj: Any, env: Mapping[str, str] | None = None) -> Any:
    """``redact`` applied to every string inside nested dicts, lists and tuples."""
    values = secret_values(env)
    if not values:
        return obj
    return _walk(obj, env)


def _walk(obj: Any, env: Mapping[str, str] | None) -> Any:
    if isinstance(obj, str):
        return redact(obj, env)
    if isinstance(obj, dict):
        return {k: _walk(v, env) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_walk(v, env) for v in obj)
    return obj


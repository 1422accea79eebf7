"""One settings object: defaults < TOML file(s) < environment < command-line flags.

Files, later ones winning: ``~/.config/autokernel-tui/config.toml`` then
``<workspace>/autokernel.toml``. Environment: ``AUTOKERNEL_<SECTION>_<KEY>``
(e.g. ``AUTOKERNEL_RUN_POLICY=auto``). API keys are never settings: they are
read from the environment at the moment of use and never stored or printed.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from autokernel_tui.errors import ConfigError

CONFIG_FILE = "autokernel.toml"
POLICIES = ("manual", "auto", "threshold")
AGENTS = ("auto", "claude", "openai", "tuner")


@dataclass
class RunSettings:
    policy: str = "manual"  # manual | auto | threshold
    threshold: float = 1.05  # threshold policy: auto-keep at or above this lower CI bound
    approval_timeout_s: float = 900.0  # unattended question answered by timeout_action
    timeout_action: str = "discard"  # keep | discard
    max_experiments: int = 0  # 0 = unlimited
    max_wall_s: float = 0.0
    max_cost_usd: float = 0.0
    plateau_experiments: int = 8  # move to the next kernel after this many without improvement
    kernel_time_budget_s: float = 0.0  # per kernel, its own clock; 0 = none
    roofline_target_pct: float = 90.0  # move on when a kernel reaches this percent of roofline (0 = never)
    agent_retry_s: float = 600.0  # after an agent outage, try again by itself after this long; 0 = wait for a human


@dataclass
class AgentSettings:
    kind: str = "auto"  # auto: claude if ANTHROPIC_API_KEY, else openai if base_url set, else tuner
    model: str = "claude-sonnet-4-5"
    max_tokens: int = 16000
    thinking_budget: int = 8000
    max_retries: int = 6
    openai_base_url: str = ""
    openai_model: str = ""
    seed: int = 0  # offline tuner randomness
    tuner_budget: int = 0  # experiments the tuner plans for per kernel (0 = open-ended)
    anthropic_base_url: str = ""  # override the Messages API endpoint (proxies, tests)
    request_timeout_s: float = 600.0  # one streamed request, start to finish
    retry_base_s: float = 2.0  # first backoff on 429/529/5xx/network errors, doubled per retry
    retry_max_s: float = 60.0  # longest single backoff
    memory_chars: int = 6000  # bound on the history digest sent to the model each experiment
    price_input_usd_per_mtok: float = -1.0  # < 0: the built-in price table for the model
    price_output_usd_per_mtok: float = -1.0


@dataclass
class HarnessSettings:
    timeout_s: float = 180.0  # hard limit per evaluation, the worker is killed after it
    keep_margin: float = 1.01  # "faster" = lower CI bound of the speedup clears this
    confirm_keeps: bool = True  # a "faster" must hold in a second comparison, roles swapped
    quick: bool = False


@dataclass
class Settings:
    run: RunSettings = field(default_factory=RunSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)
    harness: HarnessSettings = field(default_factory=HarnessSettings)
    keys: dict[str, str] = field(default_factory=dict)  # action -> key, overrides the app's defaults

    def validate(self) -> "Settings":
        if self.run.policy not in POLICIES:
            raise ConfigError(f"run.policy must be one of {', '.join(POLICIES)}, not {self.run.policy!r}")
        if self.run.timeout_action not in ("keep", "discard"):
            raise ConfigError(f"run.timeout_action must be keep or discard, not {self.run.timeout_action!r}")
        if self.agent.kind not in AGENTS:
            raise ConfigError(f"agent.kind must be one of {', '.join(AGENTS)}, not {self.agent.kind!r}")
        target = self.run.roofline_target_pct
        if not 0.0 <= target <= 100.0:
            raise ConfigError(f"run.roofline_target_pct is a percent of roofline, 0-100 (0 = never stop on it), "
                              f"not {target!r}")
        if 0.0 < target <= 1.0:
            raise ConfigError(f"run.roofline_target_pct = {target!r} looks like a fraction; it is a percent: "
                              f"write {100 * target:g} for {100 * target:g}% of roofline")
        return self


def _coerce(value: Any, target_type: Any, where: str) -> Any:
    kind = target_type if isinstance(target_type, type) else type(target_type)
    if kind is bool:
        if isinstance(value, str):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return bool(value)
    try:
        if kind is float and not isinstance(value, bool):
            return float(value)
        if kind is int and not isinstance(value, bool):
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        if kind is str:
            return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected {kind.__name__}, got {value!r}") from None
    raise ConfigError(f"{where}: unsupported value {value!r}")


def _roofline_target_frac(value: Any, where: str) -> float:
    """The old run.roofline_target, a fraction of roofline, as run.roofline_target_pct (percent)."""
    frac = _coerce(value, float, where)
    if not 0.0 <= frac <= 1.0:
        raise ConfigError(f"{where} was a fraction of roofline (0-1), not {frac!r}; "
                          f"it is now run.roofline_target_pct, in percent (e.g. 90)")
    return 100.0 * frac


# Settings renamed because their unit changed: (section, old key) -> (new key, old value -> new value).
RENAMED_SETTINGS = {("run", "roofline_target"): ("roofline_target_pct", _roofline_target_frac)}
_announced: set[str] = set()


def _deprecated(message: str) -> None:
    """Say once per process, on stderr, that an old setting was read (and what to write instead)."""
    if message not in _announced:
        _announced.add(message)
        print(f"autokernel-tui: {message}", file=sys.stderr)


def _apply(settings: Settings, data: dict[str, Any], source: str) -> None:
    for section, values in data.items():
        if section == "keys":
            if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
                raise ConfigError(f"{source}: [keys] maps action names to key names")
            settings.keys.update(values)
            continue
        target = getattr(settings, section, None)
        if not dataclasses.is_dataclass(target) or not isinstance(values, dict):
            raise ConfigError(f"{source}: unknown section [{section}]")
        names = {f.name: f for f in dataclasses.fields(target)}
        for key, value in values.items():
            if (section, key) in RENAMED_SETTINGS and key not in names:
                new_key, convert = RENAMED_SETTINGS[(section, key)]
                new_value = convert(value, f"{source}: {section}.{key}")
                _deprecated(f"{source}: {section}.{key} = {value} is deprecated (it was a fraction); read as "
                            f"{section}.{new_key} = {new_value:g} (percent). Write that instead.")
                setattr(target, new_key, new_value)
                continue
            if key not in names:
                raise ConfigError(f"{source}: unknown setting {section}.{key}")
            setattr(target, key, _coerce(value, type(getattr(target, key)), f"{source}: {section}.{key}"))


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: malformed TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None


def user_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "autokernel-tui" / "config.toml"


def load_settings(workspace: str | Path | None = None, overrides: dict[str, dict[str, Any]] | None = None,
                  env: dict[str, str] | None = None) -> Settings:
    """Build the settings for a workspace. ``overrides`` are the flags: {section: {key: value}}."""
    settings = Settings()
    paths = [user_config_path()]
    if workspace is not None:
        paths.append(Path(workspace) / CONFIG_FILE)
    for path in paths:
        if path.is_file():
            _apply(settings, _read_toml(path), str(path))
    env = os.environ if env is None else env
    from_env: dict[str, dict[str, Any]] = {}
    for section in ("run", "agent", "harness"):
        for f in dataclasses.fields(getattr(settings, section)):
            value = env.get(f"AUTOKERNEL_{section.upper()}_{f.name.upper()}")
            if value is not None:
                from_env.setdefault(section, {})[f.name] = value
    for (section, old_key), (new_key, _) in RENAMED_SETTINGS.items():
        value = env.get(f"AUTOKERNEL_{section.upper()}_{old_key.upper()}")
        if value is not None and f"AUTOKERNEL_{section.upper()}_{new_key.upper()}" not in env:
            from_env.setdefault(section, {})[old_key] = value
    _apply(settings, from_env, "environment")
    if overrides:
        clean = {s: {k: v for k, v in vals.items() if v is not None} for s, vals in overrides.items()}
        _apply(settings, clean, "command line")
    return settings.validate()

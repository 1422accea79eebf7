"""One settings object: defaults < TOML file(s) < environment < command-line flags.

Files, later ones winning: ``~/.config/autokernel-tui/config.toml`` then
``<workspace>/autokernel.toml``. Environment: ``AUTOKERNEL_<SECTION>_<KEY>``
(e.g. ``AUTOKERNEL_RUN_POLICY=auto``). API keys are never settings: they are
read from the environment at the moment of use and never stored or printed.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

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
    # Agent proposals in flight at once (issue 22). 0 = auto: 1 where the timings come from the Triton
    # interpreter on the CPU (an evaluation there takes as long as a proposal and the two cores are
    # shared, so more proposals only queue), 4 on a GPU (a proposal takes tens of seconds, a warm
    # evaluation with its confirming comparison 2-6 s: 4 keep the GPU's queue fed without letting
    # proposals go stale against an incumbent that moves under them). See engine.parallel.
    parallel: int = 0
    # Where proposals are judged (issue 22): one warm harness per GPU of this host ("all", or indices
    # like "0,2,3"); on a host without GPUs, harness.cpu_workers interpreter harnesses.
    gpus: str = "all"
    backend: str = "local"  # local | ray (one harness actor per GPU of a Ray cluster: pip install '.[ray]')
    ray_address: str = ""  # ray.init(address=...): "" starts or joins a local cluster, "auto" finds one


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
    # What confines candidate code: auto (bwrap where it works, Landlock inside it or alone), bwrap
    # (refuse to run without it), landlock (Landlock only), off (nothing: debugging, said in every report).
    sandbox: str = "auto"
    # What a keep decision compares (harness/report.py MEASURES): "device" by default, because the
    # mode `verify` recommends shipping is compiled or CUDA-graph captured, where launches are replayed
    # and the model pays the device time; "as_called" when the model will run eagerly and a kernel's
    # host launch cost is part of what it pays (small shapes).
    measure: str = "device"
    # Interpreter harnesses judging at once on a host without GPUs (never more than run.parallel):
    # each is CPU-bound, so more than the cores only queue.
    cpu_workers: int = 2


@dataclass(frozen=True)
class Rule:
    """What one setting may hold: its kind, its range (inclusive unless ``above``: strictly
    greater than ``lo``), or its choices, and why, for the error message."""

    kind: type
    lo: float | None = None
    hi: float | None = None
    above: bool = False
    choices: tuple[str, ...] = ()
    url: bool = False
    nonempty: bool = False
    pattern: str = ""  # a string setting's shape (a regular expression the whole value matches)
    shape: str = ""  # ... said in words
    why: str = ""

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind is bool:
            return "true or false"
        if self.kind is str:
            if self.pattern:
                return self.shape
            return ("empty or an http(s):// URL" if self.url else "a non-empty string" if self.nonempty
                    else "a string")
        what = "a whole number" if self.kind is int else "a finite number"
        if self.lo is not None and self.hi is not None:
            return f"{what} {'above' if self.above else 'from'} {self.lo:g} {'and at most' if self.above else 'to'} " \
                   f"{self.hi:g}"
        if self.lo is not None:
            return f"{what} {'above' if self.above else 'of at least'} {self.lo:g}"
        return what

    def check(self, value: Any) -> bool:
        if self.choices:
            return value in self.choices
        if self.kind is str:
            if self.pattern:
                return re.fullmatch(self.pattern, value) is not None
            if self.url:
                return value == "" or value.startswith(("http://", "https://"))
            return bool(value) or not self.nonempty
        if self.kind in (int, float):
            if not math.isfinite(value):
                return False
            if self.lo is not None and (value <= self.lo if self.above else value < self.lo):
                return False
            if self.hi is not None and value > self.hi:
                return False
        return True


DAY = 86400.0
WEEK = 7 * DAY
# Every setting, with its allowed range. A value outside it is refused wherever it comes from
# (a TOML file, AUTOKERNEL_<SECTION>_<KEY>, a flag), with one line naming the setting, its source
# and the range. tests/test_config.py walks this table.
RULES: dict[str, Rule] = {
    "run.policy": Rule(str, choices=POLICIES),
    "run.threshold": Rule(float, 1.0, 1000.0, why="the lower CI bound a candidate's speedup must reach to be kept "
                                                  "without asking; below 1 a slower candidate would be kept"),
    "run.approval_timeout_s": Rule(float, 0.0, 30 * DAY, above=True, why="seconds a question waits for a human"),
    "run.timeout_action": Rule(str, choices=("keep", "discard")),
    "run.max_experiments": Rule(int, 0, None, why="0 = no limit"),
    "run.max_wall_s": Rule(float, 0.0, None, why="seconds; 0 = no limit"),
    "run.max_cost_usd": Rule(float, 0.0, None, why="dollars; 0 = no limit"),
    "run.plateau_experiments": Rule(int, 0, None, why="0 = never move on for lack of improvement"),
    "run.kernel_time_budget_s": Rule(float, 0.0, None, why="seconds per kernel; 0 = no limit"),
    "run.roofline_target_pct": Rule(float, 0.0, 100.0, why="a percent of roofline; 0 = no target"),
    "run.parallel": Rule(int, 0, 64, why="agent proposals in flight at once; 0 = auto (1 on the CPU, 4 on a GPU)"),
    "run.gpus": Rule(str, pattern=r"all|\d+(,\d+)*", shape="all or GPU indices like 0,2,3",
                     why="one warm harness judges on each"),
    "run.backend": Rule(str, choices=("local", "ray")),
    "run.ray_address": Rule(str, why="ray.init(address=...); empty: a local cluster"),
    "run.agent_retry_s": Rule(float, 0.0, WEEK, why="seconds; 0 = wait for a human"),
    "agent.kind": Rule(str, choices=AGENTS),
    "agent.model": Rule(str, nonempty=True),
    "agent.max_tokens": Rule(int, 1, 1_000_000),
    "agent.thinking_budget": Rule(int, 0, 1_000_000),
    "agent.max_retries": Rule(int, 0, 100),
    "agent.openai_base_url": Rule(str, url=True),
    "agent.openai_model": Rule(str),
    "agent.seed": Rule(int, 0, 2**63 - 1),
    "agent.tuner_budget": Rule(int, 0, None, why="0 = open-ended"),
    "agent.anthropic_base_url": Rule(str, url=True),
    "agent.request_timeout_s": Rule(float, 0.0, DAY, above=True),
    "agent.retry_base_s": Rule(float, 0.0, DAY),
    "agent.retry_max_s": Rule(float, 0.0, DAY),
    "agent.memory_chars": Rule(int, 0, 10_000_000),
    "agent.price_input_usd_per_mtok": Rule(float, -1.0, 10_000.0, why="-1 = the built-in price table"),
    "agent.price_output_usd_per_mtok": Rule(float, -1.0, 10_000.0, why="-1 = the built-in price table"),
    "harness.timeout_s": Rule(float, 0.0, DAY, above=True, why="seconds per evaluation"),
    "harness.keep_margin": Rule(float, 1.0, 10.0, why="a candidate counts as faster when the lower CI bound of its "
                                                      "speedup clears this; below 1 a slower one would"),
    "harness.confirm_keeps": Rule(bool),
    "harness.quick": Rule(bool),
    "harness.sandbox": Rule(str, choices=("auto", "bwrap", "landlock", "off")),
    "harness.cpu_workers": Rule(int, 1, 64, why="interpreter harnesses judging at once without a GPU"),
    "harness.measure": Rule(str, choices=("device", "as_called"), why="what a keep decision compares: the "
                            "kernel's device time, or its time as an eager model calls it (host launch cost included)"),
}
# How `run` spells the settings it takes as flags (for messages only).
FLAGS = {"run.policy": "--policy", "run.max_experiments": "--max-experiments", "run.max_wall_s": "--max-hours",
         "run.max_cost_usd": "--max-cost", "run.parallel": "--parallel", "run.gpus": "--gpus", "run.backend": "--backend",
         "agent.kind": "--agent"}


@dataclass
class Settings:
    run: RunSettings = field(default_factory=RunSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)
    harness: HarnessSettings = field(default_factory=HarnessSettings)
    keys: dict[str, str] = field(default_factory=dict)  # action -> key, overrides the app's defaults

    def validate(self, source: str = "settings") -> "Settings":
        """Every value within its range (``RULES``); a ConfigError names the first that is not."""
        for name, rule in RULES.items():
            section, key = name.split(".")
            value = getattr(getattr(self, section), key)
            _check(name, _coerce(value, rule, f"{source}: {name}"), rule, source)
        target = self.run.roofline_target_pct
        if 0.0 < target <= 1.0:
            raise ConfigError(f"{source}: run.roofline_target_pct = {target!r} looks like a fraction; it is a "
                              f"percent: write {100 * target:g} for {100 * target:g}% of roofline")
        return self


def _check(name: str, value: Any, rule: Rule, source: str) -> Any:
    if not rule.check(value):
        why = f" ({rule.why})" if rule.why else ""
        raise ConfigError(f"{source}: {name} must be {rule.describe()}{why}; got {_show(value)}")
    return value


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _coerce(value: Any, rule: Rule, where: str) -> Any:
    """``value`` as the setting's type. Text (environment variables) is parsed; a typed value
    (TOML, flags) must already be of the right kind: ``confirm_keeps = 1`` or ``model = 5`` is refused."""
    kind = rule.kind
    expected = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}[kind]
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            if value.strip().lower() in ("1", "true", "yes", "on"):
                return True
            if value.strip().lower() in ("0", "false", "no", "off"):
                return False
        raise ConfigError(f"{where}: expected {expected}, got {_show(value)}")
    if kind is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected {expected}, got {_show(value)}")
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected {expected}, got {_show(value)}")
    try:
        if isinstance(value, str):
            value = value.strip()
            if kind is int:
                return int(value, 10)
            return float(value)
        if isinstance(value, (int, float)):
            if kind is int:
                if isinstance(value, float) and not value.is_integer():
                    raise ValueError
                return int(value)
            return float(value)
    except (ValueError, OverflowError):
        pass
    raise ConfigError(f"{where}: expected {expected}, got {_show(value)}")


def _roofline_target_frac(value: Any, where: str) -> float:
    """The old run.roofline_target, a fraction of roofline, as run.roofline_target_pct (percent)."""
    frac = _coerce(value, Rule(float), where)
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
        for key, value in values.items():
            name = f"{section}.{key}"
            where = source(name) if callable(source) else source
            if (section, key) in RENAMED_SETTINGS:
                new_key, convert = RENAMED_SETTINGS[(section, key)]
                new_value = convert(value, f"{where}: {name}")
                _deprecated(f"{where}: {name} = {value} is deprecated (it was a fraction); read as "
                            f"{section}.{new_key} = {new_value:g} (percent). Write that instead.")
                setattr(target, new_key, new_value)
                continue
            rule = RULES.get(name)
            if rule is None or not hasattr(target, key):
                raise ConfigError(f"{where}: unknown setting {name}")
            setattr(target, key, _check(name, _coerce(value, rule, f"{where}: {name}"), rule, where))


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
    _apply(settings, from_env, lambda name: "environment variable AUTOKERNEL_" + name.upper().replace(".", "_"))
    if overrides:
        clean = {s: {k: v for k, v in vals.items() if v is not None} for s, vals in overrides.items()}
        _apply(settings, clean, lambda name: f"command line {FLAGS[name]}" if name in FLAGS else "command line")
    return settings.validate()

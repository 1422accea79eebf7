"""Every setting is checked against its allowed range and type, from a TOML file, from
AUTOKERNEL_<SECTION>_<KEY> and from `run`'s flags alike: one line naming the setting, where
the value came from and what is allowed. Table-driven from config.RULES, plus the values a
hostile user tried (keep_margin=0.5 kept a 0.754x slower candidate as faster)."""

import dataclasses
import math
import subprocess
import sys

import pytest

from autokernel_tui.config import FLAGS, RULES, Settings, load_settings
from autokernel_tui.errors import ConfigError


def bad_values(rule):
    """Text values outside the rule (as an environment variable would give them)."""
    if rule.choices:
        return ["bogus", ""]
    if rule.kind is bool:
        return ["maybe", "2"]
    if rule.kind is str and rule.pattern:
        return ["first", "0;1", ""]
    if rule.kind is str:
        return ["ftp://example.com", "localhost:8000"] if rule.url else [""] if rule.nonempty else []
    out = ["abc", "nan", "inf", "-inf", "1e999"]
    if rule.lo is not None:
        out.append(str(rule.lo) if rule.above else str(rule.lo - 1))
    if rule.hi is not None:
        out.append(str(rule.hi + 1 if rule.kind is int else rule.hi * 1.5 + 1))
    if rule.kind is int:
        out.append("1.5")
    return out


def good_values(rule):
    if rule.choices:
        return list(rule.choices)
    if rule.kind is bool:
        return ["true", "off"]
    if rule.kind is str and rule.pattern:
        return ["all", "0", "0,2,3"]
    if rule.kind is str:
        return ["http://127.0.0.1:8000/v1", ""] if rule.url else ["x"]
    vals = []
    if rule.lo is not None and not rule.above:
        vals.append(rule.lo)
    if rule.hi is not None:
        vals.append(rule.hi)
    return [str(int(v) if rule.kind is int else v) for v in vals] or ["1"]


CASES = [(name, value) for name, rule in RULES.items() for value in bad_values(rule)]


def env_name(name):
    return "AUTOKERNEL_" + name.upper().replace(".", "_")


def test_every_setting_has_a_rule():
    s = Settings()
    fields = {f"{sec}.{f.name}" for sec in ("run", "agent", "harness") for f in dataclasses.fields(getattr(s, sec))}
    assert fields == set(RULES)
    s.validate()  # the defaults are within range


@pytest.mark.parametrize("name,value", CASES, ids=[f"{n}={v!r}" for n, v in CASES])
def test_bad_value_from_the_environment(name, value):
    with pytest.raises(ConfigError) as info:
        load_settings(None, env={env_name(name): value})
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"environment variable {env_name(name)}: {name}")
    assert "must be" in msg or "expected" in msg


@pytest.mark.parametrize("name", list(RULES))
def test_values_within_range_are_accepted(name):
    for value in good_values(RULES[name]):
        settings = load_settings(None, env={env_name(name): value})
        section, key = name.split(".")
        assert getattr(getattr(settings, section), key) is not None


def toml_literal(rule, text):
    if rule.kind is str or text in ("abc", "1e999") or rule.choices:
        return '"' + text + '"' if text != "1e999" else "1e999"
    if rule.kind is bool:
        return '"' + text + '"'
    return text


@pytest.mark.parametrize("name,value", CASES, ids=[f"{n}={v!r}" for n, v in CASES])
def test_bad_value_from_the_workspace_toml(tmp_path, name, value, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    section, key = name.split(".")
    path = tmp_path / "autokernel.toml"
    path.write_text(f"[{section}]\n{key} = {toml_literal(RULES[name], value)}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(tmp_path, env={})
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"{path}: {name}") and ("must be" in msg or "expected" in msg), msg


@pytest.mark.parametrize("toml,expect", [
    ("[harness]\nconfirm_keeps = 1\n", "harness.confirm_keeps: expected true or false, got 1"),
    ("[agent]\nmodel = 5\n", "agent.model: expected a string, got 5"),
    ("[run]\nmax_experiments = true\n", "run.max_experiments: expected a whole number, got True"),
    ("[run]\nthreshold = nan\n", "run.threshold must be a finite number from 1 to 1000"),
    ("[run]\nmax_wall_s = -inf\n", "run.max_wall_s must be a finite number of at least 0"),
    ("[run]\nmax_experiments = 2.5\n", "run.max_experiments: expected a whole number, got 2.5"),
])
def test_toml_values_must_have_the_right_type(tmp_path, monkeypatch, toml, expect):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    (tmp_path / "autokernel.toml").write_text(toml)
    with pytest.raises(ConfigError, match=expect.replace("(", r"\(").replace(")", r"\)")):
        load_settings(tmp_path, env={})


@pytest.mark.parametrize("name,value,expect", [
    ("harness.keep_margin", "0.5", "harness.keep_margin must be a finite number from 1 to 10"),
    ("harness.timeout_s", "-1", "harness.timeout_s must be a finite number above 0"),
    ("run.max_experiments", "-1", "run.max_experiments must be a whole number of at least 0"),
    ("run.threshold", "nan", "run.threshold must be a finite number from 1 to 1000"),
])
def test_what_a_hostile_user_tried_is_refused(name, value, expect):
    with pytest.raises(ConfigError) as info:
        load_settings(None, env={env_name(name): value})
    msg = str(info.value)
    assert msg.startswith(f"environment variable {env_name(name)}: ") and expect in msg and "; got " in msg


def test_settings_built_in_code_are_checked_too():
    s = Settings()
    s.harness.keep_margin = 0.5
    with pytest.raises(ConfigError, match="harness.keep_margin"):
        s.validate()
    s = Settings()
    s.run.threshold = math.nan
    with pytest.raises(ConfigError, match="run.threshold"):
        s.validate()


FLAG_CASES = [("--max-experiments", "-1", "run.max_experiments"), ("--max-hours", "-2", "run.max_wall_s"),
              ("--max-hours", "nan", "run.max_wall_s"), ("--max-cost", "inf", "run.max_cost_usd"),
              ("--max-cost", "-0.5", "run.max_cost_usd")]


@pytest.mark.parametrize("flag,value,name", FLAG_CASES)
def test_bad_flags_through_the_cli(tmp_path, flag, value, name):
    assert FLAGS[name] == flag
    proc = subprocess.run([sys.executable, "-m", "autokernel_tui", "run", "--headless", "-C", str(tmp_path),
                           flag, value], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"autokernel-tui: error: command line {flag}: {name} must be"), lines[0]

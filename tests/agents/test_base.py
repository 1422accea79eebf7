import pytest

from autokernel_tui.agents.base import (AgentEvent, InvalidSource, MAX_SOURCE_BYTES, NothingToPropose, make_agent,
                                        parse_submission, resolve_kind, validate_source)
from autokernel_tui.config import AgentSettings
from autokernel_tui.errors import ConfigError

GOOD = "import triton\n\ndef kernel_fn(x):\n    return x\n"


def test_validate_accepts_a_kernel_and_adds_the_final_newline():
    assert validate_source(GOOD.rstrip("\n")) == GOOD


@pytest.mark.parametrize("source, message", [
    ("", "non-empty"),
    (None, "non-empty"),
    ("def kernel_fn(:\n", "does not parse: line 1"),
    ("def other(x):\n    return x\n", "must define kernel_fn"),
    ("def f():\n    def kernel_fn(x): pass\n", "must define kernel_fn"),
    ("kernel_fn = 1\n" + "#" * MAX_SOURCE_BYTES, "limit is 65536 bytes"),
    ("import ctypes\n\ndef kernel_fn(x):\n    return x\n", "harness would reject it: import of 'ctypes'"),
    ("import torch\n\ndef kernel_fn(x):\n    return torch.nn.functional.rms_norm(x, x.shape[-1:])\n",
     "harness would reject it"),
])
def test_validate_rejects_with_a_fixable_message(source, message):
    with pytest.raises(InvalidSource, match=message):
        validate_source(source)


def test_parse_submission_needs_all_three_fields_and_keeps_one_line():
    src, desc, hyp = parse_submission({"source": GOOD, "description": "  Fuse\n the rest", "hypothesis": "h"})
    assert (src, desc, hyp) == (GOOD, "Fuse", "h")
    with pytest.raises(InvalidSource, match="description"):
        parse_submission({"source": GOOD, "hypothesis": "h"})
    with pytest.raises(InvalidSource, match="hypothesis"):
        parse_submission({"source": GOOD, "description": "d"})
    with pytest.raises(InvalidSource, match="object"):
        parse_submission(["not", "a", "dict"])


def test_event_kinds_are_checked():
    with pytest.raises(ValueError):
        AgentEvent("shout", "x")


@pytest.mark.parametrize("env, settings, expected", [
    ({}, {}, "tuner"),
    ({"ANTHROPIC_API_KEY": "k"}, {}, "claude"),
    ({"AUTOKERNEL_AGENT_OPENAI_BASE_URL": "http://x/v1"}, {}, "openai"),
    ({}, {"openai_base_url": "http://x/v1"}, "openai"),
    ({"ANTHROPIC_API_KEY": "k"}, {"openai_base_url": "http://x/v1"}, "claude"),
    ({"ANTHROPIC_API_KEY": "k"}, {"kind": "tuner"}, "tuner"),
])
def test_auto_picks_claude_then_openai_then_tuner(env, settings, expected):
    assert resolve_kind(AgentSettings(**settings), env) == expected


def test_make_agent_builds_each_backend_and_never_keeps_the_key_in_settings():
    claude = make_agent(AgentSettings(), {"ANTHROPIC_API_KEY": "sk-secret"})
    assert claude.name == "claude-sonnet-4-5" and "sk-secret" not in repr(vars(claude.settings))
    claude.close()
    local = make_agent(AgentSettings(openai_base_url="http://127.0.0.1:1/v1", openai_model="qwen"), {})
    assert local.name == "qwen"
    local.close()
    assert make_agent(AgentSettings(), {}).name == "tuner"


def test_make_agent_errors_are_one_line_config_errors():
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY is not set"):
        make_agent(AgentSettings(kind="claude"), {})
    with pytest.raises(ConfigError, match="no base URL"):
        make_agent(AgentSettings(kind="openai"), {})
    with pytest.raises(ConfigError, match="no model"):
        make_agent(AgentSettings(kind="openai", openai_base_url="http://x/v1"), {})


def test_nothing_to_propose_is_an_agent_error():
    from autokernel_tui.agents.base import AgentError
    assert issubclass(NothingToPropose, AgentError)

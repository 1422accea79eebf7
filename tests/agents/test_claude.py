"""The Claude agent through the real anthropic SDK against a fake Messages server (nothing mocked)."""

import pytest

from autokernel_tui.agents.base import AgentUnavailable, ProposalRejected
from autokernel_tui.agents.claude import ClaudeAgent
from tests.agents.conftest import SECRET, with_knob
from tests.fakes.anthropic_server import (FakeAnthropicServer, http_error, message_stream, overloaded, rate_limited,
                                          stream_error, stream_events)


@pytest.fixture
def server():
    with FakeAnthropicServer() as srv:
        yield srv


@pytest.fixture
def good(rmsnorm_ctx):
    src = with_knob(rmsnorm_ctx.incumbent_source, "NUM_WARPS", 2)
    return {"source": src, "description": "Use 2 warps\nextra line", "hypothesis": "fewer warps, less sync"}


def _agent(settings, server, sleeps=None):
    return ClaudeAgent(settings, api_key=SECRET, base_url=server.url,
                       sleep=(sleeps.append if sleeps is not None else lambda s: None))


def test_streams_thinking_in_order_and_the_tool_call_becomes_the_proposal(server, fast_settings, rmsnorm_ctx, good):
    server.queue(message_stream(thinking=["The rows ", "are short; ", "more rows per program."],
                                text=["Submitting."], tool_input=good, fragments=7))
    events = []
    p = _agent(fast_settings, server).propose(rmsnorm_ctx, events.append)
    assert [e.text for e in events if e.kind == "thinking"] == ["The rows ", "are short; ", "more rows per program."]
    assert [e.text for e in events if e.kind == "text"] == ["Submitting."]
    kinds = [e.kind for e in events]
    assert kinds.index("thinking") < kinds.index("text")
    assert p.source == good["source"] and p.description == "Use 2 warps" and p.hypothesis == good["hypothesis"]
    assert p.agent == "claude-sonnet-4-5" and not p.repaired
    body = server.requests[0].body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 8000} and body["stream"] is True
    assert body["tools"][0]["name"] == "submit_kernel"
    assert rmsnorm_ctx.incumbent_source in body["messages"][0]["content"]  # the incumbent is in the context


def test_stable_prefix_carries_a_cache_breakpoint(server, fast_settings, rmsnorm_ctx, good):
    server.queue(message_stream(tool_input=good), message_stream(tool_input=good))
    agent = _agent(fast_settings, server)
    agent.propose(rmsnorm_ctx, lambda e: None)
    rmsnorm_ctx.experiment = 2
    agent.propose(rmsnorm_ctx, lambda e: None)
    first, second = (r.body for r in server.requests)
    assert first["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "Task: rmsnorm" in first["system"][-1]["text"] and "playbook" in first["system"][0]["text"]
    assert "def make_inputs" in first["system"][-1]["text"]  # the reference (stable) is in the cached part
    assert first["system"] == second["system"] and first["tools"] == second["tools"]  # byte-identical prefix
    assert first["messages"] != second["messages"]  # the changing part comes after the breakpoint


def test_malformed_submission_gets_exactly_one_repair_round(server, fast_settings, rmsnorm_ctx, good):
    server.queue(message_stream(thinking=["hm"], tool_input={"source": "def kernel_fn(:\n", "description": "x",
                                                             "hypothesis": "y"}),
                 message_stream(thinking=["fixed"], tool_input=good))
    events = []
    p = _agent(fast_settings, server).propose(rmsnorm_ctx, events.append)
    assert p.repaired and p.source == good["source"] and len(server.requests) == 2
    repair = server.requests[1].body["messages"]
    assert [m["role"] for m in repair] == ["user", "assistant", "user"]
    thinking, tool_use = repair[1]["content"][0], repair[1]["content"][-1]
    assert thinking == {"type": "thinking", "thinking": "hm", "signature": "sig-abc"}  # returned with its signature
    result = repair[2]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == tool_use["id"] and result["is_error"]
    assert "does not parse" in result["content"]
    assert any(e.kind == "error" and "does not parse" in e.text for e in events)


def test_still_malformed_after_the_repair_round_is_rejected(server, fast_settings, rmsnorm_ctx):
    bad = {"source": "print('no kernel here')\n", "description": "x", "hypothesis": "y"}
    server.queue(message_stream(tool_input=bad), message_stream(text=["I give up"]), message_stream(tool_input=bad))
    with pytest.raises(ProposalRejected, match="after one repair round: no submit_kernel call"):
        _agent(fast_settings, server).propose(rmsnorm_ctx, lambda e: None)
    assert len(server.requests) == 2  # never a third


def test_broken_json_and_missing_tool_call_are_repaired(server, fast_settings, rmsnorm_ctx, good):
    server.queue(message_stream(tool_input='{"source": "import tri', stop_reason="max_tokens"),
                 message_stream(tool_input=good))
    p = _agent(fast_settings, server).propose(rmsnorm_ctx, lambda e: None)
    assert p.repaired
    assert "cut off at max_tokens" in server.requests[1].body["messages"][2]["content"][0]["content"]
    server.queue(message_stream(text=["Here is my plan"]), message_stream(tool_input=good))
    _agent(fast_settings, server).propose(rmsnorm_ctx, lambda e: None)
    assert "did not call submit_kernel" in server.requests[3].body["messages"][2]["content"][0]["text"]


def test_overload_and_rate_limit_are_retried_with_backoff(server, fast_settings, rmsnorm_ctx, good):
    server.queue(overloaded(), rate_limited(), stream_error("overloaded_error", after=stream_events(thinking=["a"])[:3]),
                 message_stream(tool_input=good))
    sleeps, events = [], []
    p = _agent(fast_settings, server, sleeps).propose(rmsnorm_ctx, events.append)
    assert p.source == good["source"] and len(server.requests) == 4
    assert len(sleeps) == 3 and sleeps[0] <= sleeps[2]  # exponential growth, capped by retry_max_s
    retries = [e.text for e in events if e.kind == "progress" and "retry" in e.text]
    assert "529 overloaded_error" in retries[0] and "429 rate_limit_error" in retries[1] and "overloaded" in retries[2]


def test_persistent_overload_becomes_agent_unavailable(server, fast_settings, rmsnorm_ctx):
    server.queue(*[overloaded() for _ in range(4)])
    with pytest.raises(AgentUnavailable, match="unavailable after 4 attempts: HTTP 529"):
        _agent(fast_settings, server).propose(rmsnorm_ctx, lambda e: None)
    assert len(server.requests) == 4  # max_retries=3: one try and three retries, all ours (SDK retries off)


def test_connection_refused_becomes_agent_unavailable(fast_settings, rmsnorm_ctx):
    with FakeAnthropicServer() as srv:
        url = srv.url
    agent = ClaudeAgent(fast_settings, api_key=SECRET, base_url=url, sleep=lambda s: None)
    with pytest.raises(AgentUnavailable, match="connection error"):
        agent.propose(rmsnorm_ctx, lambda e: None)


def test_usage_becomes_tokens_and_cost(server, fast_settings, rmsnorm_ctx, good):
    usage = {"input_tokens": 2000, "output_tokens": 1000, "cache_creation_input_tokens": 4000,
             "cache_read_input_tokens": 0}
    server.queue(message_stream(tool_input=good, usage=usage),
                 message_stream(tool_input=good, usage=usage | {"cache_creation_input_tokens": 0,
                                                                "cache_read_input_tokens": 4000}))
    agent = _agent(fast_settings, server)
    first = agent.propose(rmsnorm_ctx, lambda e: None)
    second = agent.propose(rmsnorm_ctx, lambda e: None)
    # sonnet-4-5: $3/MTok in, $15/MTok out, cache writes 1.25x, cache reads 0.1x
    assert (first.tokens_in, first.tokens_out, first.cache_write_tokens) == (6000, 1000, 4000)
    assert first.cost_usd == pytest.approx((2000 * 3 + 1000 * 15 + 4000 * 3.75) / 1e6)
    assert second.cache_read_tokens == 4000
    assert second.cost_usd == pytest.approx((2000 * 3 + 1000 * 15 + 4000 * 0.3) / 1e6)


def test_price_override_from_settings(server, fast_settings, rmsnorm_ctx, good):
    fast_settings.model, fast_settings.price_input_usd_per_mtok, fast_settings.price_output_usd_per_mtok = \
        "my-proxy-model", 1.0, 2.0
    server.queue(message_stream(tool_input=good, usage={"input_tokens": 1_000_000, "output_tokens": 500_000}))
    p = _agent(fast_settings, server).propose(rmsnorm_ctx, lambda e: None)
    assert p.cost_usd == pytest.approx(2.0) and p.agent == "my-proxy-model"


def test_the_key_never_appears_in_events_or_errors(server, fast_settings, rmsnorm_ctx, good):
    server.queue(http_error(401, "authentication_error", f"invalid x-api-key {SECRET}"))
    events = []
    with pytest.raises(AgentUnavailable) as info:
        _agent(fast_settings, server).propose(rmsnorm_ctx, events.append)
    assert "check ANTHROPIC_API_KEY" in str(info.value) and len(server.requests) == 1  # 401 is not retried
    server.queue(http_error(400, "invalid_request_error", f"bad {SECRET}"))
    with pytest.raises(AgentUnavailable) as info2:
        _agent(fast_settings, server).propose(rmsnorm_ctx, events.append)
    server.queue(http_error(503, "api_error", f"down {SECRET}"), message_stream(tool_input=good))
    _agent(fast_settings, server).propose(rmsnorm_ctx, events.append)
    texts = [str(info.value), str(info2.value), repr(info.value.__cause__), repr(info.value.__context__)]
    texts += [e.text for e in events]
    assert "***" in str(info2.value)
    assert all(SECRET not in t for t in texts)
    assert all(SECRET not in str(r.body) for r in server.requests)  # only in the auth header, never the body


def test_thinking_off_forces_the_tool_and_bad_limits_are_config_errors(server, fast_settings, rmsnorm_ctx, good):
    from autokernel_tui.errors import ConfigError
    fast_settings.thinking_budget = 0
    server.queue(message_stream(tool_input=good))
    _agent(fast_settings, server).propose(rmsnorm_ctx, lambda e: None)
    body = server.requests[0].body
    assert "thinking" not in body and body["tool_choice"] == {"type": "tool", "name": "submit_kernel"}
    fast_settings.thinking_budget, fast_settings.max_tokens = 8000, 4000
    with pytest.raises(ConfigError, match="thinking_budget .8000. must be below agent.max_tokens"):
        _agent(fast_settings, server)

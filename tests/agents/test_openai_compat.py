"""The OpenAI-compatible agent through the real openai SDK against a fake chat-completions server."""

import pytest

from autokernel_tui.agents.base import AgentUnavailable, ProposalRejected
from autokernel_tui.agents.openai_compat import OpenAICompatAgent
from tests.agents.conftest import SECRET, with_knob
from tests.fakes.openai_server import FakeOpenAIServer, chat_stream, chunks, http_error


@pytest.fixture
def server():
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture
def good(rmsnorm_ctx):
    src = with_knob(rmsnorm_ctx.incumbent_source, "ROW_BLOCK_ELEMS", 16384)
    return {"source": src, "description": "Bigger row blocks", "hypothesis": "more bytes in flight"}


def _agent(settings, server, sleeps=None, key=SECRET):
    return OpenAICompatAgent(settings, base_url=server.base_url, model="qwen3-coder", api_key=key,
                             sleep=(sleeps.append if sleeps is not None else lambda s: None))


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_streams_reasoning_as_thinking_and_the_tool_call_becomes_the_proposal(server, fast_settings, rmsnorm_ctx,
                                                                              good, field):
    server.queue(chat_stream(reasoning=["Short rows ", "waste programs."], content=["Plan: ", "bigger blocks"],
                             tool_arguments=good, fragments=9, reasoning_field=field))
    events = []
    p = _agent(fast_settings, server).propose(rmsnorm_ctx, events.append)
    assert [e.text for e in events if e.kind == "thinking"] == ["Short rows ", "waste programs."]
    assert [e.text for e in events if e.kind == "text"] == ["Plan: ", "bigger blocks"]
    assert (p.source, p.description, p.hypothesis, p.agent) == (good["source"], good["description"],
                                                                good["hypothesis"], "qwen3-coder")
    req = server.requests[0]
    assert req.path == "/v1/chat/completions" and req.body["stream"] is True
    assert req.body["tools"][0]["function"]["name"] == "submit_kernel"
    assert req.body["messages"][0]["role"] == "system" and "Task: rmsnorm" in req.body["messages"][0]["content"]


def test_malformed_submission_gets_exactly_one_repair_round(server, fast_settings, rmsnorm_ctx, good):
    server.queue(chat_stream(tool_arguments={"source": "x = 1\n", "description": "d", "hypothesis": "h"}),
                 chat_stream(tool_arguments=good))
    p = _agent(fast_settings, server).propose(rmsnorm_ctx, lambda e: None)
    assert p.repaired and len(server.requests) == 2
    msgs = server.requests[1].body["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool"]
    assert msgs[2]["tool_calls"][0]["id"] == msgs[3]["tool_call_id"] == "call_fake1"
    assert "must define kernel_fn" in msgs[3]["content"]


def test_still_malformed_after_the_repair_round_is_rejected(server, fast_settings, rmsnorm_ctx):
    server.queue(chat_stream(content=["no tool"]), chat_stream(tool_arguments='{"source": 1'),
                 chat_stream(content=["never asked"]))
    with pytest.raises(ProposalRejected, match="not valid JSON"):
        _agent(fast_settings, server).propose(rmsnorm_ctx, lambda e: None)
    assert len(server.requests) == 2
    assert "did not call submit_kernel" in server.requests[1].body["messages"][-1]["content"]


def test_429_and_503_are_retried_then_succeed(server, fast_settings, rmsnorm_ctx, good):
    server.queue(http_error(429, "slow down", {"retry-after": "0.005"}), http_error(503, "loading model"),
                 chat_stream(tool_arguments=good))
    sleeps, events = [], []
    p = _agent(fast_settings, server, sleeps).propose(rmsnorm_ctx, events.append)
    assert p.source == good["source"] and len(server.requests) == 3 and len(sleeps) == 2
    assert ["HTTP 429" in e.text or "HTTP 503" in e.text for e in events if "retry" in e.text] == [True, True]


def test_error_inside_the_stream_is_retried(server, fast_settings, rmsnorm_ctx, good):
    server.queue(chunks([{"error": {"message": "server overloaded, try later"}}]), chat_stream(tool_arguments=good))
    assert _agent(fast_settings, server).propose(rmsnorm_ctx, lambda e: None).source == good["source"]
    assert len(server.requests) == 2


def test_persistent_503_becomes_agent_unavailable(server, fast_settings, rmsnorm_ctx):
    server.queue(*[http_error(503, "down") for _ in range(4)])
    with pytest.raises(AgentUnavailable, match="qwen3-coder server unavailable after 4 attempts: HTTP 503"):
        _agent(fast_settings, server).propose(rmsnorm_ctx, lambda e: None)
    assert len(server.requests) == 4


def test_usage_becomes_tokens_and_zero_cost_unless_priced(server, fast_settings, rmsnorm_ctx, good):
    server.queue(chat_stream(tool_arguments=good, usage={"prompt_tokens": 3000, "completion_tokens": 700,
                                                         "cached_tokens": 1000}))
    p = _agent(fast_settings, server).propose(rmsnorm_ctx, lambda e: None)
    assert (p.tokens_in, p.tokens_out, p.cache_read_tokens, p.cost_usd) == (3000, 700, 1000, 0.0)
    fast_settings.price_input_usd_per_mtok, fast_settings.price_output_usd_per_mtok = 1.0, 4.0
    server.queue(chat_stream(tool_arguments=good, usage={"prompt_tokens": 3000, "completion_tokens": 700}))
    p = _agent(fast_settings, server).propose(rmsnorm_ctx, lambda e: None)
    assert p.cost_usd == pytest.approx((3000 * 1.0 + 700 * 4.0) / 1e6)


def test_the_key_never_appears_in_events_or_errors(server, fast_settings, rmsnorm_ctx):
    server.queue(http_error(401, f"bad key {SECRET}"))
    with pytest.raises(AgentUnavailable) as info:
        _agent(fast_settings, server).propose(rmsnorm_ctx, lambda e: None)
    assert "check OPENAI_API_KEY" in str(info.value) and info.value.__context__ is None
    events = []
    server.queue(*[http_error(500, f"oops {SECRET}") for _ in range(4)])
    with pytest.raises(AgentUnavailable) as info2:
        _agent(fast_settings, server).propose(rmsnorm_ctx, events.append)
    assert SECRET not in str(info2.value) and "***" in str(info2.value)
    assert all(SECRET not in e.text for e in events)
    assert server.requests[0].headers["authorization"] == f"Bearer {SECRET}"  # sent only where it belongs


def test_no_key_is_fine_for_a_local_server(server, fast_settings, rmsnorm_ctx, good):
    server.queue(chat_stream(tool_arguments=good))
    _agent(fast_settings, server, key=None).propose(rmsnorm_ctx, lambda e: None)
    assert server.requests[0].headers["authorization"] == "Bearer not-needed"

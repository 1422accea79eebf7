"""A fake Anthropic Messages API for tests: the real SDK talks to it through ``base_url``.

    with FakeAnthropicServer() as srv:
        srv.queue(message_stream(thinking=["a", "b"], tool_input={...}))
        client = anthropic.Anthropic(api_key="k", base_url=srv.url)

Responses are scripted per test (``queue``), requests are recorded
(``srv.requests[i].body`` is the JSON the SDK sent, ``.headers`` its headers).
"""

from __future__ import annotations

import json
from typing import Any

from tests.fakes._http import Reply, ScriptedServer, json_reply

__all__ = ["FakeAnthropicServer", "message_stream", "sse", "http_error", "overloaded", "rate_limited",
           "stream_error", "Reply"]


class FakeAnthropicServer(ScriptedServer):
    pass


def sse(events: list[tuple[str, dict]]) -> Reply:
    """A 200 text/event-stream reply from (event name, data) pairs, one flush per event."""
    chunks = [f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events]
    return Reply(200, {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}, chunks=chunks)


def _fragments(text: str, n: int) -> list[str]:
    size = max(1, -(-len(text) // max(1, n)))
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def stream_events(*, thinking: list[str] | None = None, text: list[str] | None = None,
                  tool_input: dict | str | None = None, tool_name: str = "submit_kernel", fragments: int = 4,
                  usage: dict | None = None, model: str = "claude-sonnet-4-5", signature: str = "sig-abc",
                  stop_reason: str | None = None) -> list[tuple[str, dict]]:
    """The event sequence of one streamed message: thinking, then text, then a tool_use block."""
    u = {"input_tokens": 100, "output_tokens": 50, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
         **(usage or {})}
    events: list[tuple[str, dict]] = [("message_start", {"type": "message_start", "message": {
        "id": "msg_fake", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {k: u[k] for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")}
        | {"output_tokens": 1}}})]
    index = 0

    def block(start: dict, deltas: list[dict]) -> None:
        nonlocal index
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}))
        for d in deltas:
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1

    if thinking is not None:
        block({"type": "thinking", "thinking": "", "signature": ""},
              [{"type": "thinking_delta", "thinking": t} for t in thinking]
              + [{"type": "signature_delta", "signature": signature}])
    if text is not None:
        block({"type": "text", "text": ""}, [{"type": "text_delta", "text": t} for t in text])
    if tool_input is not None:
        raw = tool_input if isinstance(tool_input, str) else json.dumps(tool_input)
        block({"type": "tool_use", "id": f"toolu_{index:03d}", "name": tool_name, "input": {}},
              [{"type": "input_json_delta", "partial_json": p} for p in _fragments(raw, fragments)])
    events.append(("ping", {"type": "ping"}))
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": stop_reason or ("tool_use" if tool_input is not None
                                                                              else "end_turn"),
                                               "stop_sequence": None},
                                     "usage": {"output_tokens": u["output_tokens"]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def message_stream(**kwargs: Any) -> Reply:
    return sse(stream_events(**kwargs))


def http_error(status: int, error_type: str, message: str, headers: dict[str, str] | None = None) -> Reply:
    return json_reply(status, {"type": "error", "error": {"type": error_type, "message": message}}, headers)


def overloaded() -> Reply:
    return http_error(529, "overloaded_error", "Overloaded")


def rate_limited(retry_after: float | None = None) -> Reply:
    return http_error(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit",
                      {"retry-after": str(retry_after)} if retry_after is not None else None)


def stream_error(error_type: str = "overloaded_error", after: list[tuple[str, dict]] | None = None) -> Reply:
    """A stream that starts (optionally with some events) and then carries an error event."""
    events = list(after or [])
    events.append(("error", {"type": "error", "error": {"type": error_type, "message": "Overloaded"}}))
    return sse(events)

"""A fake OpenAI-compatible chat-completions server (streaming), for tests through the real SDK.

    with FakeOpenAIServer() as srv:
        srv.queue(chat_stream(reasoning=["a"], tool_arguments={...}))
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="k")
"""

from __future__ import annotations

import json

from tests.fakes._http import Reply, ScriptedServer, json_reply

__all__ = ["FakeOpenAIServer", "chat_stream", "chunks", "http_error", "Reply"]


class FakeOpenAIServer(ScriptedServer):
    @property
    def base_url(self) -> str:
        return self.url + "/v1"


def chunks(payloads: list[dict]) -> Reply:
    body = [f"data: {json.dumps(p)}\n\n".encode() for p in payloads] + [b"data: [DONE]\n\n"]
    return Reply(200, {"Content-Type": "text/event-stream"}, chunks=body)


def _chunk(delta: dict, finish: str | None = None, model: str = "local-model") -> dict:
    return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def chat_stream(*, reasoning: list[str] | None = None, content: list[str] | None = None,
                tool_arguments: dict | str | None = None, tool_name: str = "submit_kernel", fragments: int = 4,
                usage: dict | None = None, reasoning_field: str = "reasoning_content") -> Reply:
    """One streamed completion: reasoning deltas, content deltas, a fragmented tool call, a usage chunk."""
    out = [_chunk({"role": "assistant", "content": ""})]
    out += [_chunk({reasoning_field: r}) for r in reasoning or []]
    out += [_chunk({"content": c}) for c in content or []]
    if tool_arguments is not None:
        raw = tool_arguments if isinstance(tool_arguments, str) else json.dumps(tool_arguments)
        size = max(1, -(-len(raw) // fragments))
        parts = [raw[i:i + size] for i in range(0, len(raw), size)] or [""]
        out.append(_chunk({"tool_calls": [{"index": 0, "id": "call_fake1", "type": "function",
                                           "function": {"name": tool_name, "arguments": parts[0]}}]}))
        out += [_chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in parts[1:]]
    out.append(_chunk({}, finish="tool_calls" if tool_arguments is not None else "stop"))
    u = {"prompt_tokens": 120, "completion_tokens": 40, **(usage or {})}
    cached = u.pop("cached_tokens", None)
    usage_chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": "local-model",
                   "choices": [], "usage": {**u, "total_tokens": u["prompt_tokens"] + u["completion_tokens"]}}
    if cached is not None:
        usage_chunk["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
    out.append(usage_chunk)
    return chunks(out)


def http_error(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    return json_reply(status, {"error": {"message": message, "type": "server_error", "code": status}}, headers)

"""An agent for any OpenAI-compatible chat-completions server (vLLM, SGLang, Ollama, ...).

Same protocol, validation, repair round, retries and usage as the Claude agent:
streamed chat completions with one function tool, ``submit_kernel``, whose
arguments arrive in fragments. Servers that stream reasoning separately
(``reasoning_content`` in vLLM/SGLang/DeepSeek, ``reasoning`` in others) have it
shown as thinking. Cost is 0 unless the settings give prices.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from autokernel_tui.agents import prompt
from autokernel_tui.agents.base import (AgentContext, AgentEvent, AgentUnavailable, Emit, InvalidSource, Proposal,
                                        ProposalRejected, parse_submission)
from autokernel_tui.agents.pricing import Usage, price_for
from autokernel_tui.agents.retry import Retryable, call_with_retries, retry_after, scrub
from autokernel_tui.config import AgentSettings

TOOL = {"type": "function", "function": {"name": prompt.TOOL_NAME, "description": prompt.TOOL_DESCRIPTION,
                                         "parameters": prompt.TOOL_SCHEMA}}


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Round:
    content: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None

    def assistant_message(self) -> dict:
        msg: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.calls:
            msg["tool_calls"] = [{"id": c.id or f"call_{i}", "type": "function",
                                  "function": {"name": c.name, "arguments": "".join(c.arguments)}}
                                 for i, c in sorted(self.calls.items())]
        return msg


class OpenAICompatAgent:
    def __init__(self, settings: AgentSettings, *, base_url: str, model: str, api_key: str | None = None,
                 sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None) -> None:
        import openai  # lazy: only this backend needs the SDK

        self._openai = openai
        self.settings = settings
        self.model = model
        self.name = model
        self._key = api_key
        self._sleep = sleep
        self._rng = rng or random.Random()
        # Local servers usually need no key; the SDK insists on a non-empty one.
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed", max_retries=0,
                                     timeout=settings.request_timeout_s)
        self._price = price_for(model, settings.price_input_usd_per_mtok, settings.price_output_usd_per_mtok)

    def close(self) -> None:
        self._client.close()

    def _stream_once(self, messages: list[dict], emit: Emit) -> _Round:
        rnd = _Round()
        failure: Exception | None = None
        try:
            stream = self._client.chat.completions.create(
                model=self.model, messages=messages, tools=[TOOL], tool_choice="auto", stream=True,
                stream_options={"include_usage": True}, max_tokens=self.settings.max_tokens)
            with stream:
                for chunk in stream:
                    self._on_chunk(chunk, rnd, emit)
        except self._openai.APIConnectionError as exc:
            failure = Retryable(f"connection error ({type(exc).__name__})")
        except self._openai.APIStatusError as exc:
            failure = self._classify(exc.status_code, exc.body, exc.message, getattr(exc.response, "headers", None))
        except self._openai.APIError as exc:  # an error object inside the stream
            failure = self._classify(200, exc.body, exc.message, None)
        if failure is not None:
            raise failure  # raised outside the except block: no chained SDK error (its text may echo secrets)
        return rnd

    def _classify(self, status: int, body: Any, message: str, headers: Any) -> Exception:
        err = body.get("error", body) if isinstance(body, dict) else {}
        detail = (err.get("message") if isinstance(err, dict) else None) or message or "error"
        detail = scrub(str(detail), self._key)[:200]
        text = f"HTTP {status}: {detail}" if status != 200 else detail
        if status in (408, 409, 429) or status >= 500 or (status == 200 and "overload" in detail.lower()):
            return Retryable(text, retry_after(headers))
        if status in (401, 403):
            return AgentUnavailable(f"the OpenAI-compatible server refused the credentials (HTTP {status}): "
                                    "check OPENAI_API_KEY")
        return AgentUnavailable(f"OpenAI-compatible server error {text}")

    def _on_chunk(self, chunk: Any, rnd: _Round, emit: Emit) -> None:
        if chunk.usage is not None:
            u = chunk.usage
            details = getattr(u, "prompt_tokens_details", None)
            cached = (getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
            rnd.usage = Usage(input=(u.prompt_tokens or 0) - cached, output=u.completion_tokens or 0,
                              cache_read=cached)
        for choice in chunk.choices or []:
            delta = choice.delta
            if choice.finish_reason:
                rnd.finish_reason = choice.finish_reason
            if delta is None:
                continue
            extra = delta.model_extra or {}
            reasoning = extra.get("reasoning_content") or extra.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                emit(AgentEvent("thinking", reasoning))
            if delta.content:
                rnd.content.append(delta.content)
                emit(AgentEvent("text", delta.content))
            for tc in delta.tool_calls or []:
                call = rnd.calls.get(tc.index)
                if call is None:
                    call = rnd.calls[tc.index] = _Call()
                    emit(AgentEvent("progress", f"writing {(tc.function and tc.function.name) or 'tool call'}…"))
                if tc.id:
                    call.id = tc.id
                if tc.function is not None:
                    if tc.function.name:
                        call.name = tc.function.name
                    if tc.function.arguments:
                        call.arguments.append(tc.function.arguments)

    def propose(self, ctx: AgentContext, emit: Emit) -> Proposal:
        s = self.settings
        messages: list[dict] = [
            {"role": "system", "content": prompt.system_text() + "\n\n" + prompt.task_text(ctx)},
            {"role": "user", "content": prompt.experiment_text(ctx, s.memory_chars)},
        ]
        usage = Usage()
        for attempt in (1, 2):
            emit(AgentEvent("progress", f"{self.name}: experiment {ctx.experiment}, "
                                        f"{'request' if attempt == 1 else 'repair round'}"))
            snapshot = list(messages)
            rnd = call_with_retries(lambda: self._stream_once(snapshot, emit), what=f"{self.name} server",
                                    max_retries=s.max_retries, base_s=s.retry_base_s, max_s=s.retry_max_s,
                                    emit=emit, sleep=self._sleep, rng=self._rng)
            usage.add(rnd.usage)
            error, result = self._check(rnd)
            if error is None:
                source, description, hypothesis = result
                cost = usage.cost(self._price)
                emit(AgentEvent("progress", f"{self.name}: {usage.total_in} tokens in, {usage.output} out"
                                            + (f", ${cost:.4f}" if cost else "")))
                return Proposal(source=source, description=description, hypothesis=hypothesis,
                                tokens_in=usage.total_in, tokens_out=usage.output, cost_usd=cost, agent=self.name,
                                cache_read_tokens=usage.cache_read, repaired=attempt == 2)
            emit(AgentEvent("error", f"submission rejected: {error}"))
            messages.append(rnd.assistant_message())
            messages.extend(result)
        raise ProposalRejected(f"{self.name} submitted no valid kernel.py after one repair round: {error}")

    def _check(self, rnd: _Round) -> tuple[str | None, Any]:
        if not rnd.calls:
            return "no submit_kernel call", [{"role": "user", "content": prompt.REPAIR_NO_TOOL}]
        order = sorted(rnd.calls)
        first = rnd.calls[order[0]]
        error = ""
        if first.name != prompt.TOOL_NAME:
            error = f"unknown tool {first.name!r}; the only tool is {prompt.TOOL_NAME}"
        else:
            try:
                args = json.loads("".join(first.arguments) or "{}")
                return None, parse_submission(args)
            except json.JSONDecodeError as exc:
                cut = " (the response was cut off at max_tokens)" if rnd.finish_reason == "length" else ""
                error = f"the tool arguments are not valid JSON: {exc.msg} at char {exc.pos}{cut}"
            except InvalidSource as exc:
                error = str(exc)
        results = [{"role": "tool", "tool_call_id": rnd.calls[i].id or f"call_{i}",
                    "content": prompt.repair_text(error) if i == order[0] else "ignored: submit one kernel per turn"}
                   for i in order]
        return error, results

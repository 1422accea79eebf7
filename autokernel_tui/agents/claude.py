"""The Claude agent: the Messages API through the anthropic SDK, streamed.

One experiment = one request (plus at most one repair round). Extended thinking
and text stream out as events the moment they arrive; the proposal comes back
through the ``submit_kernel`` tool, its JSON assembled from input_json_delta
fragments and validated. The stable prefix (tools, role, playbook, task spec)
carries a cache breakpoint so later experiments read it from the prompt cache.

The API key comes from the caller (``make_agent`` reads the environment); it is
handed to the SDK and never stored elsewhere, logged, or put in a message.
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
from autokernel_tui.errors import ConfigError

RETRYABLE_ERROR_TYPES = {"overloaded_error", "rate_limit_error", "api_error", "timeout_error"}
MIN_THINKING_BUDGET = 1024  # the API's floor; below it thinking is switched off


@dataclass
class _Round:
    """What one streamed response produced."""

    blocks: dict[int, dict] = field(default_factory=dict)  # index -> content block being assembled
    json_parts: dict[int, list[str]] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None

    def assistant_content(self) -> list[dict]:
        """The blocks to send back as the assistant turn (thinking must be returned with its signature)."""
        content = []
        for i in sorted(self.blocks):
            block = dict(self.blocks[i])
            if block["type"] == "tool_use":
                block["input"] = self.tool_input(i)[0] or {}
            elif block["type"] == "text" and not block.get("text"):
                continue
            content.append(block)
        return content

    def tool_input(self, index: int) -> tuple[dict | None, str]:
        raw = "".join(self.json_parts.get(index, [])) or "{}"
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            cut = " (the response was cut off at max_tokens)" if self.stop_reason == "max_tokens" else ""
            return None, f"the tool input is not valid JSON: {exc.msg} at char {exc.pos}{cut}"
        if not isinstance(value, dict):
            return None, "the tool input must be a JSON object"
        return value, ""

    def tool_uses(self) -> list[int]:
        return [i for i in sorted(self.blocks) if self.blocks[i]["type"] == "tool_use"]


class ClaudeAgent:
    def __init__(self, settings: AgentSettings, *, api_key: str, base_url: str | None = None,
                 sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None) -> None:
        if settings.max_tokens <= 0 or settings.max_retries < 0:
            raise ConfigError("agent.max_tokens must be positive and agent.max_retries at least 0")
        if settings.thinking_budget >= MIN_THINKING_BUDGET and settings.thinking_budget >= settings.max_tokens:
            raise ConfigError(f"agent.thinking_budget ({settings.thinking_budget}) must be below agent.max_tokens "
                              f"({settings.max_tokens}): thinking counts against the output limit")
        import anthropic  # lazy: only this backend needs the SDK

        self._anthropic = anthropic
        self.settings = settings
        self.name = settings.model
        self._key = api_key
        self._sleep = sleep
        self._rng = rng or random.Random()
        # SDK retries off: every retry goes through call_with_retries so it is visible and bounded.
        self._client = anthropic.Anthropic(api_key=api_key, base_url=base_url or None, max_retries=0,
                                           timeout=settings.request_timeout_s)
        self._price = price_for(settings.model, settings.price_input_usd_per_mtok, settings.price_output_usd_per_mtok)

    def close(self) -> None:
        self._client.close()

    # -- one request ---------------------------------------------------------------------------------------------
    def _request(self, ctx: AgentContext, messages: list[dict]) -> dict[str, Any]:
        s = self.settings
        req: dict[str, Any] = {
            "model": s.model,
            "max_tokens": s.max_tokens,
            "system": [
                {"type": "text", "text": prompt.system_text()},
                # The breakpoint caches tools + system (role, playbook, task): identical for every experiment.
                {"type": "text", "text": prompt.task_text(ctx), "cache_control": {"type": "ephemeral"}},
            ],
            "tools": [{"name": prompt.TOOL_NAME, "description": prompt.TOOL_DESCRIPTION,
                       "input_schema": prompt.TOOL_SCHEMA}],
            "messages": messages,
        }
        if s.thinking_budget >= MIN_THINKING_BUDGET:
            req["thinking"] = {"type": "enabled", "budget_tokens": s.thinking_budget}
            req["tool_choice"] = {"type": "auto"}  # forced tool use is not allowed with extended thinking
        else:
            req["tool_choice"] = {"type": "tool", "name": prompt.TOOL_NAME}
        return req

    def _stream_once(self, req: dict[str, Any], emit: Emit) -> _Round:
        rnd = _Round()
        failure: Exception | None = None
        try:
            with self._client.messages.create(stream=True, **req) as stream:
                for event in stream:
                    self._on_event(event, rnd, emit)
        except self._anthropic.APIConnectionError as exc:
            failure = Retryable(f"connection error ({type(exc).__name__})")
        except self._anthropic.APIStatusError as exc:
            failure = self._classify(exc)
        if failure is not None:
            raise failure  # raised outside the except block: no chained SDK error (its text may echo secrets)
        return rnd

    def _classify(self, exc: Any) -> Exception:
        body = exc.body if isinstance(exc.body, dict) else {}
        err = body.get("error") if isinstance(body.get("error"), dict) else {}
        etype = str(err.get("type") or "")
        detail = scrub(str(err.get("message") or type(exc).__name__), self._key)[:200]
        status = exc.status_code
        text = f"HTTP {status} {etype}: {detail}".replace(" : ", ": ") if status != 200 else f"{etype}: {detail}"
        if status in (408, 409, 429) or status >= 500 or etype in RETRYABLE_ERROR_TYPES:
            return Retryable(text, retry_after(getattr(exc.response, "headers", None)))
        if status in (401, 403):
            return AgentUnavailable(f"Anthropic API refused the credentials (HTTP {status}): check ANTHROPIC_API_KEY")
        return AgentUnavailable(f"Anthropic API error {text}")

    def _on_event(self, event: Any, rnd: _Round, emit: Emit) -> None:
        kind = event.type
        if kind == "message_start":
            u = event.message.usage
            rnd.usage = Usage(input=u.input_tokens or 0, output=u.output_tokens or 0,
                              cache_read=getattr(u, "cache_read_input_tokens", 0) or 0,
                              cache_write=getattr(u, "cache_creation_input_tokens", 0) or 0)
        elif kind == "content_block_start":
            block = event.content_block
            if block.type == "thinking":
                rnd.blocks[event.index] = {"type": "thinking", "thinking": block.thinking or "",
                                           "signature": getattr(block, "signature", "") or ""}
                if block.thinking:
                    emit(AgentEvent("thinking", block.thinking))
            elif block.type == "redacted_thinking":
                rnd.blocks[event.index] = {"type": "redacted_thinking", "data": block.data}
            elif block.type == "text":
                rnd.blocks[event.index] = {"type": "text", "text": block.text or ""}
                if block.text:
                    emit(AgentEvent("text", block.text))
            elif block.type == "tool_use":
                rnd.blocks[event.index] = {"type": "tool_use", "id": block.id, "name": block.name}
                emit(AgentEvent("progress", f"writing {block.name}…"))
        elif kind == "content_block_delta":
            block, delta = rnd.blocks.get(event.index), event.delta
            if block is None:
                return
            if delta.type == "thinking_delta":
                block["thinking"] += delta.thinking
                emit(AgentEvent("thinking", delta.thinking))
            elif delta.type == "signature_delta":
                block["signature"] = block.get("signature", "") + delta.signature
            elif delta.type == "text_delta":
                block["text"] += delta.text
                emit(AgentEvent("text", delta.text))
            elif delta.type == "input_json_delta":
                rnd.json_parts.setdefault(event.index, []).append(delta.partial_json)
        elif kind == "message_delta":
            rnd.stop_reason = event.delta.stop_reason
            u = event.usage
            # message_delta usage is cumulative; keep the larger of what start and delta reported.
            rnd.usage.output = max(rnd.usage.output, u.output_tokens or 0)
            for attr, name in (("input", "input_tokens"), ("cache_read", "cache_read_input_tokens"),
                               ("cache_write", "cache_creation_input_tokens")):
                setattr(rnd.usage, attr, max(getattr(rnd.usage, attr), getattr(u, name, 0) or 0))

    # -- the protocol --------------------------------------------------------------------------------------------
    def propose(self, ctx: AgentContext, emit: Emit) -> Proposal:
        s = self.settings
        messages: list[dict] = [{"role": "user", "content": prompt.experiment_text(ctx, s.memory_chars)}]
        usage = Usage()
        for attempt in (1, 2):  # the first submission, then at most one repair round
            emit(AgentEvent("progress", f"{self.name}: experiment {ctx.experiment}, "
                                        f"{'request' if attempt == 1 else 'repair round'}"))
            req = self._request(ctx, messages)
            rnd = call_with_retries(lambda: self._stream_once(req, emit), what="Anthropic API",
                                    max_retries=s.max_retries, base_s=s.retry_base_s, max_s=s.retry_max_s,
                                    emit=emit, sleep=self._sleep, rng=self._rng)
            usage.add(rnd.usage)
            error, results = self._check(rnd)
            if error is None:
                source, description, hypothesis = results  # type: ignore[misc]
                cost = usage.cost(self._price)
                emit(AgentEvent("progress", f"{self.name}: {usage.total_in} tokens in "
                                            f"({usage.cache_read} cached), {usage.output} out, ${cost:.4f}"))
                return Proposal(source=source, description=description, hypothesis=hypothesis,
                                tokens_in=usage.total_in, tokens_out=usage.output, cost_usd=cost, agent=self.name,
                                cache_read_tokens=usage.cache_read, cache_write_tokens=usage.cache_write,
                                repaired=attempt == 2)
            emit(AgentEvent("error", f"submission rejected: {error}"))
            messages.append({"role": "assistant", "content": rnd.assistant_content()})
            messages.append({"role": "user", "content": results})
        raise ProposalRejected(f"{self.name} submitted no valid kernel.py after one repair round: {error}")

    def _check(self, rnd: _Round) -> tuple[str | None, Any]:
        """(None, (source, description, hypothesis)) or (error, the user content for the repair round)."""
        uses = rnd.tool_uses()
        if not uses:
            return "no submit_kernel call", [{"type": "text", "text": prompt.REPAIR_NO_TOOL}]
        first, error = uses[0], ""
        args, error = rnd.tool_input(first)
        if rnd.blocks[first]["name"] != prompt.TOOL_NAME:
            error = f"unknown tool {rnd.blocks[first]['name']!r}; the only tool is {prompt.TOOL_NAME}"
        if not error:
            try:
                return None, parse_submission(args)
            except InvalidSource as exc:
                error = str(exc)
        results = [{"type": "tool_result", "tool_use_id": rnd.blocks[i]["id"], "is_error": True,
                    "content": prompt.repair_text(error) if i == first else "ignored: submit one kernel per turn"}
                   for i in uses]
        return error, results

"""The Agent protocol: what every agent takes, streams and returns.

An agent reads an ``AgentContext`` (the task, the incumbent kernel.py, its
numbers, this task's history) and returns a ``Proposal``: a full new kernel.py
plus a one-line description and a hypothesis. It can only return source text,
so it cannot touch harness-owned files; the text is still untrusted and is
validated here before it leaves the agent.

Imports stay light (stdlib only): ``make_agent`` imports a backend's SDK only
when that backend is chosen, so the offline tuner runs with torch+triton alone.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from autokernel_tui.errors import AutokernelError, ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from autokernel_tui.config import AgentSettings
    from autokernel_tui.tasks.spec import TaskSpec

MAX_SOURCE_BYTES = 64 * 1024  # a kernel.py larger than this is not a kernel edit
MAX_DESCRIPTION_CHARS = 160
EVENT_KINDS = ("thinking", "text", "progress", "error")


class AgentError(AutokernelError):
    """Base for agent failures the engine handles (it never crashes on these)."""


class AgentUnavailable(AgentError):
    """The backend is down, rate-limited past our retries, or refuses our credentials.

    The engine pauses with this one-line message instead of crashing.
    """


class ProposalRejected(AgentError):
    """The agent's submission stayed malformed after its one repair round.

    The engine records the experiment as failed (no commit) and moves on.
    """


class NothingToPropose(AgentError):
    """This agent has nothing new to try on this kernel (e.g. the tuner's search
    space is exhausted, or kernel.py declares no knobs): treat the kernel as done."""


class InvalidSource(ValueError):
    """A submitted kernel.py fails validation; the message is shown to the model."""


@dataclass(frozen=True)
class AgentEvent:
    kind: str  # thinking | text | progress | error
    text: str

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise ValueError(f"AgentEvent.kind must be one of {EVENT_KINDS}, not {self.kind!r}")


Emit = Callable[[AgentEvent], None]


@dataclass
class Proposal:
    source: str  # the full new kernel.py
    description: str  # one line, becomes the commit subject
    hypothesis: str
    tokens_in: int = 0  # every input token processed, cached or not
    tokens_out: int = 0
    cost_usd: float = 0.0
    agent: str = ""
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    repaired: bool = False  # True when the first submission needed the repair round


@dataclass
class AgentContext:
    task: "TaskSpec"
    incumbent_source: str
    incumbent_report: dict | None = None
    # This task's results rows, newest last, each plus "source" and "reason".
    history: list[dict] = field(default_factory=list)
    profile: dict | None = None
    experiment: int = 0
    workspace: Path = field(default_factory=Path)
    # The other proposals in flight for this task (run.parallel > 1), so as not to duplicate them:
    # each {"id", "state": "proposing"|"ready", "description", "source" (None while proposing)}.
    in_flight: list[dict] = field(default_factory=list)


class Agent(Protocol):
    name: str

    def propose(self, ctx: AgentContext, emit: Emit) -> Proposal: ...

    def close(self) -> None: ...


def validate_source(source: Any) -> str:
    """Check a submitted kernel.py; returns it or raises InvalidSource with a fixable message."""
    if not isinstance(source, str) or not source.strip():
        raise InvalidSource("source must be the full text of kernel.py (a non-empty string)")
    size = len(source.encode("utf-8"))
    if size > MAX_SOURCE_BYTES:
        raise InvalidSource(f"kernel.py is {size} bytes; the limit is {MAX_SOURCE_BYTES} bytes")
    if "\x00" in source:
        raise InvalidSource("kernel.py contains a NUL byte")
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise InvalidSource(f"kernel.py does not parse: line {exc.lineno}: {exc.msg}") from None
    defined = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
    if "kernel_fn" not in defined:
        raise InvalidSource("kernel.py must define kernel_fn(*inputs) at module level")
    # The harness's own static rules (stdlib only): a candidate it would reject costs a repair round here,
    # not a whole experiment there.
    from autokernel_tui.harness.static_check import check_source

    violations = check_source(source)
    if violations:
        more = f" (+{len(violations) - 3} more)" if len(violations) > 3 else ""
        raise InvalidSource("the harness would reject it: " + "; ".join(map(str, violations[:3])) + more)
    if not source.endswith("\n"):
        source += "\n"
    return source


def one_line(text: Any, limit: int = MAX_DESCRIPTION_CHARS) -> str:
    """The first non-empty line of ``text``, cut to ``limit`` characters."""
    for line in str(text or "").splitlines():
        line = " ".join(line.split())
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def parse_submission(args: Any) -> tuple[str, str, str]:
    """Validate the submit_kernel tool's arguments -> (source, description, hypothesis)."""
    if not isinstance(args, dict):
        raise InvalidSource("submit_kernel takes an object with source, description and hypothesis")
    source = validate_source(args.get("source"))
    description = one_line(args.get("description"))
    if not description:
        raise InvalidSource("description is required: one line saying what changed")
    hypothesis = str(args.get("hypothesis") or "").strip()
    if not hypothesis:
        raise InvalidSource("hypothesis is required: why this change should be faster")
    return source, description, hypothesis


def resolve_kind(settings: "AgentSettings", env: Mapping[str, str]) -> str:
    """Which backend ``make_agent`` builds: auto = claude if a key, else openai if a URL, else tuner."""
    if settings.kind != "auto":
        return settings.kind
    if env.get("ANTHROPIC_API_KEY"):
        return "claude"
    if openai_base_url(settings, env):
        return "openai"
    return "tuner"


def openai_base_url(settings: "AgentSettings", env: Mapping[str, str]) -> str:
    return settings.openai_base_url or env.get("AUTOKERNEL_AGENT_OPENAI_BASE_URL", "")


def make_agent(settings: "AgentSettings", env: Mapping[str, str]) -> Agent:
    kind = resolve_kind(settings, env)
    if kind == "claude":
        key = env.get("ANTHROPIC_API_KEY")
        if not key:
            raise ConfigError("agent.kind is claude but ANTHROPIC_API_KEY is not set in the environment")
        from autokernel_tui.agents.claude import ClaudeAgent

        return ClaudeAgent(settings, api_key=key, base_url=settings.anthropic_base_url or None)
    if kind == "openai":
        url = openai_base_url(settings, env)
        if not url:
            raise ConfigError("agent.kind is openai but no base URL: set agent.openai_base_url "
                              "or AUTOKERNEL_AGENT_OPENAI_BASE_URL")
        model = settings.openai_model or env.get("AUTOKERNEL_AGENT_OPENAI_MODEL", "")
        if not model:
            raise ConfigError("agent.kind is openai but no model: set agent.openai_model "
                              "or AUTOKERNEL_AGENT_OPENAI_MODEL")
        from autokernel_tui.agents.openai_compat import OpenAICompatAgent

        return OpenAICompatAgent(settings, base_url=url, model=model, api_key=env.get("OPENAI_API_KEY") or None)
    if kind == "tuner":
        from autokernel_tui.agents.tuner import TunerAgent

        return TunerAgent(seed=settings.seed, budget=settings.tuner_budget)
    raise ConfigError(f"unknown agent kind {kind!r}")

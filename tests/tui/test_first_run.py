"""The first-run screen: offers starters, names the device and the agent, never a key."""

from __future__ import annotations

from autokernel_tui.config import AgentSettings
from autokernel_tui.tui.app import FIRST_RUN, AutokernelApp
from autokernel_tui.tui.environment import CPU_LABEL, agent_label


async def test_choosing_the_demo_pair(tmp_path):
    info = {"starters": ["rmsnorm", "softmax", "matmul"], "agent": "offline tuner", "device": CPU_LABEL}
    app = AutokernelApp(tmp_path, mode=FIRST_RUN, first_run_info=info)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.1)
        from tests.tui.fakes import screen_text
        text = " ".join(screen_text(app).split())
        assert "timings not meaningful" in text and "offline tuner" in text
        await pilot.press("enter")
        await pilot.pause(0.1)
    assert app.return_value == ["rmsnorm", "softmax"]


async def test_one_starter_and_cancel(tmp_path):
    info = {"starters": ["rmsnorm", "softmax"], "agent": "x", "device": CPU_LABEL}
    app = AutokernelApp(tmp_path, mode=FIRST_RUN, first_run_info=info)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("down", "down", "down", "enter")  # demo, all, only rmsnorm, only softmax
        await pilot.pause(0.1)
    assert app.return_value == ["softmax"]
    app = AutokernelApp(tmp_path, mode=FIRST_RUN, first_run_info=info)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("escape")
        await pilot.pause(0.1)
    assert app.return_value is None


def test_agent_label_never_shows_the_key():
    secret = "sk-ant-SECRET-123"
    label = agent_label(AgentSettings(), env={"ANTHROPIC_API_KEY": secret})
    assert label.startswith("Claude") and secret not in label
    assert agent_label(AgentSettings(openai_base_url="http://localhost:8000/v1"), env={}).startswith("local OpenAI")
    assert agent_label(AgentSettings(), env={}).startswith("offline tuner")

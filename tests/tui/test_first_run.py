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
        await pilot.press("down", "down", "down", "down", "enter")  # demo, model, all, only rmsnorm, only softmax
        await pilot.pause(0.1)
    assert app.return_value == ["softmax"]
    app = AutokernelApp(tmp_path, mode=FIRST_RUN, first_run_info=info)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("escape")
        await pilot.pause(0.1)
    assert app.return_value is None


async def test_the_first_run_offers_to_profile_the_users_model(tmp_path):
    # Issue 19, item 5: tasks from the user's own model, not only the starters.
    info = {"starters": ["rmsnorm"], "agent": "x", "device": CPU_LABEL}
    app = AutokernelApp(tmp_path, mode=FIRST_RUN, first_run_info=info)
    async with app.run_test(size=(100, 24)) as pilot:
        await pilot.press("down", "enter")  # "from my model"
        await pilot.pause(0.1)
        from tests.tui.fakes import screen_text
        assert "profile it here" in " ".join(screen_text(app).split())
        await pilot.press("enter")  # nothing typed: nothing happens
        await pilot.press(*"gpt2-tiny", "enter")
        await pilot.pause(0.1)
    assert app.return_value == {"profile": "gpt2-tiny"}
    app = AutokernelApp(tmp_path, mode=FIRST_RUN, first_run_info=info)
    async with app.run_test(size=(100, 24)) as pilot:
        await pilot.press("down", "enter", "escape", "up", "enter")  # back from the prompt to the list
        await pilot.pause(0.1)
    assert app.return_value == ["rmsnorm", "softmax"]


def test_tasks_from_the_users_model_profile_then_init_in_processes_of_their_own(tmp_path, capfd):
    from autokernel_tui.commands.app import tasks_from_model
    from autokernel_tui.ledger import paths

    ws = tmp_path / "ws"
    ws.mkdir()
    assert tasks_from_model(ws, "gpt2-tiny", top=3)
    assert paths.is_workspace(ws) and any((ws / "kernels").glob("*/task.toml"))
    err = capfd.readouterr().err
    assert "$ autokernel-tui profile gpt2-tiny" in err and "--from-profile" in err
    bad = tmp_path / "bad"
    bad.mkdir()
    assert tasks_from_model(bad, "no_such_model_file.py:make") is False
    assert "failed" in capfd.readouterr().err and not paths.is_workspace(bad)


def test_agent_label_never_shows_the_key():
    secret = "sk-ant-SECRET-123"
    label = agent_label(AgentSettings(), env={"ANTHROPIC_API_KEY": secret})
    assert label.startswith("Claude") and secret not in label
    assert agent_label(AgentSettings(openai_base_url="http://localhost:8000/v1"), env={}).startswith("local OpenAI")
    assert agent_label(AgentSettings(), env={}).startswith("offline tuner")

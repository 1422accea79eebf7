"""The app's commands fail with one clear line when the user can fix something."""

from __future__ import annotations

from autokernel_tui.cli import main


def test_review_outside_a_workspace(tmp_path, capsys):
    assert main(["review", str(tmp_path)]) == 2
    assert "is not a workspace" in capsys.readouterr().err


def test_attach_without_a_live_engine(workspace, capsys):
    assert main(["attach", str(workspace)]) == 2
    err = capsys.readouterr().err
    assert "no live engine" in err and "run --headless" in err


def test_a_typo_in_keys_is_one_line(workspace, capsys):
    (workspace / "autokernel.toml").write_text('[keys]\naprove = "y"\n')
    assert main(["review", str(workspace)]) == 2
    assert "unknown action aprove" in capsys.readouterr().err


def test_subcommands_are_registered(capsys):
    try:
        main(["--help"])
    except SystemExit:
        pass
    out = capsys.readouterr().out
    for name in ("tui", "demo", "attach", "review"):
        assert name in out


def test_run_without_headless_honours_runs_flags(tmp_path, monkeypatch):
    """`run` in the app reads --max-*, --policy, --agent, --tag, --task as `run --headless` does."""
    from autokernel_tui.engine.client import LocalClient
    from autokernel_tui.ledger.workspace import init_workspace
    from autokernel_tui.tui import engine_link, launch

    ws = init_workspace(tmp_path / "ws", tasks=["rmsnorm", "softmax"])
    seen = {}

    def open_idle(workspace, settings, **engine_kwargs):  # the real engine, not started: no experiment runs
        seen["kwargs"] = engine_kwargs
        return LocalClient(workspace, settings, start=False, serve=False, **engine_kwargs)

    def record(workspace, settings, client, attached, headless_args=(), resume_command=None):
        seen.update(settings=settings, engine=client.engine, attached=attached, headless_args=list(headless_args))
        client.close()
        return 0

    monkeypatch.setattr(engine_link, "start_in_process", open_idle)
    monkeypatch.setattr(launch, "run_live", record)
    assert main(["run", str(ws), "--policy", "auto", "--agent", "tuner", "--max-experiments", "3",
                 "--max-hours", "0.5", "--max-cost", "2.5", "--tag", "night-7", "--task", "softmax"]) == 0
    run = seen["settings"].run
    assert (run.policy, run.max_experiments, run.max_wall_s, run.max_cost_usd) == ("auto", 3, 1800.0, 2.5)
    assert seen["settings"].agent.kind == "tuner" and seen["attached"] is False
    assert seen["engine"].tag == "night-7" and seen["kwargs"]["tasks"] == ["softmax"]
    # Quitting to headless hands the same flags on to `run --headless`.
    assert seen["headless_args"] == ["--agent", "tuner", "--policy", "auto", "--max-experiments", "3", "--max-hours",
                                     "0.5", "--max-cost", "2.5", "--tag", "night-7", "--task", "softmax"]


def test_run_without_headless_loads_a_plugin_agent_like_headless(tmp_path, capsys):
    """module:factory is a plugin agent on both paths, never an agent kind that fails validation."""
    from autokernel_tui.ledger.workspace import init_workspace

    ws = init_workspace(tmp_path / "ws", tasks=["rmsnorm"])
    assert main(["run", str(ws), "--agent", "no_such_module_here:make"]) == 2
    err = capsys.readouterr().err
    assert "cannot load 'no_such_module_here:make'" in err and "agent.kind" not in err

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

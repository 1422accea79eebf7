"""Fixtures for the TUI tests: a fixture workspace on disk and a fake engine client."""

from __future__ import annotations

import pytest

from tests.tui.fakes import FakeClient, make_workspace


@pytest.fixture(autouse=True)
def _no_user_config(tmp_path, monkeypatch):
    # A developer's ~/.config must not change what the tests see.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def workspace(tmp_path):
    return make_workspace(tmp_path / "ws")


@pytest.fixture
def client():
    return FakeClient()

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # enginefakes


@pytest.fixture
def workspace(tmp_path):
    from autokernel_tui.ledger.workspace import init_workspace

    return init_workspace(tmp_path / "ws", tasks=["rmsnorm"])


@pytest.fixture
def settings():
    from autokernel_tui.config import Settings

    s = Settings()
    s.run.policy = "auto"
    return s

"""The live screen's panes: each renders plain data from LiveState and owns no engine logic."""

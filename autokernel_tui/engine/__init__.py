"""The loop engine. Never imports Textual: the TUI is a client."""

"""The Textual app: a client of the engine, in-process or over the control channel."""

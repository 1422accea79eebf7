"""Confinement of candidate code (stdlib only, both sides of the process boundary).

``bwrap`` builds the bubblewrap command that puts the whole harness worker side
(judge, fork server, contestants) in its own mount view, pid and network
namespaces; ``landlock`` narrows one contestant further (writes only to its own
scratch folder, no TCP, no signals out of its domain); ``environment`` gives
those processes an environment without secrets. ``docs/SECURITY.md`` says what
each layer promises and what happens where one is unavailable.
"""

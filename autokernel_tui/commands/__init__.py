"""Every subcommand of ``autokernel-tui``: its flags and its ``main``, one module each.

The top room of the house: a command may import any other room (tui, engine, ledger, ...);
no other room imports ``commands``. Each module imports only argparse (and ``commands.common``)
at module level and the rest inside ``main``, so ``--help`` is instant and the harness-only
commands (bench, profile) run on a box with just torch and triton.
"""

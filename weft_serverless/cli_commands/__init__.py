"""Subcommands of ``weft`` that outgrew ``weft_serverless/cli.py``.

Each module declares its subcommands with an ``add(subcommands)`` function and imports the
engine, boto3 or the dev server only inside the handlers, so ``weft --help`` stays fast.
"""

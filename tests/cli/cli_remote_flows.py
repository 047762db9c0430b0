"""A workflows module for ``weft activity`` tests: one step finished from outside by token.

``TOKENS`` collects the tokens its activity hands out (the tests run ``weft`` in-process).
"""

from __future__ import annotations

from typing import Any

from weft_serverless import RetryPolicy, current_activity, workflow

TOKENS: list[str] = []


def _remote(_: Any) -> None:
    TOKENS.append(current_activity().complete_async())


def _awaits_remote(ctx: Any, _: Any) -> Any:
    return (yield ctx.run("remote", None, retry=RetryPolicy(max_attempts=1)))


workflows = {
    "awaits_remote": workflow("awaits_remote").activities(remote=_remote).execute(_awaits_remote)
}

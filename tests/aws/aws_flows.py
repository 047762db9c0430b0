"""Small workflows for the Lambda runtime tests; also a ``WEFT_WORKFLOWS_MODULE`` target.

``CALLS`` counts activity executions (so a test can prove nothing ran twice) and ``TOKENS``
collects async-activity tokens; ``reset()`` clears both between tests.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from weft_serverless import (
    Concurrency,
    RetryPolicy,
    UpdateValidationError,
    current_activity,
    workflow,
)

CALLS: Counter[str] = Counter()
TOKENS: list[str] = []
ONCE = RetryPolicy(max_attempts=1)


def reset() -> None:
    CALLS.clear()
    TOKENS.clear()


def _greet(name: Any) -> str:
    CALLS["greet"] += 1
    return f"hello {name}"


def _greeter(ctx: Any, name: Any) -> Any:
    ctx.log.info("greeting %s", name)
    text = yield ctx.run("greet", name)
    return {"greeting": text}


def _approval(ctx: Any, order: Any) -> Any:
    items: list[str] = []
    ctx.on_query("items", lambda _: list(items))

    def add(item: Any) -> int:
        items.append(item)
        return len(items)

    def check(item: Any) -> None:
        if not isinstance(item, str) or not item:
            raise UpdateValidationError([{"message": "item must be a text", "path": ["payload"]}])

    def explode(_: Any) -> None:
        raise ValueError("this update always fails")

    ctx.on_update("add", add, validator=check)
    ctx.on_update("explode", explode)
    decision = yield ctx.wait_for_signal("approve", timeout="1h")
    return {"order": order, "approved": decision, "items": items}


def _napper(ctx: Any, seconds: Any) -> Any:
    yield ctx.sleep(seconds)
    return "rested"


def _quick(x: Any) -> Any:
    CALLS["quick"] += 1
    return x


def _slow(x: Any) -> Any:
    CALLS["slow"] += 1
    return x * 10


def _two_steps(ctx: Any, _: Any) -> Any:
    a = yield ctx.run("quick", 1)
    b = yield ctx.run("slow", 2, timeout=10)
    return [a, b]


def _remote(_: Any) -> None:
    CALLS["remote"] += 1
    TOKENS.append(current_activity().complete_async())


def _awaits_remote(ctx: Any, _: Any) -> Any:
    return (yield ctx.run("remote", None, retry=ONCE))


def _explode(_: Any) -> None:
    CALLS["explode"] += 1
    raise RuntimeError("boom")


def _failing(ctx: Any, _: Any) -> Any:
    return (yield ctx.run("explode", None, retry=ONCE))


def _rich(ctx: Any, _: Any) -> Any:
    import datetime
    import decimal
    import uuid

    yield ctx.sleep(0)
    return {
        "bytes": b"\x00\xff",
        "when": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        "money": decimal.Decimal("1.10"),
        "tags": {"b", "a"},
        "pair": (1, 2),
        "uuid": uuid.UUID(int=1),
        7: "int key",
    }


def _limited(ctx: Any, _: Any) -> Any:
    return (yield ctx.wait_for_signal("go"))


def _release_hold(order: Any) -> None:
    CALLS["release_hold"] += 1


def _guarded(ctx: Any, order: Any) -> Any:
    ctx.on_cancel("release_hold", order)
    return (yield ctx.wait_for_signal("go"))


ONE_PER_ACCOUNT = Concurrency(max=1, key=lambda input: str(input["account"]))

workflows = {
    "limited": workflow("limited", concurrency=ONE_PER_ACCOUNT).execute(_limited),
    "greeter": workflow("greeter").activities(greet=_greet).execute(_greeter),
    "approval": workflow("approval", search_attributes={"customer": str, "amount": float}).execute(
        _approval
    ),
    "napper": workflow("napper").execute(_napper),
    "two_steps": workflow("two_steps").activities(quick=_quick, slow=_slow).execute(_two_steps),
    "awaits_remote": workflow("awaits_remote").activities(remote=_remote).execute(_awaits_remote),
    "failing": workflow("failing").activities(explode=_explode).execute(_failing),
    "rich": workflow("rich").execute(_rich),
    "guarded": workflow("guarded").activities(release_hold=_release_hold).execute(_guarded),
}

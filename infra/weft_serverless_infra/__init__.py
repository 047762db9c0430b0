"""The ``WeftServerless`` CDK construct, kept apart from the runtime package.

Names load on first use, so ``weft_serverless_infra.names`` can be imported (by
``build_asset.py``) without starting the CDK's jsii runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from weft_serverless_infra.alarms import AlarmThresholds
    from weft_serverless_infra.construct import WeftServerless

__all__ = ["AlarmThresholds", "WeftServerless"]


def __getattr__(name: str) -> Any:
    if name == "WeftServerless":
        from weft_serverless_infra.construct import WeftServerless

        return WeftServerless
    if name == "AlarmThresholds":
        from weft_serverless_infra.alarms import AlarmThresholds

        return AlarmThresholds
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""cdk-nag acknowledgements, routed through one function so each carries a reason.

cdk-nag 3 matches an acknowledgement by exact rule id, suffix included, so a wildcard
resource must be spelled the way cdk-nag flattens it; ``wildcard_resource_rule`` does that.
"""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
from constructs import Construct

MIN_REASON_LENGTH = 40


def acknowledge(scope: Construct, rule_id: str, reason: str) -> None:
    """Acknowledge ``rule_id`` for ``scope`` and everything below it.

    Raises:
        ValueError: if the reason is too short to say why the finding is acceptable.
    """
    if len(reason) < MIN_REASON_LENGTH:
        raise ValueError(f"acknowledgement of {rule_id} needs a specific reason, got {reason!r}")
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=rule_id, reason=reason))


def wildcard_resource_rule(scope: Construct, resource: str) -> str:
    """The ``AwsSolutions-IAM5`` id cdk-nag reports for a policy resource with a ``*``."""
    return f"AwsSolutions-IAM5[Resource::{_flatten(cdk.Stack.of(scope).resolve(resource))}]"


def _flatten(node: Any) -> str:
    """Mirror cdk-nag's ``flattenCfnReference`` so the ids agree byte for byte."""
    if node is None:
        return ""
    if isinstance(node, str):
        return node.replace("${", "<").replace("}", ">")
    if "Fn::Join" in node:
        delimiter, items = node["Fn::Join"]
        return str(delimiter).join(_flatten(item) for item in items)
    if "Fn::Sub" in node:
        return _flatten(node["Fn::Sub"])
    if "Fn::GetAtt" in node:
        resource, attribute = node["Fn::GetAtt"]
        return f"<{_flatten(resource)}.{_flatten(attribute)}>"
    if "Fn::ImportValue" in node:
        return _flatten(node["Fn::ImportValue"])
    if "Ref" in node:
        return f"<{_flatten(node['Ref'])}>"
    return json.dumps(node, separators=(",", ":"))

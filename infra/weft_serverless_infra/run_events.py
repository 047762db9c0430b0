"""Run events on EventBridge: the bus, who may publish to it, and an example rule.

Every engine function writes terminal and failure events to the table's outbox when
``WEFT_EVENT_BUS`` is set; only the maintenance function publishes them (ADR 0032), so only
its role gets ``events:PutEvents``, on this one bus. The example rule sends failed and
timed-out runs to the alarm topic (the people who hear of alarms hear of failed runs); other
consumers add their own rules on the same bus. A topic passed in as ``alarm_topic`` must let
``events.amazonaws.com`` publish (and, if encrypted, use its key): CDK can only add that
statement to a topic the construct creates.
"""

from __future__ import annotations

from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from constructs import Construct

from weft_serverless_infra import names

FAILED_RUN_TYPES = ("run.failed", "run.timed-out")


class WeftRunEvents(Construct):
    """The bus run events go to (a new one, or ``bus`` when given, e.g. the default bus).

    Attributes:
        bus: The event bus; ``environment`` holds the variable naming it for the functions.
        failed_runs: The example rule sending failed and timed-out runs to ``notify``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        publisher: iam.IGrantable,
        bus: events.IEventBus | None,
        source: str,
        notify: sns.ITopic,
    ) -> None:
        super().__init__(scope, construct_id)
        self.bus = bus or events.EventBus(self, "Bus", description="weft-serverless run events")
        self.bus.grant_put_events_to(publisher)
        self.environment = {names.EVENT_BUS_ENV: self.bus.event_bus_name}
        self.failed_runs = events.Rule(
            self,
            "FailedRunsRule",
            description="Example: failed and timed-out weft runs, to the alarm topic",
            event_bus=self.bus,
            event_pattern=events.EventPattern(
                source=[source], detail_type=[f"weft {kind}" for kind in FAILED_RUN_TYPES]
            ),
            targets=[targets.SnsTopic(notify)],
        )

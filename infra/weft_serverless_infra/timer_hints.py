"""Timer hints (ADR 0054): a queue of delayed messages and the function that fires them.

Every engine function sends a hint when it arms a timer due within 15 minutes (SQS's
longest delay); the event source mapping hands each hint to the timer worker as soon as its
delay ends (no batching window), so a timer fires within about a second of its due time
instead of at the next maintenance pass. A message the worker keeps failing on (it names no
timer key, or its run keeps raising) moves to the hint dead-letter queue after
``MAX_RECEIVES`` deliveries; the maintenance sweep still fires the timer it named.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from weft_serverless_infra import names
from weft_serverless_infra.functions import WeftFunction, dead_letter_queue

MAX_RECEIVES = 5
WORKER_TIMEOUT = Duration.seconds(60)
BATCH_SIZE = 10


class WeftTimerHints(Construct):
    """The hint queue, its dead-letter queue and the timer worker.

    Attributes:
        queue: Hints, each delayed until its timer is due.
        dead_letter_queue: Hints the worker failed on ``MAX_RECEIVES`` times.
        worker: The timer worker function with its role and log group.
        environment: The variable naming the queue, for every engine function.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: lambda_.Code,
        environment: dict[str, str],
        memory_mb: int,
        log_retention: logs.RetentionDays,
        removal_policy: RemovalPolicy,
        tracing: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = dead_letter_queue(self, removal_policy)
        self.queue = sqs.Queue(
            self,
            "Queue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            # Lambda's advice for an SQS source: six times the function's timeout.
            visibility_timeout=Duration.seconds(WORKER_TIMEOUT.to_seconds() * 6),
            retention_period=Duration.days(1),
            dead_letter_queue=sqs.DeadLetterQueue(
                max_receive_count=MAX_RECEIVES, queue=self.dead_letter_queue
            ),
            removal_policy=removal_policy,
        )
        self.environment = {names.TIMER_HINTS_ENV: self.queue.queue_url}
        self.worker = WeftFunction(
            self,
            "Worker",
            code=code,
            handler=names.TIMERS_HANDLER,
            description="weft-serverless timer worker (fires hinted timers at due)",
            environment={**environment, **self.environment},
            memory_mb=memory_mb,
            timeout=WORKER_TIMEOUT,
            # SQS invokes it through the mapping: failed hints go to the queue's own DLQ.
            dead_letter_queue=None,
            log_retention=log_retention,
            removal_policy=removal_policy,
            tracing=tracing,
        )
        self.worker.function.add_event_source(
            sources.SqsEventSource(
                self.queue,
                batch_size=BATCH_SIZE,
                max_batching_window=Duration.seconds(0),
                report_batch_item_failures=True,
            )
        )

    def grant_send(self, fn: WeftFunction) -> None:
        """Let ``fn`` send hints: ``sqs:SendMessage`` (which authorises SendMessageBatch)
        on this queue only; the queue URL comes from the environment, so nothing else."""
        fn.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[self.queue.queue_arn])
        )

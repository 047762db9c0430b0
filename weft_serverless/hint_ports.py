"""Where timer hints go (ADR 0054): an SQS queue with per-message delays, or, in one process
(``weft dev``), a timer wheel thread that fires each hint at its due time.

A hint's message carries only its timer key; the id and due time are read from the key, and
the worker reads the timer record itself before doing anything. boto3 is imported only when
an ``SqsTimerHints`` without a client first sends.
"""

from __future__ import annotations

import heapq
import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from weft_serverless.engine.process.timer_hints import TimerHint
from weft_serverless.errors import InvalidArgumentError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Key

SQS_MAX_DELAY = 900.0
"""SQS's longest per-message delay (15 minutes): the SQS port's horizon."""


def hint_body(hint: TimerHint) -> str:
    """A hint's message body: its timer key, nothing else."""
    return json.dumps({"p": hint.partition, "s": hint.sort}, separators=(",", ":"))


def hint_from_body(body: str) -> TimerHint:
    """The hint a message body carries; a body that names no timer key is refused."""
    try:
        data = json.loads(body)
        partition, sort = data["p"], data["s"]
        if not (isinstance(partition, str) and isinstance(sort, str)):
            raise TypeError("not strings")
        if not keys.is_timer_partition(partition) or sort.count("#") < 2:
            raise ValueError("not a timer key")
        return TimerHint.of(Key(partition, sort))
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidArgumentError(f"a timer hint message names no timer key: {exc}") from None


class SqsTimerHints:
    """Sends hints to an SQS queue, each delayed until its timer is due (at most 900 s).

    ``client`` a boto3 ``sqs`` client (built on first use when omitted); ``clock`` the time
    the delays are measured from. A batch SQS refuses in part raises, so the engine counts it
    as not sent (the sweep fires those timers).
    """

    horizon = SQS_MAX_DELAY

    def __init__(
        self, queue_url: str, client: Any = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.queue_url = queue_url
        self._client = client
        self._clock = clock
        self._lock = threading.Lock()

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                import boto3

                self._client = boto3.client("sqs")
            return self._client

    def send(self, hints: Sequence[TimerHint]) -> None:
        now = self._clock()
        entries = [
            {
                "Id": str(number),
                "MessageBody": hint_body(hint),
                "DelaySeconds": int(min(SQS_MAX_DELAY, max(0.0, math.floor(hint.due - now)))),
            }
            for number, hint in enumerate(hints)
        ]
        response = self.client().send_message_batch(QueueUrl=self.queue_url, Entries=entries)
        failed = response.get("Failed") or []
        if failed:
            raise ConnectionError(f"SQS refused {len(failed)} of {len(entries)} timer hints")


class LocalTimerHints:
    """A timer wheel in this process: each hint is handed to ``fire`` at its due time.

    ``attach(fire)`` names what fires hints (``engine.fire_timer_hints``); hints sent before
    it, or while the thread is stopped, wait in the wheel. Hints are lost with the process;
    the sweep fires those timers.
    """

    horizon = SQS_MAX_DELAY

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._wheel: list[tuple[float, int, TimerHint]] = []
        self._order = 0
        self._changed = threading.Condition()
        self._fire: Callable[[Sequence[TimerHint]], Any] | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    def send(self, hints: Sequence[TimerHint]) -> None:
        with self._changed:
            for hint in hints:
                self._order += 1
                heapq.heappush(self._wheel, (hint.due, self._order, hint))
            self._changed.notify()

    def attach(self, fire: Callable[[Sequence[TimerHint]], Any]) -> None:
        """Start the wheel's thread, firing due hints through ``fire``."""
        with self._changed:
            self._fire = fire
            self._stopped = False
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="weft-timer-hints", daemon=True
                )
                self._thread.start()

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def pending(self) -> int:
        with self._changed:
            return len(self._wheel)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._stopped:
                    if self._wheel and self._wheel[0][0] <= self._clock():
                        break
                    wait = self._wheel[0][0] - self._clock() if self._wheel else None
                    self._changed.wait(wait)
                if self._stopped:
                    return
                due = self._clock()
                batch = []
                while self._wheel and self._wheel[0][0] <= due:
                    batch.append(heapq.heappop(self._wheel)[2])
                fire = self._fire
            if fire is not None:
                try:
                    fire(batch)
                except Exception:  # the sweep fires what a failed hint named
                    from weft_serverless.engine.process.telemetry import logger

                    logger.exception("timer hints could not fire; the sweep will")

"""Schedules (issue 15): cron and interval schedules that start runs, fired by the
maintenance pass through a ``schedule`` timer, so an idle schedule costs no reads.

``spec``: the checked definition and its fire times (cronsim, zoneinfo; ADR 0024);
``record``: the stored record; ``firing``: one fire = one atomic batch; ``manage``: changes
from outside and the description; ``handle``: ``ScheduleHandle``.

Kept free of imports: ``transitions`` and ``maintenance`` import single modules of it.
"""

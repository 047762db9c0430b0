"""The one place that spells storage keys, and every shard count.

Layout (DESIGN.md section 4):

* ``wf#{id}`` holds everything of one workflow (state, op log, pending facts, attempts,
  buffered signals, child results, owner epoch and holder), so resuming is one range read.
* ``timers#{shard}``, ``status#{status}#{shard}`` are hash-sharded global indexes written in the
  same atomic batch as the change they index; they are read shard by shard. Each store has
  its own counts (``ShardCounts``, in its ``meta/shards`` marker, ADR 0050).
* ``sa#{name}#{shard}`` and ``tag#{shard}`` index runs by search attribute value and tag
  (``{value}#{created}#{id}``), written in the batch that changes them (ADR 0030).
* ``idem#{key}`` maps an idempotency key to a workflow id; ``meta`` holds store-wide records.
* ``schedules`` holds one record per schedule, sorted by id.

Untrusted parts (ids, names) are percent-encoded, so they are ASCII and can never contain the
``#`` separator. Times are epoch milliseconds zero-padded to 16 digits so they sort as text.
Counters (steps, branches, attempts, update sequences) go through ``counter``, whose text
order is number order for every value.
"""

# Every key lives in one of four modules, by where it sits, and the shard counts in a fifth;
# callers use ``keys.<name>``.
from weft_serverless.storage.keys.encoding import *  # noqa: F403
from weft_serverless.storage.keys.indexes import *  # noqa: F403
from weft_serverless.storage.keys.runs import *  # noqa: F403
from weft_serverless.storage.keys.shards import *  # noqa: F403
from weft_serverless.storage.keys.store import *  # noqa: F403

"""The pure core: the contract in executable form.

Synchronous, no I/O, no clock reads, no trio. It holds the records (options, job row,
enqueue input), the validation of every argument, enqueue resolution, the backoff curve,
and every state transition as a function of (row, now, inputs), with the claim order and
the retention rules that every engine follows (the in-memory engine's index calls them;
the SQL's order and retention are checked against them by the tests). The in-memory
engine's index itself lives with that engine, in ``_engines._memory``.
"""

# D26.1 filtered listings
from ._filters import HEADER_SCAN_ROWS as HEADER_SCAN_ROWS
from ._filters import JobPage as JobPage

# Q17 periodic jobs
# Q18.7-Q18.11 queue limits
from ._limits import NO_LIMITS as NO_LIMITS
from ._limits import UNSET as UNSET
from ._limits import QueueLimits as QueueLimits
from ._limits import Throttled as Throttled
from ._periodic import Periodic as Periodic
from ._periodic import PeriodicFired as PeriodicFired
from ._periodic import PeriodicInfo as PeriodicInfo
from ._periodic import PeriodicTick as PeriodicTick
from ._records import DEFAULT_OPTS as DEFAULT_OPTS
from ._records import FINAL_STATES as FINAL_STATES
from ._records import NO_HEADERS as NO_HEADERS
from ._records import Enqueued as Enqueued
from ._records import EnqueueSpec as EnqueueSpec
from ._records import Headers as Headers
from ._records import Job as Job
from ._records import JobState as JobState
from ._records import QueueOpts as QueueOpts
from ._records import QueueStats as QueueStats
from ._records import StoreStats as StoreStats
from ._records import SweepResult as SweepResult
from ._records import enqueue_specs as enqueue_specs
from ._transitions import CLAIM_ORDER as CLAIM_ORDER
from ._transitions import EXPIRED as EXPIRED
from ._transitions import FAILED as FAILED
from ._transitions import MAX_ATTEMPTS_EXCEEDED as MAX_ATTEMPTS_EXCEEDED
from ._transitions import backoff_delay_s as backoff_delay_s
from ._transitions import claim_order_key as claim_order_key
from ._transitions import claimed as claimed
from ._transitions import completed as completed
from ._transitions import dead as dead
from ._transitions import enqueued_job as enqueued_job
from ._transitions import failed as failed
from ._transitions import heartbeaten as heartbeaten
from ._transitions import is_ackable as is_ackable
from ._transitions import is_claimable as is_claimable
from ._transitions import is_completed_purgeable as is_completed_purgeable
from ._transitions import is_dead_older_than as is_dead_older_than
from ._transitions import is_expired as is_expired
from ._transitions import is_purgeable as is_purgeable
from ._transitions import is_reclaimable as is_reclaimable
from ._transitions import is_valid_claim as is_valid_claim
from ._transitions import kept_cancelled as kept_cancelled
from ._transitions import needs_pre_claim_sweep as needs_pre_claim_sweep
from ._transitions import released as released
from ._transitions import requeued as requeued
from ._transitions import retried as retried

# Q21 the worker registry
from ._workers import WorkerInfo as WorkerInfo
from ._workers import WorkerRegistration as WorkerRegistration

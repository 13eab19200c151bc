"""The DBOS task engine: each child run is a DBOS workflow on its model's DBOS queue.

How it works — queues and fair shares, durable steps, grandchildren, replayed transcripts,
follow-ups, orphans, versions, crashes, leaving, and the hand-over between DBOS's loop and the
scheduler's — is written out in docs/architecture.md, "The DBOS engine in detail".

One module per seam: :mod:`._launch` (one DBOS per process, its queues), :mod:`._shares`
(each executor's share of a queue's limit), :mod:`._workflow` (the child workflow and the
hand-over of its run), :mod:`._steps` (model requests and tool calls as steps),
:mod:`._follow` (children other processes run, orphans), :mod:`._recovery` (heartbeats, the
reaper, leaving) and :mod:`._engine` (:class:`DBOSEngine`, which joins them).

This package imports ``dbos``: it is imported only when the engine is chosen.
"""

from kernos.tasks._dbos._engine import DBOSEngine
from kernos.tasks._dbos._follow import (
    ORPHAN_CHECK_SECONDS,
    ORPHAN_GRACE_SECONDS,
    ORPHAN_MISSING_SECONDS,
    stranded,
)
from kernos.tasks._dbos._launch import (
    APP_VERSION,
    _Launch,
    queue_name,
    system_database_url,
    workflow_id,
)
from kernos.tasks._dbos._recovery import MAX_RESUMES, resume_left
from kernos.tasks._dbos._shares import fair_share, queue_shares
from kernos.tasks._dbos._steps import DurableLean, DurableModel, _record_reply, _reply_record
from kernos.tasks._dbos._workflow import child_workflow
from kernos.tasks._store import executor_id

__all__ = [
    "APP_VERSION",
    "MAX_RESUMES",
    "ORPHAN_CHECK_SECONDS",
    "ORPHAN_GRACE_SECONDS",
    "ORPHAN_MISSING_SECONDS",
    "DBOSEngine",
    "DurableLean",
    "DurableModel",
    "_Launch",
    "_record_reply",
    "_reply_record",
    "child_workflow",
    "executor_id",
    "fair_share",
    "queue_name",
    "queue_shares",
    "resume_left",
    "stranded",
    "system_database_url",
    "workflow_id",
]

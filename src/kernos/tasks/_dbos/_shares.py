"""Fair shares: each executor's part of a queue's global limit (``[tasks] spread``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from dbos import DBOS

from kernos.tasks._dbos._base import EngineBase
from kernos.tasks._dbos._launch import QUEUE_PREFIX

log = logging.getLogger("kernos.tasks")


def fair_share(limit: int | None, servers: int) -> int | None:
    """Each executor's share of a queue's global ``limit`` when ``servers`` live executors serve
    it: the limit divided among them, rounded up (the shares add up to at least the limit, and
    the global limit still holds across them); ``None``, no cap of its own, for an unbounded
    queue or a lone executor, which may use the whole limit."""
    if limit is None or limit <= 0 or servers <= 1:
        return None
    return -(-limit // servers)


def queue_shares(
    limits: dict[str, int | None], serving: Sequence[Sequence[str] | None]
) -> dict[str, int | None]:
    """:func:`fair_share` of each queue (name → global limit), given the queues each live
    executor serves (``None``: every queue)."""
    return {
        name: fair_share(limit, sum(1 for queues in serving if queues is None or name in queues))
        for name, limit in limits.items()
    }


def _set_shares(serving: Sequence[Sequence[str] | None], spread: bool) -> dict[str, int | None]:
    """Write each kernos queue's per-executor limit (DBOS's ``worker_concurrency``, kept in
    the queue's row, which every executor's queue thread reads before each poll): its share
    among ``serving``, or none (``spread`` off). The queues whose limit changed."""
    changed: dict[str, int | None] = {}
    for queue in DBOS.list_queues():
        if not queue.name.startswith(QUEUE_PREFIX):
            continue
        try:
            limit = queue.global_concurrency
            want = queue_shares({queue.name: limit}, serving)[queue.name] if spread else None
            if queue.worker_concurrency != want:
                queue.set_worker_concurrency(want)
                changed[queue.name] = want
        except Exception as exc:  # its limit changed meanwhile, say: the next beat sets it
            log.info("tasks: could not set the share of queue %s: %s", queue.name, exc)
    return changed


class _Sharing(EngineBase):
    """The engine's part in the shares: computed for the launch, and every beat."""

    def _shares(self, queues: dict[str, int | None]) -> dict[str, int | None]:
        """Each of ``queues``' shares (:func:`queue_shares`) among the live executors, with this
        one if it executes (it has not beaten yet), for registering them: the queue's row is
        every executor's, so a process that registered its queues without them (``kernos
        run`` too, executing or not) would lift every executor's share, and a joining
        executor's share holds from its first poll."""
        if not self.spread:
            return {}
        try:
            serving = self.scheduler.store.serving(self.heartbeat * 3)
        except Exception as exc:  # the reaper's next beat sets them
            log.info("tasks: could not read the executors to share the queues: %s", exc)
            return {}
        serving.pop(self.executor, None)
        mine = [self.listen] if self.listen != [] else []
        return queue_shares(queues, [*serving.values(), *mine])

    async def _spread(self) -> None:
        """Split each queue's limit among the live executors that serve it (``[tasks]
        spread``): recomputed every beat by the reaper, so a share grows once an executor
        retired or went silent for three beats, and shrinks as one joins."""
        serving = await asyncio.to_thread(self.scheduler.store.serving, self.heartbeat * 3)
        changed = await asyncio.to_thread(_set_shares, list(serving.values()), self.spread)
        if changed:
            servers = len(serving)
            log.info("tasks: per-executor limits among %d executor(s): %s", servers, changed)

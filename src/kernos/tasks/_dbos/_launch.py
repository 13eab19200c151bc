"""One DBOS per process: its launch, the kernos queues registered before it, and what a
workflow, a queue and the system database are called."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Sequence
from typing import Any, ClassVar

from dbos import DBOS, DBOSClient, DBOSConfig, DBOSPortableJSONSerializer

from kernos.runtime import is_postgres_url
from kernos.tasks._dbos._base import EngineBase
from kernos.tasks._engine import model_limit
from kernos.tasks._store import executor_id

log = logging.getLogger("kernos.tasks")

APP_NAME = "kernos"
#: pinned: DBOS recovers only workflows of the running version; bump it only when the steps of
#: :func:`child_workflow` change in a way old records cannot replay
APP_VERSION = "kernos-tasks-3"  # 2: tool calls became steps; 3: so did a child's task tools
QUEUE_PREFIX = "kernos."
#: how often an executor polls its queues by default (``[tasks] poll``)
POLL_SECONDS = 0.1


def queue_name(model_name: str) -> str:
    return QUEUE_PREFIX + model_name


def workflow_id(task_id: str, epoch: int) -> str:
    """The workflow of a task's run: the task id itself for its first run."""
    return task_id if epoch <= 1 else f"{task_id}.{epoch}"


def system_database_url(home: Any, store_url: str | None) -> str:
    """Postgres store: DBOS's tables go in the same database; SQLite: ``HOME/dbos.sqlite``."""
    if store_url and is_postgres_url(store_url):
        return store_url
    return f"sqlite:///{home}/dbos.sqlite"


# -- one DBOS per process ------------------------------------------------------------------------
class _Launch:
    """DBOS is a process-wide singleton: launched by the first engine, destroyed by the last."""

    lock = threading.Lock()
    url: str | None = None
    users = 0
    queues: ClassVar[dict[str, int | None]] = {}
    #: the polling interval this process registers its queues with (the first engine's)
    poll = POLL_SECONDS

    @classmethod
    def acquire(
        cls,
        url: str,
        listen: Sequence[str] | None,
        queues: dict[str, int | None],
        shares: dict[str, int | None],
        poll: float = POLL_SECONDS,
    ) -> None:
        """Launch DBOS on ``url`` (or join the running one) and register ``queues`` (name →
        global limit) with each executor's ``shares`` of them (see :func:`queue_shares`),
        polled every ``poll`` seconds (the launching engine's)."""
        with cls.lock:
            if cls.url is not None and cls.url != url:
                # DBOS is one per process: a runtime on another store takes it over (only
                # programs and tests that open several homes in one process get here)
                log.warning("tasks: DBOS moves from %s to %s in this process", cls.url, url)
                cls._stop()
            if cls.url is None:
                cls.poll = poll
                # a process that dequeues nothing (a ``kernos run`` with ``run_executes =
                # false``) registers them once launched, on DBOS's own pool: its queue manager
                # polls none of them, and a client of their own cost it ~0.1 s before DBOS was
                # ready (a connection pool opened and closed)
                early = listen is None or bool(listen)
                if early:
                    _register_queues(url, queues, shares, poll)
                config: DBOSConfig = {
                    "name": APP_NAME,
                    "system_database_url": url,
                    "application_version": APP_VERSION,
                    "executor_id": executor_id(),
                    "serializer": DBOSPortableJSONSerializer(),
                    "log_level": "WARNING",
                    "notification_listener_polling_interval_sec": POLL_SECONDS,
                }
                DBOS(config=config)
                if listen is not None:
                    DBOS.listen_queues(list(listen))
                DBOS.launch()
                cls.url = url
                cls.queues = dict(queues) if early else {}
            cls.users += 1
        try:
            for name, limit in queues.items():
                cls.queue(name, limit, shares.get(name))
        except BaseException:  # this engine does not start: DBOS is not left launched for it
            cls.release()
            raise

    @classmethod
    def release(cls) -> None:
        with cls.lock:
            cls.users -= 1
            if cls.users <= 0 and cls.url is not None:
                cls._stop()

    @classmethod
    def _stop(cls) -> None:
        DBOS.destroy(destroy_registry=False)
        cls.url, cls.users, cls.queues = None, 0, {}

    @classmethod
    def registered(cls, name: str, limit: int | None) -> bool:
        with cls.lock:
            return name in cls.queues and cls.queues[name] == limit

    @classmethod
    def queue(cls, name: str, limit: int | None, share: int | None = None) -> None:
        """Register (or update) one queue after the launch: one new to the database is polled
        from DBOS's queue manager's next scan for new queues (within a second)."""
        with cls.lock:
            if name in cls.queues and cls.queues[name] == limit:
                return
            cls.queues[name] = limit
        DBOS.register_queue(
            name, global_concurrency=limit, worker_concurrency=share,
            polling_interval_sec=cls.poll, on_conflict="always_update",
        )  # fmt: skip


def _register_queues(
    url: str, queues: dict[str, int | None], shares: dict[str, int | None], poll: float
) -> None:
    """Put ``queues`` in the system database before DBOS launches: its queue manager polls the
    queues it finds at launch from the start, and looks for new ones once a second (a first
    run's children would wait for that scan). DBOS registers queues only once launched, so a
    short-lived :class:`~dbos.DBOSClient` does it; on a database without DBOS's tables yet (a
    first run) after ``DBOS.migrate`` made them, which the launch would do anyway."""
    if not queues:
        return
    try:
        _register_with_client(url, queues, shares, poll)
    except Exception:  # no tables yet (or the database is unreachable: the migration says so)
        DBOS.migrate(url)
        _register_with_client(url, queues, shares, poll)


def _register_with_client(
    url: str, queues: dict[str, int | None], shares: dict[str, int | None], poll: float
) -> None:
    client = DBOSClient(
        system_database_url=url, application_name=APP_NAME, system_database_pool_size=1,
        serializer=DBOSPortableJSONSerializer(), retry_connection_errors=False,
    )  # fmt: skip
    try:
        for name, limit in queues.items():
            client.register_queue(
                name, global_concurrency=limit, worker_concurrency=shares.get(name),
                polling_interval_sec=poll, on_conflict="always_update",
            )  # fmt: skip
    finally:
        client.destroy()


def _fresh_default_executor() -> None:
    """DBOS makes its thread pool the running loop's default executor (``asyncio.to_thread``);
    once DBOS is destroyed that pool is shut down, so a loop that goes on (a later manager in
    the same ``asyncio.run``) gets a fresh pool of its own."""
    if _Launch.url is None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(thread_name_prefix="asyncio")
        )


class _Launching(EngineBase):
    """The engine's part in the launch: the queues it registers."""

    def _queues(self) -> dict[str, int | None]:
        """Every model this config names, and the one children without a model of their own
        run on (``--model``, ``KERNOS_MODEL``), with its limit (``None``: unbounded)."""
        from kernos.runtime import NoModelError

        config = self.scheduler.config
        names = set(config.models) | {config.default_model}
        names |= {c.model for c in config.categories.values()}
        names |= {a.model for a in config.agents.values()}
        with contextlib.suppress(NoModelError):
            names.add(self.scheduler.runtime.model_name(""))
        return {
            queue_name(n): model_limit(config, n) or None for n in sorted(x for x in names if x)
        }

    def _acquire(self) -> None:
        try:
            queues = self._queues()
            poll = self.scheduler.config.tasks.poll
            _Launch.acquire(self.url, self.listen, queues, self._shares(queues), poll)
        except BaseException as exc:
            self._boot_error = exc

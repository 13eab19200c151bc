"""Resource subscriptions of the MCP server: each connection's tasks, watched for changes."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kernos._serve_resources import (
    TASK_MIME,
    TASK_TEMPLATE,
    task_id_of,
    task_text,
    task_title,
    task_uri,
    unknown_task_message,
)
from kernos.runtime import (
    Runtime,
    Session,
)

if TYPE_CHECKING:
    import mcp_types
    from mcp.server.connection import Connection
    from mcp.server.context import ServerRequestContext
    from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler

    from kernos.tasks import TaskStore
from kernos._serve_http import _connection, _shown

log = logging.getLogger("kernos.serve")

#: seconds between looks at the subscribed tasks of a connection (their row and newest event)
WATCH_INTERVAL = 0.2


@dataclasses.dataclass
class _Watched:
    """Resource subscriptions: each URI with what its task looked like when last seen, how to
    say it changed (``notifications/resources/updated`` on a 2025-11-25 connection, an event of
    a 2026-07-28 ``subscriptions/listen`` stream) and the task that watches."""

    notify: Callable[[str], Awaitable[None]]
    uris: dict[str, tuple[Any, ...]]
    task: asyncio.Task[None] | None = None


class _Subscriptions:
    """Resources and their subscriptions (a part of :class:`kernos._serve.KernosMcpServer`)."""

    runtime: Runtime
    _bus: InMemorySubscriptionBus
    _listen: ListenHandler
    _task_store: TaskStore | None
    _watched: dict[str, _Watched]

    if TYPE_CHECKING:

        async def session_for(self, key: str, connection: Connection | None = None) -> Session: ...
        def _key(self, ctx: ServerRequestContext[Any, Any]) -> tuple[str, Connection | None]: ...

    @property
    def task_store(self) -> TaskStore:
        """The task records, in the runtime's store."""
        if self._task_store is None:
            from kernos.tasks import TaskStore

            self._task_store = TaskStore(self.runtime.store)
        return self._task_store

    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListResourcesResult:
        import mcp_types

        session = await self.session_for(*self._key(ctx))
        return mcp_types.ListResourcesResult(
            resources=[
                mcp_types.Resource(
                    uri=task_uri(row["id"]),
                    name=row["id"],
                    title=task_title(row),
                    description=row.get("summary") or row.get("label") or None,
                    mime_type=TASK_MIME,
                )
                for row in self.task_store.children(session.session_id)
            ]
        )

    async def _list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListResourceTemplatesResult:
        import mcp_types

        return mcp_types.ListResourceTemplatesResult(
            resource_templates=[
                mcp_types.ResourceTemplate(
                    uri_template=TASK_TEMPLATE,
                    name="task",
                    title="A kernos task of this connection",
                    description="The task's status and transcript (what `kernos tasks show` "
                    "and `kernos tasks output` print).",
                    mime_type=TASK_MIME,
                )
            ]
        )

    def _own_task(self, session: Session, uri: str) -> dict[str, Any]:
        """The row of the task ``uri`` names, when it is a task of ``session``.

        Raises:
            MCPError: ``INVALID_PARAMS``, the URI names no task of this connection.
        """
        from mcp.shared.exceptions import MCPError
        from mcp_types import INVALID_PARAMS

        task_id = task_id_of(uri)
        row = self.task_store.get(task_id) if task_id is not None else None
        if row is None or row["parent_session"] != session.session_id:
            raise MCPError(INVALID_PARAMS, unknown_task_message(uri), {"uri": uri})
        return row

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.ReadResourceRequestParams
    ) -> mcp_types.ReadResourceResult:
        import mcp_types

        session = await self.session_for(*self._key(ctx))
        row = self._own_task(session, params.uri)
        text = task_text(row, self.task_store.events(row["id"]))
        content = mcp_types.TextResourceContents(uri=params.uri, text=text, mime_type=TASK_MIME)
        return mcp_types.ReadResourceResult(contents=[content])

    async def _subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.SubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        import mcp_types

        key, _ = self._key(ctx)
        session = await self.session_for(*self._key(ctx))
        row = self._own_task(session, params.uri)
        watched = self._watched.get(key)
        if watched is None:
            notify = _connection(ctx).send_resource_updated
            watched = self._watched[key] = _Watched(notify, {})
        watched.uris[params.uri] = self._looks(row)
        if watched.task is None or watched.task.done():
            watched.task = asyncio.get_running_loop().create_task(
                self._watch(watched), name=f"kernos-mcp-watch-{_shown(key)}"
            )
        return mcp_types.EmptyResult()

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.UnsubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        import mcp_types

        key, _ = self._key(ctx)
        watched = self._watched.get(key)
        if watched is not None:
            watched.uris.pop(params.uri, None)
            if not watched.uris:
                self._unwatch(key)
        return mcp_types.EmptyResult()

    def _looks(self, row: dict[str, Any] | None) -> tuple[Any, ...]:
        """What a task looks like to its readers: its row's last change and newest event."""
        if row is None:
            return ()
        return (row["status"], row["updated_at"], self.task_store.last_seq(row["id"]))

    async def _watch(self, watched: _Watched) -> None:
        """Send ``notifications/resources/updated`` for each subscribed task that changed, until
        the connection's session closes or nothing is subscribed."""
        while watched.uris:
            await asyncio.sleep(WATCH_INTERVAL)
            for uri, seen in list(watched.uris.items()):
                task_id = task_id_of(uri)
                now = self._looks(self.task_store.get(task_id) if task_id else None)
                if now == seen or uri not in watched.uris:
                    continue
                watched.uris[uri] = now
                try:
                    await watched.notify(uri)
                except Exception as exc:  # the host went away: its session closes on its own
                    log.info("mcp: resource update for %s not delivered: %s", uri, exc)
                    return

    async def _subscriptions_listen(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: mcp_types.SubscriptionsListenRequestParams,
    ) -> mcp_types.SubscriptionsListenResult:
        """A 2026-07-28 ``subscriptions/listen`` stream (the SDK's handler): while it is open,
        each of its resource URIs that names a task of this session is watched, and a change is
        an event on it."""
        from mcp.server.subscriptions import ResourceUpdated
        from mcp.shared.exceptions import MCPError

        async def publish(uri: str) -> None:
            await self._bus.publish(ResourceUpdated(uri=uri))

        session = await self.session_for(*self._key(ctx))
        watched = _Watched(publish, {})
        for uri in params.notifications.resource_subscriptions or ():
            with contextlib.suppress(MCPError):  # another's task, or none: never fires
                watched.uris[uri] = self._looks(self._own_task(session, uri))
        if watched.uris:
            watched.task = asyncio.get_running_loop().create_task(self._watch(watched))
        try:
            return await self._listen(ctx, params)
        finally:
            if watched.task is not None:
                watched.task.cancel()

    def _unwatch(self, key: str) -> None:
        watched = self._watched.pop(key, None)
        if watched is not None and watched.task is not None:
            watched.task.cancel()

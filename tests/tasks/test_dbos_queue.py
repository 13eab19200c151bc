"""The DBOS engine queues a child only once its task row is committed: a worker handed the
workflow rebuilds the child from that row, and one not committed yet left the child ``running``
forever with nobody running it (seen in the 200-children benchmark on a loaded machine)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests import _wait as wait
from tests._stores import other_query, writer_lock_held

from kernos.runtime import Runtime, load_config
from kernos.testing import FakeOpenAIServer


async def test_a_child_is_queued_only_once_its_row_is_committed(
    project: Path, server: FakeOpenAIServer
) -> None:
    from dbos import DBOS

    from kernos.tasks import TaskManager

    with (project / "kernos.toml").open("a", encoding="utf-8") as config:
        config.write('engine = "dbos"\nrun_executes = false\n')  # only workers run children
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    store = str(project / ".kernos" / "kernos.db")
    try:
        await manager.engine.ready()  # type: ignore[attr-defined]
        session = runtime.session("main", record_turns=False)
        session.add_tools(manager.tools_for(session))
        resolution = manager.resolve({"prompt": "Survey.", "subagent_type": "explore"}, session)
        with writer_lock_held(store):  # another process holds the write lock: no commit yet
            (record,) = manager.spawn(session, resolution, background=True)
            # a "nothing happens" check, ordering no events (it ends early on a failure): the
            # engine had every chance to queue it; no event says it tried
            for _ in range(40):
                await asyncio.sleep(0.05)
                if await DBOS.get_workflow_status_async(record.id) is not None:
                    break
            assert await DBOS.get_workflow_status_async(record.id) is None
            assert other_query(store, "SELECT id FROM tasks WHERE id = ?", (record.id,)) == []
        # the lock is free
        await wait.until(lambda: DBOS.get_workflow_status_async(record.id), "the child queued", 60)
        assert other_query(store, "SELECT id FROM tasks WHERE id = ?", (record.id,)) == [
            (record.id,)
        ]
    finally:
        await manager.aclose(wait=False)  # left to the workers (there are none)
        runtime.close()

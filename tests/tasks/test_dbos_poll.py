"""``[tasks] poll``: how often executors poll a model's DBOS queue, a trade between
how soon a queued child starts and what every idle executor spends polling. The interval is in
the queue's row, which every executor's DBOS reads; a process registers it with its queues."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_dbos import use_dbos

from kernos.runtime import Runtime, load_config
from kernos.tasks import TaskManager
from kernos.testing import FakeOpenAIServer

QUEUE = "kernos.openai-chat:test"


@pytest.mark.parametrize("run_executes", ["true", "false"])  # registered before / after launch
@pytest.mark.parametrize(("poll", "expected"), [(None, 0.1), ("0.5", 0.5)])
async def test_a_process_registers_its_queues_with_the_configured_poll_interval(
    project: Path, server: FakeOpenAIServer, run_executes: str, poll: str | None, expected: float
) -> None:
    from dbos import DBOS

    options: dict[str, Any] = {"run_executes": run_executes}
    if poll is not None:
        options["poll"] = poll
    use_dbos(project, **options)
    runtime = Runtime(load_config(cwd=project))
    manager = TaskManager(runtime)
    try:
        await manager.engine.ready("openai-chat:test")  # type: ignore[attr-defined]
        queue = await DBOS.retrieve_queue_async(QUEUE)
        assert queue is not None
        assert await queue.get_polling_interval_sec_async() == expected
    finally:
        await manager.aclose(wait=False)
        runtime.close()

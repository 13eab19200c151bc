"""Compaction end to end, through the CLI and the fake model server playing both the working
model and the compressor (runtime/_session/_compacting.py, compress/_compact.py)."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path
from typing import Any

from kernos.testing import FakeOpenAIServer, text, tool_call
from tests import _cli
from tests.cli.test_run import kernos

COMPACTOR = "Compacting an agent's session"
SUMMARY = "I read a.txt and b.txt for the user; both list words. Next: read c.txt."
LOSS = {"content": "the words of a.txt and b.txt", "reason": "they can be read again"}


def compactor(request: dict[str, Any]) -> bool:
    first = request["messages"][0]
    return first["role"] == "system" and COMPACTOR in str(first["content"])


def worker(request: dict[str, Any]) -> bool:
    return not compactor(request)


def words(seed: int, count: int = 400) -> str:
    pick = random.Random(seed)
    said = [
        "".join(pick.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(pick.randint(3, 9)))
        for _ in range(count)
    ]
    return "\n".join(" ".join(said[i : i + 10]) for i in range(0, count, 10))


def project(tmp_path: Path, *, rounds_ok: bool = True) -> None:
    (tmp_path / "kernos.toml").write_text(
        '[models.small]\nmodel = "openai-chat:x"\ncontext_window = 3500\n\n'
        "[tasks]\nkeep_turns = 1\n\n"
        '[agents.main]\ntools = ["read_file"]\n'
    )
    for seed, name in enumerate(("a.txt", "b.txt", "c.txt")):
        (tmp_path / name).write_text(f"FILE {name}\n" + words(seed) + "\n")


def reader_project(tmp_path: Path, reader: str = "") -> None:
    """:func:`project` whose main agent delegates to a ``reader`` agent (``reader``: more of its
    table)."""
    project(tmp_path)
    toml = tmp_path / "kernos.toml"
    toml.write_text(
        toml.read_text().replace('[agents.main]\ntools = ["read_file"]\n', "")
        + '\n[agents.reader]\ndescription = "Reads files"\ntools = ["read_file"]\n'
        + reader
    )


def child(request: dict[str, Any]) -> bool:
    """A request of the reader child (its task says ``TASK: read``)."""
    prompts = [m for m in request["messages"] if m["role"] == "user"]
    return worker(request) and "TASK: read" in str(prompts[0]["content"])


def parent(request: dict[str, Any]) -> bool:
    return worker(request) and not child(request)


def child_reads() -> tuple[Any, ...]:
    """The reader child reads a.txt, b.txt and c.txt, one per answer."""
    return tuple(
        tool_call("read_file", {"path": name}, when=child) for name in ("a.txt", "b.txt", "c.txt")
    )


def sent_texts(request: dict[str, Any]) -> str:
    return json.dumps(request["messages"], ensure_ascii=False)


def test_a_session_that_crosses_the_threshold_is_sent_the_summary(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    project(tmp_path)
    server.script(
        tool_call("read_file", {"path": "a.txt"}, when=worker),
        tool_call("read_file", {"path": "b.txt"}, when=worker),
        tool_call("read_file", {"path": "c.txt"}, when=worker),
        text("All three read.", when=worker),
        tool_call("rewrite", {"text": SUMMARY, "losses": [LOSS]}, when=compactor),
        text("Draft submitted.", when=compactor),
        tool_call("approve", {"verdict": "keeps the task and what is next"}, when=compactor),
    )
    run = kernos("run", "read a, b and c", "-m", "small", "--json", cwd=tmp_path, env=server.env())
    assert run.returncode == 0, run.stderr
    session_id = json.loads(run.stdout)["session_id"]
    server.assert_all_consumed()
    work = [r for r in server.requests if worker(r)]
    last = sent_texts(work[-1])
    assert "summary of turns 1–2" in last and SUMMARY in last
    assert "the words of a.txt and b.txt" in last  # the declared loss is named to the model
    assert "FILE a.txt" not in last and "FILE b.txt" not in last  # the old turns are not sent
    assert "FILE c.txt" in last  # the kept turn is
    first, summary = work[-1]["messages"][:2]
    assert first == {"role": "user", "content": "read a, b and c"}  # the head is kept
    assert summary["role"] == "user" and SUMMARY in summary["content"]
    # the store still has every original turn
    turns = (
        sqlite3.connect(tmp_path / ".kernos" / "kernos.db")
        .execute(
            "SELECT tool_results FROM turns WHERE session_id = ? AND role = 'tool'", (session_id,)
        )
        .fetchall()
    )
    assert len(turns) == 3 and "FILE a.txt" in turns[0][0]
    # the summary's requests are counted apart
    usage = json.loads(kernos("usage", "--by", "agent", "--json", cwd=tmp_path).stdout)
    requests = {g["agent"]: g["requests"] for g in usage["groups"]}
    assert requests == {"main": 4, "compact": 3}


def last_is(role: str) -> Any:
    def check(request: dict[str, Any]) -> bool:
        return compactor(request) and request["messages"][-1]["role"] == role

    check.__name__ = f"compactor_after_{role}"
    return check


def test_a_compressor_that_never_approves_stops_the_session_context_exhausted(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    project(tmp_path)
    server.script(
        tool_call("read_file", {"path": "a.txt"}, when=worker),
        tool_call("read_file", {"path": "b.txt"}, when=worker),
        tool_call("read_file", {"path": "c.txt"}, when=worker),
        text("never sent", when=worker),
        tool_call("rewrite", {"text": SUMMARY, "losses": []}, when=last_is("user"), repeat=True),
        text("Rewritten.", when=last_is("tool"), repeat=True),
    )
    run = kernos("run", "read a, b and c", "-m", "small", "--json", cwd=tmp_path, env=server.env())
    assert run.returncode == 1
    error = json.loads(run.stdout)["error"]
    assert error.startswith("the run failed: context_exhausted: ")
    assert "compacting turns 1–2" in error and "unapproved after 4 draft(s)" in error
    assert len([r for r in server.requests if worker(r)]) == 3  # the 4th request never went out
    session_id = json.loads(run.stdout)["session_id"]
    (row,) = (
        sqlite3.connect(tmp_path / ".kernos" / "kernos.db")
        .execute(
            "SELECT status, drafts, summary FROM compactions WHERE session_id = ?", (session_id,)
        )
        .fetchall()
    )
    assert row == ("unapproved", 4, None)


def test_a_child_compacts_and_its_parent_hears_it(server: FakeOpenAIServer, tmp_path: Path) -> None:
    reader_project(tmp_path, 'model = "small"\n')

    server.script(
        tool_call("task", {"prompt": "TASK: read a, b, c", "subagent_type": "reader"}, when=parent),
        *child_reads(),
        text("child done", when=child),
        text("Parent done.", when=parent),
        tool_call("rewrite", {"text": SUMMARY, "losses": [LOSS]}, when=compactor),
        text("Draft submitted.", when=compactor),
        tool_call("approve", {"verdict": "keeps the task and what is next"}, when=compactor),
    )
    run = kernos("run", "delegate", "-m", "small", "--json", cwd=tmp_path, env=server.env())
    assert run.returncode == 0, run.stderr
    server.assert_all_consumed()
    (task_id,) = [c["id"] for c in json.loads(run.stdout)["children"]]
    last_child = [r for r in server.requests if child(r)][-1]
    assert SUMMARY in sent_texts(last_child) and "FILE a.txt" not in sent_texts(last_child)
    assert task_id.startswith("t_")
    notice = sent_texts([r for r in server.requests if parent(r)][-1])
    assert "compacted 1×; 1 declared loss" in notice

    shown = kernos("sessions", "show", task_id, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "FILE a.txt" in shown.stdout  # the store still has the original turns
    assert "[compaction] turns 1–2" in shown.stdout
    assert "- the words of a.txt and b.txt" in shown.stdout
    document = json.loads(kernos("sessions", "show", task_id, "--json", cwd=tmp_path).stdout)
    (compaction,) = document["compactions"]
    assert compaction["losses"] == [LOSS] and compaction["status"] == "approved"
    assert 0 < compaction["ratio"] < 1

    output = kernos("tasks", "output", task_id, cwd=tmp_path)
    assert "[compaction] turns 1–2" in output.stdout


def approving() -> tuple[Any, ...]:
    return (
        tool_call("rewrite", {"text": SUMMARY, "losses": [LOSS]}, when=compactor),
        text("Draft submitted.", when=compactor),
        tool_call("approve", {"verdict": "keeps the task and what is next"}, when=compactor),
    )


def three_reads() -> tuple[Any, ...]:
    return (
        tool_call("read_file", {"path": "a.txt"}, when=worker),
        tool_call("read_file", {"path": "b.txt"}, when=worker),
        tool_call("read_file", {"path": "c.txt"}, when=worker),
        text("All three read.", when=worker),
    )


def no_window(tmp_path: Path) -> None:
    project(tmp_path)
    toml = tmp_path / "kernos.toml"
    toml.write_text(toml.read_text().replace("context_window = 3500\n", ""))


def test_sessions_compact_by_hand_and_a_continued_session_reads_the_summary(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    no_window(tmp_path)  # by hand: no window needed
    server.script(*three_reads())
    run = kernos("run", "read a, b and c", "-m", "small", "--json", cwd=tmp_path, env=server.env())
    assert run.returncode == 0, run.stderr
    session_id = json.loads(run.stdout)["session_id"]
    assert not [r for r in server.requests if compactor(r)]  # never automatic without a window

    server.script(*approving())
    done = kernos("sessions", "compact", session_id, cwd=tmp_path, env=server.env())
    assert done.returncode == 0, done.stderr
    # keep_turns = 1 of 4 turns: turns 1-3 are summarised (the 4th, the answer, stays)
    assert f"session {session_id}: compacted turns 1–3, " in done.stderr
    assert "1 declared loss(es)" in done.stderr
    shown = kernos("sessions", "show", session_id, cwd=tmp_path).stdout
    assert "[compaction] turns 1–3: approved" in shown and "FILE a.txt" in shown

    server.script(text("Next done.", when=worker))
    again = kernos("run", "--continue", "next", "-m", "small", cwd=tmp_path, env=server.env())
    assert again.returncode == 0, again.stderr
    sent = sent_texts(server.requests[-1])
    assert SUMMARY in sent and "FILE a.txt" not in sent and "All three read." in sent


def test_run_continue_compact_compacts_before_the_prompt(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    no_window(tmp_path)
    server.script(*three_reads())
    run = kernos("run", "read a, b and c", "-m", "small", cwd=tmp_path, env=server.env())
    assert run.returncode == 0, run.stderr
    server.script(*approving(), text("Next done.", when=worker))
    again = kernos(
        "run", "--continue", "--compact", "next", "-m", "small", cwd=tmp_path, env=server.env()
    )
    assert again.returncode == 0, again.stderr
    server.assert_all_consumed()
    sent = sent_texts(server.requests[-1])
    assert "summary of turns 1–3" in sent and "FILE b.txt" not in sent


def test_compact_needs_a_continued_session(tmp_path: Path) -> None:
    result = kernos("run", "--compact", "next", "-m", "openai-chat:x", cwd=tmp_path)
    assert result.returncode == 2
    assert "--compact compacts a continued session" in result.stderr


def test_a_revived_child_is_sent_its_summary_not_the_turns_it_covers(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    reader_project(tmp_path)

    def revived(request: dict[str, Any]) -> bool:
        return child(request) and "TASK: again" in sent_texts(request)

    server.script(
        tool_call(
            "task",
            {"prompt": "TASK: read a, b, c", "subagent_type": "reader", "name": "reader1"},
            when=parent,
        ),
        text("Answer the revived child.", when=revived),
        *child_reads(),
        text("child done", when=child),
        tool_call("task_send", {"to": "reader1", "message": "TASK: again"}, when=parent),
        text("Parent done.", when=parent),
        text("Heard the revived child.", when=parent),
        *approving(),
    )
    run = kernos("run", "delegate", "-m", "small", cwd=tmp_path, env=server.env())
    assert run.returncode == 0, run.stderr
    server.assert_all_consumed()
    (last,) = [r for r in server.requests if revived(r)]
    assert SUMMARY in sent_texts(last) and "FILE a.txt" not in sent_texts(last)


def test_compact_model_writes_the_summary(server: FakeOpenAIServer, tmp_path: Path) -> None:
    no_window(tmp_path)
    toml = tmp_path / "kernos.toml"
    toml.write_text(
        toml.read_text().replace("keep_turns = 1\n", 'keep_turns = 1\ncompact_model = "cheap"\n')
        + '\n[models.cheap]\nmodel = "openai-chat:y"\n'
    )
    server.script(*three_reads())
    run = kernos("run", "read a, b and c", "-m", "small", "--json", cwd=tmp_path, env=server.env())
    assert run.returncode == 0, run.stderr
    session_id = json.loads(run.stdout)["session_id"]
    server.script(*approving())
    done = kernos("sessions", "compact", session_id, cwd=tmp_path, env=server.env())
    assert done.returncode == 0, done.stderr
    assert {r["model"] for r in server.requests if compactor(r)} == {"y"}
    assert {r["model"] for r in server.requests if worker(r)} == {"x"}
    (compaction,) = json.loads(
        kernos("sessions", "show", session_id, "--json", cwd=tmp_path).stdout
    )["compactions"]
    assert compaction["model"] == "y" and compaction["drafts"] == 1


def test_a_child_whose_compaction_is_not_approved_ends_context_exhausted(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    reader_project(tmp_path)

    server.script(
        tool_call("task", {"prompt": "TASK: read a, b, c", "subagent_type": "reader"}, when=parent),
        *child_reads(),
        text("The child ran out of context.", when=parent),
        tool_call("rewrite", {"text": SUMMARY, "losses": []}, when=last_is("user"), repeat=True),
        text("Rewritten.", when=last_is("tool"), repeat=True),
    )
    run = kernos("run", "delegate", "-m", "small", "--json", cwd=tmp_path, env=server.env())
    assert run.returncode == 0, run.stderr
    (task,) = json.loads(run.stdout)["children"]
    assert task["status"] == "error" and task["error"].startswith("context_exhausted: ")
    told = sent_texts([r for r in server.requests if parent(r)][-1])
    assert "context_exhausted: " in told and "compacting turns 1–2" in told


def test_a_compaction_is_a_kernos_compact_span_with_its_figures(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:

    from tests.runtime.test_trace import Receiver, run_env

    project(tmp_path)
    server.script(*three_reads(), *approving())
    receiver = Receiver()
    try:
        env = run_env(tmp_path, server, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint)
        done = _cli.kernos(
            "run", "read a, b and c", "-q", "-m", "small", cwd=tmp_path, env=env, timeout=120
        )
        assert done.returncode == 0, done.stderr
        (compact,) = receiver.named("kernos.compact")
    finally:
        receiver.close()
    figures = compact["attributes"]
    assert figures["kernos.status"] == "approved"
    assert (figures["kernos.first_turn"], figures["kernos.last_turn"]) == (1, 2)
    assert figures["kernos.drafts"] == 1 and figures["kernos.losses"] == 1
    assert figures["kernos.tokens_before"] > figures["kernos.tokens_after"] > 0

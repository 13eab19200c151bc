"""`kernos tools` and `kernos run` with the workspace tools, as a user runs them: real processes
against the local OpenAI-compatible server, in a temporary workspace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernos.testing import FakeOpenAIServer, text, tool_call, tool_calls
from tests.cli.test_run import kernos
from tests.mcp.conftest import tool_data

README = "# Changes\n\n- 1.2.0: the workspace tools arrive (read_file, list_files, search_files).\n"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "CHANGES.md").write_text(README)
    return tmp_path  # `kernos run` creates .kernos/kernos.db before the model's first call


def offered(request: dict[str, object]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools", [])}  # type: ignore[attr-defined, index]


#: the task and team tools every listing ends with (kernos._check.session_tools)
SESSION_TOOLS = [
    *((name, "tasks") for name in ("task", "task_cancel", "task_output", "task_send")),
    *((name, "teams") for name in ("team_send", "team_status", "team_wait", "board_add",
                                   "board_list", "board_update")),
]  # fmt: skip


def test_kernos_tools_json(workspace: Path) -> None:
    result = kernos("tools", "--json", cwd=workspace)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["agent"] == "main"
    assert [(t["name"], t["source"]) for t in document["tools"]] == [
        ("read_file", "builtin"),
        ("list_files", "builtin"),
        ("search_files", "builtin"),
        ("write_file", "builtin"),
        ("edit_file", "builtin"),
        *SESSION_TOOLS,
    ]
    assert document["tools"][0]["description"] == "Read a text file in the workspace"
    assert "15 tool(s) for agent main" in result.stderr


def test_kernos_tools_lists_functions_and_honours_the_agent(workspace: Path) -> None:
    (workspace / "release_helpers_b.py").write_text(
        "def bump(version: str, part: str = 'patch') -> str:\n"
        "    '''Bump a semantic version.'''\n    return version\n"
    )
    (workspace / "kernos.toml").write_text(
        '[tools.bump]\nfunction = "release_helpers_b:bump"\n'
        '[agents.release]\ntools = ["bump", "search_*"]\n'
    )
    result = kernos("tools", "--agent", "release", cwd=workspace)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:3] == [
        "NAME          SOURCE    RULE   DESCRIPTION",
        "bump          function  allow  Bump a semantic version",
        "search_files  builtin   allow  Search the text files in the workspace for lines "
        "matching a Python regular expression",
    ]
    rest = [line.split()[:3] for line in result.stdout.splitlines()[3:]]
    assert rest == [[name, source, "allow"] for name, source in SESSION_TOOLS]


def test_config_errors_are_exit_2_before_any_model_request(
    server: FakeOpenAIServer, workspace: Path
) -> None:
    (workspace / "kernos.toml").write_text('[tools.x]\nfunction = "missing_module_c:x"\n')
    listed = kernos("tools", cwd=workspace)
    assert listed.returncode == 2
    assert "tools.x.function: cannot import module 'missing_module_c'" in listed.stderr
    run = kernos("run", "hi", "-m", "openai-chat:x", cwd=workspace, env=server.env())
    assert run.returncode == 2 and "cannot import module" in run.stderr
    (workspace / "kernos.toml").write_text('[agents.main]\ntools = ["Read", "Glob"]\n')
    run = kernos("run", "hi", "-m", "openai-chat:x", cwd=workspace, env=server.env())
    assert run.returncode == 2
    assert "kernos calls Read read_file and Glob list_files" in run.stderr
    assert server.requests == []


def test_the_readme_example_reads_the_file_end_to_end(
    server: FakeOpenAIServer, workspace: Path
) -> None:
    server.script(
        tool_calls(
            ("read_file", '{"path": "CHANGES.md", "offset": "", "limit": null}'),
            ("read_file", {"path": "/etc/passwd"}),
            ("read_file", {"path": ".kernos/kernos.db"}),
            when="Summarise CHANGES.md",
        ),
        text("1.2.0 adds workspace tools.", when="the workspace tools arrive"),
    )
    result = kernos(
        "run", "Summarise CHANGES.md", "-m", "openai-chat:x", cwd=workspace, env=server.env()
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "1.2.0 adds workspace tools.\n"
    assert offered(server.requests[0]) >= {"read_file", "list_files", "search_files", "task"}
    read, passwd, db = server.tool_results()
    assert read == (
        "CHANGES.md (3 lines):\n     1\t# Changes\n     2\t\n     3\t- 1.2.0: the workspace tools "
        "arrive (read_file, list_files, search_files)."
    )
    assert passwd.startswith("/etc/passwd is outside the workspace (roots: ")
    assert "root:" not in passwd
    assert db.startswith(".kernos/kernos.db is ")
    assert (workspace / ".kernos" / "kernos.db").exists()
    assert "SQLite format" not in json.dumps(server.requests)
    server.assert_all_consumed()


def test_tools_empty_list_offers_none_of_them(server: FakeOpenAIServer, workspace: Path) -> None:
    (workspace / "kernos.toml").write_text("[agents.main]\ntools = []\n")
    server.script(text("ok"))
    assert (
        kernos("run", "hi", "-m", "openai-chat:x", cwd=workspace, env=server.env()).returncode == 0
    )
    assert not offered(server.requests[0]) & {"read_file", "list_files", "search_files"}


def test_a_padded_call_to_a_function_tool_reaches_it_stripped(
    server: FakeOpenAIServer, workspace: Path
) -> None:
    (workspace / "notes_tools_d.py").write_text(
        "import json, threading\n"
        "def note(text: str, tags: list[str] | None = None, urgent: bool = False) -> str:\n"
        "    '''Keep a note.\n\n    Args:\n        text: What to remember.\n    '''\n"
        "    return json.dumps({'text': text, 'tags': tags, 'urgent': urgent,\n"
        "                       'thread': threading.current_thread().name != 'MainThread'})\n"
    )
    (workspace / "kernos.toml").write_text(
        '[tools.note]\nfunction = "notes_tools_d:note"\n[agents.main]\ntools = ["note"]\n'
    )
    server.script(
        tool_call("note", '{"text": "ship it", "tags": [], "urgent": "TRUE"}', when="remember"),
        text("noted", when="ship it"),
    )
    result = kernos("run", "remember", "-m", "openai-chat:x", cwd=workspace, env=server.env())
    assert result.returncode == 0, result.stderr
    (noted,) = server.tool_results()
    source, noted = tool_data(noted)  # a function's result is data from `function:NAME`
    assert source.startswith("function:")
    assert json.loads(noted) == {"text": "ship it", "tags": None, "urgent": True, "thread": True}
    note_tool = next(t for t in server.requests[0]["tools"] if t["function"]["name"] == "note")
    assert note_tool["function"]["description"] == "Keep a note."
    assert note_tool["function"]["parameters"]["properties"]["text"]["description"] == (
        "What to remember."
    )
    assert not offered(server.requests[0]) & {"read_file", "list_files", "search_files"}


def test_a_built_in_tool_granted_to_a_child_works(
    server: FakeOpenAIServer, workspace: Path
) -> None:
    (workspace / "kernos.toml").write_text(
        '[categories.quick]\ndescription = "Small checks"\ninstructions = "CHILD-AGENT"\n'
    )

    def child(request: dict[str, object]) -> bool:
        return "CHILD-AGENT" in json.dumps(request["messages"])

    def child_read(request: dict[str, object]) -> bool:
        return child(request) and "the workspace tools arrive" in json.dumps(request["messages"])

    server.script(
        text("CHANGES has 1.2.0.", when=child_read),
        tool_call("read_file", {"path": "CHANGES.md"}, when=child),
        tool_call(
            "task",
            {"prompt": "TASK: check CHANGES.md", "category": "quick", "tools": ["read_file"]},
            when="check the changelog",
        ),
        text("Checked.", when="CHANGES has 1.2.0."),
    )
    result = kernos(
        "run", "check the changelog", "-m", "openai-chat:x", cwd=workspace, env=server.env()
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Checked.\n"
    child_requests = [r for r in server.requests if child(r)]
    assert offered(child_requests[0]) == {"read_file"}
    assert any("the workspace tools arrive" in r for r in server.tool_results())
    server.assert_all_consumed()

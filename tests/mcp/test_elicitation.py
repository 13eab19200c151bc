"""An MCP server asking the user something mid-call (elicitation): on a terminal ``kernos run``
asks the person on stderr (defaults, enums) and answers ``accept`` with what they typed, or
``decline``; with nobody to ask (no terminal, a child task) it answers ``cancel`` — never
``decline`` — and the tool result tells the model nobody was asked. URL mode prints the URL."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from kernos.testing import FakeOpenAIServer, text, tool_call
from kernos.tools._elicit import FormField, NoAnswer, form_fields, nobody_asked_note, parse_answer
from tests.cli.test_chat import Terminal
from tests.mcp.conftest import kernos, kernos_env, tool_data
from tests.mcp.test_progress import progress_config

NOBODY = "No one could answer here"


def config(tmp_path: Path) -> Path:
    (tmp_path / "kernos.toml").write_text(progress_config("ask", timeout=60))
    return tmp_path


def run_on_a_terminal(tmp_path: Path, server: FakeOpenAIServer) -> Terminal:
    return Terminal(
        ["run", "Ask me.", "-m", "openai-chat:x"],
        cwd=tmp_path,
        env=kernos_env(tmp_path, server.env()),
    )


def test_on_a_terminal_the_form_is_asked_and_accepted_with_defaults_and_enums(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.script(
        tool_call("ask__ask_name", "{}"),
        text("Hello Grace.", when="accepted name=Grace color=blue"),
    )
    term = run_on_a_terminal(config(tmp_path), server)
    try:
        term.wait_text("MCP server [ask] asks: Who are you?")
        term.wait_text("Answer it? [Y/n]")
        term.type("y\n")
        term.wait_text("Name (Your name) [Ada]:")
        term.type("Grace\n")
        term.wait_text("Color (Favourite colour) one of red, green, blue [green]:")
        mark = len(term.text())
        term.type("purple\n")
        term.wait_text("choose one of red, green, blue", mark)
        term.type("blue\n")
        term.wait_for(lambda: term.proc.poll() is not None, "the run to end")
        assert term.proc.returncode == 0, term.text()
        assert "Hello Grace." in term.text()
    finally:
        term.close()
    (result,) = server.tool_results()
    assert tool_data(result) == ("mcp:ask", "accepted name=Grace color=blue")


def test_on_a_terminal_no_is_decline_and_an_empty_field_takes_its_default(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.script(
        tool_call("ask__ask_name", "{}"),
        tool_call("ask__ask_name", "{}", when="elicitation decline"),
        text("Fine.", when="accepted name=Ada color=green"),
    )
    term = run_on_a_terminal(config(tmp_path), server)
    try:
        term.wait_text("Answer it? [Y/n]")
        term.type("n\n")
        mark = len(term.text())
        term.wait_text("Answer it? [Y/n]", mark)
        term.type("\n")
        term.wait_text("[Ada]:", mark)
        term.type("\n")
        term.wait_text("[green]:", mark)
        term.type("\n")
        term.wait_for(lambda: term.proc.poll() is not None, "the run to end")
        assert term.proc.returncode == 0, term.text()
    finally:
        term.close()
    first, second = server.tool_results()
    assert tool_data(first) == ("mcp:ask", "elicitation decline")
    assert tool_data(second) == ("mcp:ask", "accepted name=Ada color=green")


def test_url_mode_prints_the_url_on_a_terminal(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.script(tool_call("ask__ask_url", "{}"), text("Done.", when="url elicitation"))
    term = run_on_a_terminal(config(tmp_path), server)
    try:
        term.wait_text("https://example.invalid/connect?x=1")
        term.wait_text("Open it and go on? [Y/n]")
        term.type("y\n")
        term.wait_for(lambda: term.proc.poll() is not None, "the run to end")
    finally:
        term.close()
    (result,) = server.tool_results()
    assert tool_data(result) == ("mcp:ask", "url elicitation accept")


def test_without_a_terminal_the_answer_is_cancel_and_the_model_is_told_nobody_was_asked(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.script(tool_call("ask__ask_name", "{}"), text("Understood.", when=NOBODY))
    result = kernos("run", "Ask me.", "-m", "openai-chat:x", cwd=config(tmp_path), env=server.env())
    assert result.returncode == 0, result.stderr
    (said,) = server.tool_results()
    assert ">\nelicitation cancel\n</tool-result-" in said  # the server's own text, delimited
    assert 'MCP server [ask] asked the user: "Who are you?"' in said
    assert "the user was not asked and did not refuse" in said


def test_a_child_tasks_call_is_cancelled_even_on_a_terminal(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "kernos.toml").write_text(
        progress_config("ask", timeout=60)
        + '[agents.worker]\ndescription = "Asks"\ninstructions = "WORKER-AGENT"\n'
        + 'tools = ["ask__*"]\n'
    )
    task = {"prompt": "TASK: ask", "description": "Ask", "subagent_type": "worker"}
    server.script(
        tool_call("task", json.dumps(task), when="Ask me."),
        tool_call("ask__ask_name", "{}", when="WORKER-AGENT", when_system=True),
        text("child saw cancel", when=NOBODY),
        text("parent done", when="child saw cancel"),
    )
    term = run_on_a_terminal(tmp_path, server)
    try:
        term.wait_for(lambda: term.proc.poll() is not None, "the run to end")
        assert term.proc.returncode == 0, term.text()
        assert "Answer it?" not in term.text()
    finally:
        term.close()


def test_form_rules() -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "title": "Name", "default": "Ada"},
            "age": {"type": "integer"},
            "ok": {"type": "boolean", "default": True},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
        },
        "required": ["age"],
    }
    name, age, ok, tags = form_fields(schema)
    assert name.question() == "Name [Ada]: "
    assert age.question() == "age: " and age.required
    assert ok.question() == "ok y/n [y]: "
    assert tags.question() == "tags any of a, b (optional): "
    assert parse_answer(name, "") == "Ada"
    assert parse_answer(age, "42") == 42
    assert parse_answer(ok, "n") is False
    assert parse_answer(tags, "a, b") == ["a", "b"]
    with pytest.raises(NoAnswer):
        parse_answer(age, " ")
    with pytest.raises(ValueError, match="whole number"):
        parse_answer(age, "old")
    with pytest.raises(ValueError, match="choose from a, b"):
        parse_answer(tags, "c")
    color = FormField("color", "string", choices=("red", "blue"))
    with pytest.raises(ValueError, match="choose one of red, blue"):
        parse_answer(color, "green")


def test_the_nobody_asked_note_size_is_pinned() -> None:
    template = resources.files("kernos.tools").joinpath("elicitation_cancelled.md")
    assert len(template.read_text("utf-8").strip()) == 254  # the model-facing text, pinned
    assert nobody_asked_note("s", ["Q?"]).startswith('[MCP server [s] asked the user: "Q?".')


def test_kernos_chat_on_a_terminal_asks_too(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.script(
        tool_call("ask__ask_name", "{}"),
        text("Hi Lin.", when="accepted name=Lin color=red"),
    )
    term = Terminal(
        ["chat", "-m", "openai-chat:x"],
        cwd=config(tmp_path),
        env=kernos_env(tmp_path, server.env()),
    )
    try:
        term.wait_text("Ctrl-D leaves")
        term.type("Ask me.\n")
        term.wait_text("Answer it? [Y/n]")
        term.type("y\n")
        term.wait_text("[Ada]:")
        term.type("Lin\n")
        term.wait_text("[green]:")
        term.type("red\n")
        term.wait_text("Hi Lin.")
        # the next prompt: a Ctrl-D typed before the line editor reads again may be lost
        term.wait_for(lambda: term.text().rstrip().endswith(">"), "the next prompt")
        term.type("\x04")  # Ctrl-D: leave
        term.wait_for(lambda: term.proc.poll() is not None, "chat to end")
    finally:
        term.close()
    (result,) = server.tool_results()
    assert tool_data(result) == ("mcp:ask", "accepted name=Lin color=red")

"""The built-in write tools through the boundary pipeline, on real files: confined like the read
tools, atomic, keeping the mode, with coded errors the model can act on."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from kernos.boundary import ToolContext, ToolResult, ToolSpec, call_tool
from kernos.tools import LocalWorkspace, write_tools
from tests.tools._workspace import make_workspace


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return make_workspace(tmp_path)


def tools(root: Path, **kwargs: Any) -> dict[str, ToolSpec[Any]]:
    policy = LocalWorkspace([root], denied=[root / ".kernos", root / "kernos.toml"], **kwargs)
    return {spec.name: spec for spec in write_tools(policy)}


async def call(root: Path, name: str, args: Any, **kwargs: Any) -> ToolResult:
    return await call_tool(tools(root, **kwargs)[name], args)


async def test_write_file_creates_and_replaces_keeping_the_mode(ws: Path) -> None:
    created = await call(ws, "write_file", {"path": "new/dir/a.txt", "content": "one\ntwo\n"})
    assert created.text == "Created new/dir/a.txt (2 lines, 8 bytes)."
    assert (ws / "new" / "dir" / "a.txt").read_text() == "one\ntwo\n"
    script = ws / "run.sh"
    script.write_text("echo old\n")
    script.chmod(0o750)
    replaced = await call(ws, "write_file", {"path": "run.sh", "content": "echo new\n"})
    assert not replaced.is_error, replaced.text
    assert script.read_text() == "echo new\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    assert [p.name for p in ws.iterdir() if p.name.endswith(".kernos-tmp")] == []


async def test_write_file_keeps_text_exactly(ws: Path) -> None:
    await call(ws, "write_file", {"path": "blank.txt", "content": "  padded  \n\n"})
    assert (ws / "blank.txt").read_text() == "  padded  \n\n"


@pytest.mark.parametrize(
    "path",
    [
        "/etc/kernos-write-test",
        "../outside.txt",
        ".env",
        ".git/config",
        ".kernos/kernos.db",
        "kernos.toml",
        "link_out.txt",
        "linked_dir/x.txt",
        "docs",
    ],
)
async def test_write_file_is_confined_by_the_workspace_policy(ws: Path, path: str) -> None:
    before = {p: p.read_bytes() for p in ws.parent.rglob("*") if p.is_file()}
    result = await call(ws, "write_file", {"path": path, "content": "x"})
    assert result.is_error and result.code == "path_refused", result.text
    assert {p: p.read_bytes() for p in ws.parent.rglob("*") if p.is_file()} == before


async def test_write_file_size_cap(ws: Path) -> None:
    result = await call(
        ws, "write_file", {"path": "big.txt", "content": "x" * 11}, max_file_bytes=10
    )
    assert result.code == "file_too_large"
    assert not (ws / "big.txt").exists()


async def test_edit_file_replaces_exactly_one(ws: Path) -> None:
    result = await call(
        ws, "edit_file", {"path": "README.md", "old_string": "hello world", "new_string": "hi"}
    )
    assert result.text == "Edited README.md: replaced 1 occurrence."
    assert (ws / "README.md").read_text() == "# Demo\nhi\nlast line\n"


async def test_edit_file_coded_errors(ws: Path) -> None:
    (ws / "dup.txt").write_text("a x a x a\n")
    missing = await call(
        ws, "edit_file", {"path": "dup.txt", "old_string": "zz", "new_string": "y"}
    )
    assert missing.code == "old_string_not_found"
    assert "was not found in dup.txt" in missing.text
    many = await call(ws, "edit_file", {"path": "dup.txt", "old_string": "a", "new_string": "b"})
    assert many.code == "old_string_not_unique"
    assert "occurs 3 times in dup.txt" in many.text and "replace_all=true" in many.text
    assert (ws / "dup.txt").read_text() == "a x a x a\n"
    every = await call(
        ws,
        "edit_file",
        {"path": "dup.txt", "old_string": "a", "new_string": "b", "replace_all": "true"},
    )
    assert every.text == "Edited dup.txt: replaced 3 occurrences."
    assert (ws / "dup.txt").read_text() == "b x b x b\n"
    absent = await call(ws, "edit_file", {"path": "nope.txt", "old_string": "a", "new_string": "b"})
    assert absent.code == "not_found"
    binary = await call(
        ws, "edit_file", {"path": "image.png", "old_string": "P", "new_string": "Q"}
    )
    assert binary.code == "binary_file"


async def test_the_write_tools_ask_by_default_and_preview_a_diff(ws: Path) -> None:
    specs = tools(ws)
    assert {s.permission for s in specs.values()} == {"ask"}
    edit = specs["edit_file"]
    params = edit.params.model_validate(
        {"path": "README.md", "old_string": "hello world", "new_string": "hi"}
    )
    assert edit.preview is not None
    assert edit.preview(params, ToolContext()) == (
        "--- a/README.md\n+++ b/README.md\n@@ -1,3 +1,3 @@\n"
        " # Demo\n-hello world\n+hi\n last line\n"
    )
    write = specs["write_file"]
    assert write.preview is not None
    new = write.params.model_validate({"path": "n.txt", "content": "x\n"})
    assert write.preview(new, ToolContext()) == "--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1 @@\n+x\n"


async def test_a_symlink_inside_is_written_through_to_its_target(ws: Path) -> None:
    result = await call(ws, "write_file", {"path": "link_in.md", "content": "via link\n"})
    assert not result.is_error, result.text
    assert os.path.islink(ws / "link_in.md")
    assert (ws / "README.md").read_text() == "via link\n"


async def test_a_write_the_file_system_refuses_is_a_coded_error(ws: Path) -> None:
    result = await call(ws, "write_file", {"path": "README.md/x.txt", "content": "y"})
    assert result.is_error and result.details["code"] == "unwritable"
    assert result.text == "write_file could not write the file (Not a directory); try another path"

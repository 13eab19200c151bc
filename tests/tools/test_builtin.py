"""The built-in workspace tools: what they return, and every refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernos.boundary import ToolResult, ToolSpec, call_tool
from kernos.tools import BUILTIN_PREPARE, LocalWorkspace, builtin_tools
from tests.tools._workspace import make_workspace

TEXTS = Path(__file__).resolve().parents[2] / "src" / "kernos" / "tools"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return make_workspace(tmp_path)


def tools(root: Path, **kwargs: Any) -> dict[str, ToolSpec[Any]]:
    policy = LocalWorkspace([root], denied=[root / ".kernos", root / "kernos.toml"], **kwargs)
    return {spec.name: spec for spec in builtin_tools(policy)}


async def call(root: Path, name: str, args: Any, **kwargs: Any) -> ToolResult:
    return await call_tool(tools(root, **kwargs)[name], args)


async def test_read_file_numbers_lines(ws: Path) -> None:
    result = await call(ws, "read_file", {"path": "README.md"})
    assert not result.is_error
    assert (
        result.text
        == "README.md (3 lines):\n     1\t# Demo\n     2\thello world\n     3\tlast line"
    )


async def test_read_file_offset_and_limit(ws: Path) -> None:
    result = await call(ws, "read_file", {"path": "README.md", "offset": 2, "limit": 1})
    assert result.text == (
        "README.md lines 2-2 of 3:\n     2\thello world\n"
        "[1 line more; call read_file with offset=3 to continue]"
    )
    past = await call(ws, "read_file", {"path": "README.md", "offset": 9})
    assert past.code == "offset_out_of_range"
    assert past.text == "offset 9 is past the end of README.md (3 lines); use an offset from 1 to 3"


async def test_read_file_long_files_come_in_pages(ws: Path) -> None:
    (ws / "big.txt").write_text("".join(f"line {i}\n" for i in range(1, 2501)))
    first = await call(ws, "read_file", {"path": "big.txt"})
    assert first.text.startswith("big.txt lines 1-2000 of 2500:\n")
    assert first.text.endswith("[500 lines more; call read_file with offset=2001 to continue]")
    rest = await call(ws, "read_file", {"path": "big.txt", "offset": 2001, "limit": 5000})
    assert rest.text.splitlines()[1] == "  2001\tline 2001"
    assert rest.text.splitlines()[-1] == "  2500\tline 2500"


async def test_read_file_padding_is_absence(ws: Path) -> None:
    padded = {"path": " README.md ", "offset": "", "limit": None, "encoding": "utf-8"}
    assert BUILTIN_PREPARE["read_file"](padded) == {"path": "README.md"}
    assert BUILTIN_PREPARE["read_file"]({"path": "a", "offset": "null", "limit": "5"}) == {
        "path": "a",
        "limit": "5",
    }
    result = await call(ws, "read_file", padded)
    assert result.text.startswith("README.md (3 lines):")
    # a numeric string is a number; 0 is a value that means "from the start"
    result = await call(ws, "read_file", {"path": "README.md", "offset": 0, "limit": "1"})
    assert result.text.startswith("README.md lines 1-1 of 3:")


async def test_read_file_required_path_is_never_stripped(ws: Path) -> None:
    assert BUILTIN_PREPARE["read_file"]({"path": ""}) == {"path": ""}
    result = await call(ws, "read_file", {"path": "", "offset": ""})
    assert result.code == "invalid_arguments"
    assert "`path`" in result.text


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/etc/passwd", "/etc/passwd is outside the workspace (roots: {root})"),
        ("../outside.txt", "../outside.txt is outside the workspace"),
        ("docs/../../outside.txt", "is outside the workspace"),
        ("link_out.txt", "link_out.txt is outside the workspace"),
        ("linked_dir/outside.txt", "is outside the workspace"),
        (".kernos/kernos.db", ".kernos/kernos.db is kernos' own state or configuration"),
        ("kernos.toml", "kernos.toml is kernos' own state or configuration"),
        (".env", ".env is hidden"),
        (".git/config", ".git/config is hidden"),
        ("{root}/.env", "is hidden"),
        ("missing.md", "missing.md is not an existing file; call list_files"),
        ("docs", "docs is a directory, not a file"),
    ],
)
async def test_read_file_refusals(ws: Path, path: str, says: str) -> None:
    result = await call(ws, "read_file", {"path": path.format(root=ws)})
    assert result.is_error and result.code == "path_refused"
    assert says.format(root=ws) in result.text
    assert "TODO" not in result.text and "SQLite" not in result.text and "root:" not in result.text


async def test_read_file_kernos_db_refused_even_when_hidden_paths_are_not_the_reason(
    tmp_path: Path,
) -> None:
    # KERNOS_HOME inside the root under a visible name: refused as state, not as hidden
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "kernos.db").write_text("rows")
    policy = LocalWorkspace([tmp_path], denied=[tmp_path / "state"])
    [read, *_] = builtin_tools(policy)
    result = await call_tool(read, {"path": "state/kernos.db"})
    assert result.code == "path_refused" and "own state" in result.text


async def test_a_symlink_inside_the_workspace_is_followed(ws: Path) -> None:
    result = await call(ws, "read_file", {"path": "link_in.md"})
    assert result.text.startswith("link_in.md (3 lines):")  # shown as named, read from README.md


async def test_read_file_binary_and_oversized_files_are_refused(ws: Path) -> None:
    binary = await call(ws, "read_file", {"path": "image.png"})
    assert (binary.code, binary.text) == (
        "binary_file",
        "image.png is a binary file; read_file reads text files only",
    )
    (ws / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    latin = await call(ws, "read_file", {"path": "latin1.txt"})
    assert latin.code == "binary_file" and "not UTF-8 text" in latin.text
    big = await call(ws, "read_file", {"path": "README.md"}, max_file_bytes=10)
    assert big.code == "file_too_large"
    assert big.text == (
        "README.md is 29 bytes, over the 10-byte cap for built-in tools; "
        "use search_files to find the lines you need"
    )


async def test_read_file_caps_long_lines(ws: Path) -> None:
    (ws / "min.js").write_text("x" * 5000 + "\n")
    result = await call(ws, "read_file", {"path": "min.js"})
    assert result.text.endswith("x" * 2000 + " …[line cut]")


async def test_list_files_globs_and_hides(ws: Path) -> None:
    everything = await call(ws, "list_files", {})
    assert everything.text.splitlines() == [
        "README.md",
        "docs/deep/notes.txt",
        "docs/guide.md",
        "image.png",
        "link_in.md",
        "src.py",
    ]  # no .env, .git, .kernos, kernos.toml, link out, linked directory
    md = await call(ws, "list_files", {"pattern": "**/*.md", "path": ""})
    assert md.text.splitlines() == ["README.md", "docs/guide.md", "link_in.md"]
    top = await call(ws, "list_files", {"pattern": "*.{md,py}"})
    assert top.text.splitlines() == ["README.md", "link_in.md", "src.py"]
    docs = await call(ws, "list_files", {"pattern": "*", "path": "docs"})
    assert docs.text == "docs/guide.md"
    none = await call(ws, "list_files", {"pattern": "*.rs"})
    assert none.text == "No files match *.rs under .."


async def test_list_files_refusals_and_cap(ws: Path) -> None:
    outside = await call(ws, "list_files", {"path": "/etc"})
    assert outside.code == "path_refused"
    hidden = await call(ws, "list_files", {"path": ".git"})
    assert hidden.code == "path_refused"
    escape = await call(ws, "list_files", {"pattern": "../*"})
    assert escape.code == "invalid_pattern"
    many = ws / "many"
    many.mkdir()
    for i in range(510):
        (many / f"f{i:03}.txt").write_text("")
    capped = await call(ws, "list_files", {"path": "many"})
    lines = capped.text.splitlines()
    assert len(lines) == 501 and lines[0] == "many/f000.txt"
    assert lines[-1] == "[10 more files not shown; narrow the pattern or the path]"


async def test_search_files_matches_with_line_numbers(ws: Path) -> None:
    result = await call(ws, "search_files", {"pattern": "todo", "ignore_case": "true", "glob": ""})
    assert result.text.splitlines() == [
        "docs/deep/notes.txt:1: todo later",
        "docs/guide.md:2: TODO: write more",
        "src.py:2: return 1  # TODO",
        "[1 binary, non-UTF-8 or oversized files skipped]",
    ]  # never .git/config, kernos.toml, or outside.txt through the link; image.png skipped
    py = await call(ws, "search_files", {"pattern": "TODO", "glob": "*.py"})
    assert py.text == "src.py:2: return 1  # TODO"
    under = await call(ws, "search_files", {"pattern": "TODO", "path": "docs", "glob": "*.md"})
    assert under.text == "docs/guide.md:2: TODO: write more"
    nothing = await call(ws, "search_files", {"pattern": "absent", "glob": "*.md"})
    assert nothing.text == "No matches for 'absent' under . in files matching *.md."


async def test_search_files_invalid_regex_says_how_to_fix(ws: Path) -> None:
    result = await call(ws, "search_files", {"pattern": "f(x"})
    assert result.code == "invalid_regex"
    assert result.text.startswith(
        "'f(x' is not a valid Python regular expression (missing ), unterminated subpattern "
        "at position 1); escape literal characters"
    )
    assert result.text.endswith("with a backslash and call search_files again")


async def test_search_files_caps_matches(ws: Path) -> None:
    (ws / "many.txt").write_text("hit\n" * 250)
    result = await call(ws, "search_files", {"pattern": "hit", "glob": "many.txt"})
    lines = result.text.splitlines()
    assert len(lines) == 201 and lines[0] == "many.txt:1: hit"
    assert lines[-1] == "[50 more matches not shown; narrow the pattern or the glob]"


async def test_search_files_refuses_paths_outside(ws: Path) -> None:
    assert (await call(ws, "search_files", {"pattern": "x", "path": "/"})).code == "path_refused"
    assert (await call(ws, "search_files", {"pattern": "x", "glob": "/etc/*"})).code == (
        "invalid_pattern"
    )


def test_description_sizes_are_pinned() -> None:
    sizes = {p.name: len(p.read_text(encoding="utf-8")) for p in sorted(TEXTS.glob("*.md"))}
    assert sizes == {
        "edit_file.md": 357,
        "elicitation_cancelled.md": 255,
        "list_files.md": 486,
        "read_file.md": 481,
        "search_files.md": 707,
        "write_file.md": 386,
    }


def test_schemas_show_required_fields_only_where_needed(ws: Path) -> None:
    specs = tools(ws)
    assert specs["read_file"].schema()["required"] == ["path"]
    assert "required" not in specs["list_files"].schema()
    assert specs["search_files"].schema()["required"] == ["pattern"]
    assert all(s.schema()["additionalProperties"] is False for s in specs.values())


async def test_system_files_are_refused_even_under_a_root_and_hidden_can_be_allowed(
    ws: Path,
) -> None:
    [read, *_] = builtin_tools(LocalWorkspace([Path("/")]))
    environ = await call_tool(read, {"path": "/proc/self/environ"})
    assert environ.code == "path_refused" and "is a system file" in environ.text
    [read, *_] = builtin_tools(LocalWorkspace([ws], allow_hidden=True))
    assert (await call_tool(read, {"path": ".env"})).text == ".env (1 line):\n     1\tSECRET=1"


async def test_read_file_caps_the_text_of_one_call(ws: Path) -> None:
    (ws / "wide.txt").write_text(("y" * 1000 + "\n") * 300)
    result = await call(ws, "read_file", {"path": "wide.txt"})
    assert len(result.text) <= 100_000 + 200
    assert result.text.startswith("wide.txt lines 1-99 of 300:\n")
    assert result.text.endswith("[201 lines more; call read_file with offset=100 to continue]")


async def test_the_workspace_table_confines_the_built_ins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The built-ins ask the runtime's one policy: `[workspace] roots` applies to them too."""
    from kernos.runtime import load_config
    from kernos.tools import load_catalog

    monkeypatch.delenv("KERNOS_HOME", raising=False)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("inside the root\n")
    (tmp_path / "notes.md").write_text("outside the root\n")
    (tmp_path / "kernos.toml").write_text('[workspace]\nroots = ["docs"]\n')
    catalog = load_catalog(load_config(cwd=tmp_path))
    read = next(e.spec for e in catalog.for_agent("main") if e.spec.name == "read_file")
    inside = await call_tool(read, {"path": "guide.md"})
    assert "inside the root" in inside.text and not inside.is_error
    outside = await call_tool(read, {"path": str(tmp_path / "notes.md")})
    assert outside.is_error and "outside the workspace" in outside.text

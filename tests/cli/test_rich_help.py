"""``kernos.cli._rich_help``: typer's help module loads without rich's markdown and traceback
renderers, and still gets the real ones if it ever uses them (each case in a fresh interpreter:
typer imports its help module once per process)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_help_module_loads_without_markdown_and_traceback() -> None:
    shown = run("""
        import sys
        from kernos.cli import _rich_help
        _rich_help.install()
        import typer.rich_utils
        print(sorted(m for m in _rich_help.STAND_INS if m in sys.modules))
        print(sorted(m for m in ("markdown_it", "pygments", "attr") if m in sys.modules))
        print(_rich_help._FINDER in sys.meta_path)
    """)
    assert shown.splitlines() == ["[]", "[]", "False"]


def test_the_stand_ins_build_the_real_renderers() -> None:
    shown = run("""
        import sys
        from kernos.cli import _rich_help
        _rich_help.install()
        from typer import rich_utils
        made = rich_utils._make_rich_text(text="**bold**", markup_mode="markdown")
        import rich.markdown, rich.traceback
        print(type(made) is rich.markdown.Markdown)
        try:
            raise ValueError("x")
        except ValueError as exc:
            tb = rich_utils.Traceback.from_exception(type(exc), exc, exc.__traceback__)
        print(type(tb) is rich.traceback.Traceback)
        print(sys.modules["rich.markdown"].__file__.endswith("markdown.py"))
    """)
    assert shown.splitlines() == ["True", "True", "True"]


def test_a_name_the_stand_ins_lack_loads_the_real_modules() -> None:
    # a later typer that imports another name from these modules still imports cleanly
    shown = run("""
        from kernos.cli import _rich_help
        del _rich_help.STAND_INS["rich.traceback"]["Traceback"]
        _rich_help.install()
        from typer import rich_utils
        import rich.traceback
        print(rich_utils.Traceback is rich.traceback.Traceback)
        print(rich_utils.Markdown.__module__)
    """)
    assert shown.splitlines() == ["True", "rich.markdown"]


def test_already_imported_modules_are_used_as_they_are() -> None:
    shown = run("""
        import rich.markdown
        from kernos.cli import _rich_help
        _rich_help.install()
        from typer import rich_utils
        print(rich_utils.Markdown is rich.markdown.Markdown)
        print(rich_utils.Traceback.__module__)
    """)
    assert shown.splitlines() == ["True", "kernos.cli._rich_help"]

"""``kernos init``: a commented ``kernos.toml`` for the model server found, and ``.gitignore``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kernos.cli._common import EXIT_OK, config_errors, err, fail, write_stdout

if TYPE_CHECKING:
    from kernos._starter import FoundServer


def _ask() -> FoundServer | None:
    """Ask on the terminal for the server's URL and model (Enter on an empty URL: none)."""
    from kernos._init import server_at

    err.print("No model server found on OPENAI_BASE_URL or the local ports.", markup=False)
    url = typer.prompt(
        "Base URL of an OpenAI-compatible server (empty: write a template)",
        default="",
        show_default=False,
        err=True,
    ).strip()
    if not url:
        return None
    listed = server_at(url, None, "asked")
    model = typer.prompt(
        "Model name", default=listed.model if listed else "", show_default=bool(listed), err=True
    ).strip()
    if not model:
        return None
    return server_at(url, model, "asked")


def register(app: typer.Typer) -> None:
    @app.command("init")
    def init_command(
        base_url: Annotated[
            str | None,
            typer.Option("--base-url", metavar="URL", help="The server's URL; skips probing."),
        ] = None,
        model: Annotated[
            str | None,
            typer.Option("--model", "-m", metavar="NAME", help="The model name the server lists."),
        ] = None,
        force: Annotated[
            bool, typer.Option("--force", help="Replace an existing kernos.toml.")
        ] = False,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    ) -> None:
        """Write kernos.toml for the model server found (OPENAI_BASE_URL, else Ollama, vLLM or
        llama.cpp on this machine's usual ports, else asked on a terminal) and add .kernos/ to
        .gitignore. An existing kernos.toml is kept unless --force is given."""
        from kernos._init import config_target, find_server, server_at, write_project

        here = Path.cwd()
        with config_errors():
            config_target(here, force)  # before any probing or asking
        if model is not None and base_url is None:
            raise fail("--model needs --base-url: pass both, or neither to probe for a server")
        if base_url is not None:
            server = server_at(base_url, model, "--base-url")
            if server is None:
                raise fail(
                    f"{base_url} lists no model at /models: pass --model NAME with the name "
                    "your server serves"
                )
        else:
            server = find_server()
            if server is None and sys.stdin.isatty() and not as_json:
                server = _ask()
        with config_errors():
            result = write_project(here, server, force=force)
        if as_json:
            write_stdout(json.dumps(result.record(), ensure_ascii=False))
        for path in result.written:
            err.print(f"wrote {path}", markup=False)
        if server is None:
            err.print(
                f"no model server found: edit {result.config.name} (uncomment default_model "
                "and [models.local], with your server's base_url and model), then run "
                "`kernos config check`",
                markup=False,
            )
        else:
            err.print(
                f"default_model is local: {server.model} at {server.base_url}; "
                'try `kernos run "hello"`',
                markup=False,
            )
        raise typer.Exit(EXIT_OK)

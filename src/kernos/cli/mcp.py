"""``kernos mcp``: serve an agent's kernos tools to Claude Code, Cursor, OpenCode, Codex (MCP);
``kernos mcp login|logout|status``: the OAuth logins of the MCP servers kernos consumes."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from kernos.cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    ConfigOption,
    ModelOption,
    config_errors,
    err,
    fail,
    open_runtime,
    write_stdout,
)


def register(app: typer.Typer) -> None:
    # hosts start `kernos mcp` with no subcommand: the group's own callback serves
    group = typer.Typer(invoke_without_command=True, no_args_is_help=False)

    @group.callback(invoke_without_command=True)
    def mcp_command(
        ctx: typer.Context,
        agent: Annotated[str, typer.Option("--agent", "-a", help="Agent whose tools to serve.")] = (
            "main"
        ),
        config: ConfigOption = None,
        http: Annotated[
            str | None,
            typer.Option("--http", help="Serve Streamable HTTP at HOST:PORT/mcp instead of stdio."),
        ] = None,
        token_env: Annotated[
            str | None,
            typer.Option(
                "--token-env",
                help="Environment variable holding the bearer token HTTP clients must send "
                "(required off loopback).",
            ),
        ] = None,
        foreground_wait: Annotated[
            float,
            typer.Option(
                "--foreground-wait",
                help="Seconds a foreground task call waits before answering 'still running'.",
            ),
        ] = 50.0,
        session_idle: Annotated[
            str,
            typer.Option(
                "--session-idle",
                help="With --http: close a client's session (cancelling its children) after this "
                "long without a request, e.g. 90s, 30m, 1h (0: never).",
            ),
        ] = "30m",
        max_sessions: Annotated[
            int,
            typer.Option(
                "--max-sessions",
                help="With --http: sessions open at once; past it a new client gets HTTP 503.",
            ),
        ] = 64,
        model: ModelOption = None,
    ) -> None:
        """Serve AGENT's tools (tasks, output channels, configured and MCP tools, compress) over
        MCP: stdio by default, Streamable HTTP with --http. The subcommands log in to the MCP
        servers kernos consumes that ask for OAuth."""
        if ctx.invoked_subcommand is not None:
            return
        from kernos._app import Interrupted, run_until_signal
        from kernos._serve import KernosMcpServer, is_loopback, parse_http
        from kernos.runtime import DURATION_FIX, ConfigError, parse_duration

        if foreground_wait <= 0:
            raise fail("--foreground-wait must be a positive number of seconds")
        try:
            idle = parse_duration(session_idle) or None
        except ValueError as exc:
            raise fail(f"--session-idle: {exc}; {DURATION_FIX}") from None
        if max_sessions < 1:
            raise fail(f"--max-sessions {max_sessions}: give a whole number of 1 or more")
        address = None
        token = None
        if http is not None:
            try:
                address = parse_http(http)
            except ValueError as exc:
                raise fail(str(exc)) from None
            if token_env is None and not is_loopback(address[0]):
                raise fail(
                    f"--http {http} is not a loopback address: pass --token-env VAR naming the "
                    "variable that holds the bearer token clients must send"
                )
        if token_env is not None:
            token = os.environ.get(token_env, "").strip()
            if not token:
                raise fail(f"--token-env {token_env}: the variable is unset or empty; set it")
            from kernos.runtime import register_secrets

            register_secrets(token)
        runtime = open_runtime(config, model, store=True)
        try:
            with config_errors():
                runtime.config.agent(agent)
                try:  # hosts hide stderr: the tools that need the model answer the error too
                    runtime.model(runtime.model_name(agent))
                except ConfigError as exc:
                    err.print(
                        f"kernos mcp: {exc} (task and compress answer this until it is set in "
                        "the server's env)",
                        markup=False,
                    )
                server = KernosMcpServer(runtime, agent, foreground_wait=foreground_wait)
                if address is None:
                    work = server.serve_stdio()
                else:
                    err.print(f"kernos mcp: http://{http}/mcp (agent {agent})", markup=False)
                    work = server.serve_http(
                        address[0], address[1], token, session_idle=idle, max_sessions=max_sessions
                    )
                import asyncio

                asyncio.run(run_until_signal(work))
        except Interrupted as exc:
            raise typer.Exit(exc.exit_code) from None
        finally:
            runtime.close()

    @group.command("login")
    def login_command(
        name: Annotated[str, typer.Argument(help="The [mcp.NAME] server to log in to.")],
        config: ConfigOption = None,
    ) -> None:
        """Log in to an OAuth MCP server and store its tokens.

        Prints the authorization URL (and opens a browser when there is a display), receives the
        redirect on a loopback port, stores the tokens in the state directory (0600), and lists
        the server's tools with them."""
        import asyncio

        from kernos.tools import mcp_login

        def show(url: str) -> None:
            err.print(f"kernos mcp login: open this URL to log in to [{name}]:", markup=False)
            err.print(url, markup=False, soft_wrap=True)

        runtime = open_runtime(config)
        try:
            with config_errors():
                tools = asyncio.run(mcp_login(runtime.config, name, show=show))
        finally:
            runtime.close()
        err.print(f"logged in to [{name}]: {len(tools)} tools", markup=False)

    @group.command("logout")
    def logout_command(
        name: Annotated[str, typer.Argument(help="The [mcp.NAME] server to log out of.")],
        config: ConfigOption = None,
    ) -> None:
        """Forget an OAuth MCP server's stored tokens and registered client."""
        from kernos.tools import mcp_logout

        runtime = open_runtime(config)
        try:
            with config_errors():
                had = mcp_logout(runtime.config, name)
        finally:
            runtime.close()
        said = "logged out of" if had else "no login was stored for"
        err.print(f"{said} [{name}]", markup=False)

    @group.command("status")
    def status_command(
        config: ConfigOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = (
            False
        ),
    ) -> None:
        """Say whether each configured MCP server is usable.

        Starts every server as a run would: connected, needs login (with the command to run)
        or failed (with the reason). Exit 0 when all are usable, 1 otherwise."""
        import asyncio
        import json

        from kernos.tools import mcp_status

        runtime = open_runtime(config)
        try:
            with config_errors():
                found = asyncio.run(mcp_status(runtime.config))
        finally:
            runtime.close()
        if as_json:
            write_stdout(json.dumps({"servers": [s.data() for s in found]}, ensure_ascii=False))
        else:
            for one in found:
                write_stdout(one.line())
            if not found:
                err.print("no [mcp.NAME] servers are configured", markup=False)
        raise typer.Exit(EXIT_OK if all(s.usable for s in found) else EXIT_FAILED)

    app.add_typer(group, name="mcp")

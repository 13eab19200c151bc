"""``kernos mcp``: serve an agent's kernos tools to Claude Code, Cursor, OpenCode, Codex (MCP)."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from kernos.cli._common import ConfigOption, ModelOption, config_errors, err, fail, open_runtime


def register(app: typer.Typer) -> None:
    @app.command("mcp")
    def mcp_command(
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
        MCP: stdio by default, Streamable HTTP with --http."""
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

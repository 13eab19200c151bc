"""A channel keeps one pooled keep-alive connection and closes it when the output
side closes. The peer is a loopback HTTP/1.1 server that counts the TCP connections it accepts."""

from __future__ import annotations

import gc
import warnings
from pathlib import Path

from typer.testing import CliRunner

from kernos.cli import app
from kernos.output import OutputKernel, build_channel
from tests._wait import wait_for
from tests.output.conftest import Receiver


def keep_alive() -> Receiver:
    return Receiver(keep_alive=True).start()


def wait_closed(receiver: Receiver) -> None:
    """Wait (not a timing assertion: the bound only stops a hang) for the server to see EOF."""
    wait_for(lambda: receiver.closed >= receiver.opened, "every connection closed", 10)


async def test_twenty_webhook_items_share_one_connection() -> None:
    receiver = keep_alive()
    try:
        kernel = OutputKernel([build_channel("hook", {"kind": "webhook", "url": receiver.url})])
        receipt = await kernel.send("hook", [f"item {n}" for n in range(20)])
        assert receipt.all_sent
        again = await kernel.send("hook", "one more")  # a second call reuses it too
        assert again.all_sent
        assert (len(receiver.received), receiver.opened) == (21, 1)
        await kernel.aclose()
        wait_closed(receiver)
        assert receiver.closed == 1
    finally:
        receiver.stop()


async def test_onebot_items_share_one_connection() -> None:
    receiver = keep_alive()
    try:
        table = {"kind": "onebot", "base_url": receiver.url, "recipients": ["*"]}
        async with OutputKernel([build_channel("qq", table)]) as kernel:
            for n in range(5):
                receipt = await kernel.send("qq", f"hi {n}", meta='{"group_id": 1}')
                assert receipt.all_sent, receipt.text
        wait_closed(receiver)
        assert (receiver.opened, receiver.closed) == (1, 1)
    finally:
        receiver.stop()


async def test_a_closed_kernel_sends_again_on_a_new_connection() -> None:
    receiver = keep_alive()
    try:
        kernel = OutputKernel([build_channel("hook", {"kind": "webhook", "url": receiver.url})])
        assert (await kernel.send("hook", "a")).all_sent
        await kernel.aclose()
        assert (await kernel.send("hook", "b")).all_sent
        await kernel.aclose()
        wait_closed(receiver)
        assert (receiver.opened, receiver.closed) == (2, 2)
    finally:
        receiver.stop()


async def test_a_failing_close_hook_does_not_stop_the_others() -> None:
    from kernos.output import Channel

    closed: list[str] = []

    async def noop(item: object, ctx: object) -> None:
        return None

    async def broken() -> None:
        raise RuntimeError("boom")

    async def fine() -> None:
        closed.append("b")

    kernel = OutputKernel([Channel("a", noop, aclose=broken), Channel("b", noop, aclose=fine)])
    await kernel.aclose()
    assert closed == ["b"]


def test_http_channel_loads_no_ca_bundle() -> None:
    """An http:// channel's client gets a TLS context without trust anchors (loading the CA
    bundle was most of a new client's cost); an https:// one verifies as usual."""
    import asyncio
    import ssl

    from kernos.output.channels._common import HttpClient

    async def contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
        plain, tls = HttpClient("http://x", timeout=1), HttpClient("https://x", timeout=1)
        try:
            return _ssl_context(plain._open()), _ssl_context(tls._open())
        finally:
            await plain.aclose()
            await tls.aclose()

    plain, tls = asyncio.run(contexts())
    assert plain.cert_store_stats()["x509_ca"] == 0
    assert tls.verify_mode == ssl.CERT_REQUIRED and tls.check_hostname


def _ssl_context(client: object) -> object:
    pool = client._transport._pool  # type: ignore[attr-defined]
    return pool._ssl_context


def test_kernos_send_closes_its_connection(tmp_path: Path) -> None:
    """In-process `kernos send`: the pooled client is closed before the loop ends, so nothing is
    left for the garbage collector to warn about (an unclosed socket is a ResourceWarning)."""
    receiver = keep_alive()
    try:
        (tmp_path / "kernos.toml").write_text(
            f'[channels.hook]\nkind = "webhook"\nurl = "{receiver.url}/hook"\n', encoding="utf-8"
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            done = CliRunner().invoke(
                app, ["send", "hook", "a", "b", "c", "--config", str(tmp_path / "kernos.toml")]
            )
            gc.collect()
        assert done.exit_code == 0, done.output
        assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
        wait_closed(receiver)
        assert (len(receiver.received), receiver.opened, receiver.closed) == (3, 1, 1)
    finally:
        receiver.stop()

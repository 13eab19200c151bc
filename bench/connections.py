"""CPU per webhook item: ``.venv/bin/python bench/connections.py``.

A keep-alive HTTP/1.1 receiver runs in a separate process, so the figure is the sender's CPU
alone (``time.process_time``). Each round sends ``ITEMS`` one-item calls through a webhook
channel and reports CPU ms per item; the figure is the median of the rounds, each the best of
two. Run it with ``PYTHONPATH`` pointing at another checkout's ``src`` to compare revisions (the
pre-pooling code made a new client per item and has no ``OutputKernel.aclose``), or interleave
both: ``bench/connections.py --against /path/to/other/src``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _revisions import against, one_run

import kernos
from kernos.output import OutputKernel, build_channel

ITEMS = 200
ROUNDS = 3

RECEIVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args): pass
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


async def one_round(url: str) -> float:
    kernel = OutputKernel([build_channel("hook", {"kind": "webhook", "url": url})])
    await kernel.send("hook", "warm-up")
    start = time.process_time()
    for n in range(ITEMS):
        receipt = await kernel.send("hook", f"item {n}")
        assert receipt.all_sent, receipt.text
    spent = time.process_time() - start
    closing = getattr(kernel, "aclose", None)
    if closing is not None:
        await closing()
    return spent / ITEMS * 1000


def main() -> None:
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout is not None
        url = f"http://127.0.0.1:{receiver.stdout.readline().strip()}/hook"
        figures = [min(asyncio.run(one_round(url)) for _ in range(2)) for _ in range(ROUNDS)]
    finally:
        receiver.terminate()
        receiver.wait()
    if one_run():
        print(json.dumps({"webhook CPU ms/item": statistics.median(figures)}))
        return
    print(f"kernos from {kernos.__file__}")
    print(f"webhook, http://, {ITEMS} one-item calls: {statistics.median(figures):.3f} ms CPU/item")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--against":
        against(__file__, sys.argv[2], rounds=3)
    else:
        main()

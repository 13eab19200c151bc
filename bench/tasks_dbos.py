"""Benchmark of the task engines (not a test): ``.venv/bin/python bench/tasks_dbos.py [--quick]``
(``--part N``, repeatable: only those parts; ``--part 3i``: part 3 with an instant run model;
``--part idle``: an idle worker's CPU; ``--hosts CPU [--hosts-netns]``: part 3 on emulated hosts;
``--rounds N``: part 3 as N pairs of runs, 1 and 3 workers alternated, with the ratios' medians;
``--no-spread``: part 3 with ``[tasks] spread = false``, the first worker to poll takes what the
limit allows).

1. Start-up: what ``import dbos`` and a DBOS launch on SQLite add to a process.
2. In one process: N background children through the real ``task`` tool, manager and store, on the
   local engine and on the DBOS engine (DBOS on SQLite): 1,000 instant children, and 200 children
   whose model answers after 200 ms. Time and peak RSS.
3. DBOS on a real PostgreSQL (started here, as in the tests): one ``kernos run`` whose children run
   on 1 or 3 ``kernos worker`` processes; the model a local server answering after 200 ms, the
   concurrency 60. Time from the run's start to its end, peak requests in flight, each process's
   peak RSS, CPU seconds of the run and of each worker (and per child, and the workers' CPU in
   the children phase, sampled every 50 ms), how long a child waited from spawned to started,
   how many children each worker ran, each worker's share of the limit that the queue held at
   the end (``[tasks] spread``: the limit split among the live workers; none: all of it),
   DBOS's "Contention detected" warnings (each doubles that worker's queue polling interval
   for a while), and how busy this machine's cores were in the children phase (from
   /proc/stat: every process, this script's model server and other work included; near 100%,
   the machine rather than the workers bounds the phase). The figure that matters:
   3 workers in at most 0.5× the time of 1. Reported next to it: the same ratio for the
   children phase alone (first child spawned → last child finished), which leaves out what no
   worker count changes: the run's start-up, its 13 model turns of 200 ms that spawn the 200
   children 16 at a time, and its end. A variant (``--part 3i``) answers the run's own model
   at once, so spawning is quick and the fixed costs are small; the children still take 200 ms.

   The model server is kernos.testing's FakeOpenAIServer made to answer HTTP/1.1 with
   keep-alive here (as a real model API does; the class itself answers HTTP/1.0, a connection
   per request): each run prints its requests and the connections they came over.

   Without ``--hosts`` the scaling figure is CPU-bound on a machine with fewer cores than
   processes: with 3 workers, the run, PostgreSQL and this script's model server (one process
   each) on 2 cores, the children phase cannot be shorter than the CPU it needs divided by the
   cores. The budget for 0.5× is printed: the children phase of 1 worker is 200 × 200 ms / 60
   ≈ 0.7 s of model time plus whatever CPU one worker needs for 200 children; 3 workers reach
   0.5× only while 200 × (CPU per child) / min(cores, 3) stays under half of that phase. On 2
   cores, 3 workers can only split the same CPU seconds over the same 2 cores, so the ratio
   stays near 1 unless the CPU per child is small next to the model's 200 ms.

   ``--hosts CPU`` (e.g. ``--hosts 0.25``) emulates the fleet the issue is about: each ``kernos
   worker`` runs on a host of its own with CPU cores, a cgroup v1 cpu controller group with a
   CFS quota of CPU × 100 ms per 100 ms period (bench/_hosts.py; the worker's pid is in it
   before it imports anything, the groups are removed after, stale ones of a killed bench at
   the next start). PostgreSQL, the model server and the run stay outside the quotas: the
   shared services of a fleet and the machine the user runs ``kernos run`` on. What it models:
   hosts of equal, fixed CPU, so 3 workers have 3× the CPU of 1 (choose CPU so that 3 × CPU
   leaves room on this machine's cores for PostgreSQL and the run, and so that 1 worker is
   bound by its host: its CPU per child × 200 well above the 0.7 s of model time; on 2 cores,
   0.4 left too little: with 3 workers the machine was 93% busy, 0.25 leaves room). Printed:
   the share of the hosts' quota the workers used in the children phase (near 100%: bound by
   their CPU) and how often the quota throttled them. What it does not model: network latency
   (``--hosts-netns`` puts each worker in a network namespace of its own too, tests/_netns.py,
   so its store and model traffic crosses a veth link to the host, real TCP but no added delay),
   nor separate disks, memory buses or caches (one machine's, shared), nor PostgreSQL on a
   machine of its own (it competes with the run and the model server, and with whatever else
   runs here, for the cores left). Needs root; otherwise the option exits with one line.

idle. One ``kernos worker`` on PostgreSQL with nothing to do: its CPU seconds over 20 s, read
   from /proc, at the default ``[tasks] poll`` (0.1 s) and at 0.5 s. Most of it is DBOS's queue
   worker thread polling the kernos queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "tasks"))
sys.path.insert(0, str(ROOT / "bench"))
KERNOS = str(Path(sys.executable).with_name("kernos"))


def startup() -> None:
    def timed(code: str) -> float:
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
            best = min(best, time.perf_counter() - started)
        return best

    base = timed("import kernos.cli")
    with_dbos = timed("import kernos.cli, dbos")
    home = tempfile.mkdtemp()
    launch = timed(
        "import dbos, time; t = time.perf_counter(); "
        f"dbos.DBOS(config={{'name': 'kernos', 'system_database_url': 'sqlite:///{home}/d.sqlite',"
        " 'application_version': 'b', 'log_level': 'WARNING'}); dbos.DBOS.launch(); "
        "dbos.DBOS.destroy()"
    )
    print("1. start-up (best of 3 fresh interpreters)")
    print(f"   import kernos.cli {base:.2f} s; + import dbos {with_dbos - base:+.2f} s; "
          f"import dbos + launch + destroy on SQLite {launch:.2f} s")  # fmt: skip


async def in_process(engine: str, count: int, delay: float, concurrency: int) -> tuple[float, int]:
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    from kernos.boundary import ToolContext, call_tool
    from kernos.runtime import Runtime, load_config
    from kernos.tasks import TaskManager

    async def answer(messages: Any, info: Any) -> ModelResponse:
        if delay:
            await asyncio.sleep(delay)
        return ModelResponse(parts=[TextPart("done")])

    home = Path(tempfile.mkdtemp())
    (home / "kernos.toml").write_text(
        f'default_model = "fn"\n[categories.quick]\ndescription = "q"\n'
        f'[tasks]\nengine = "{engine}"\nconcurrency = {concurrency}\n',
        encoding="utf-8",
    )
    os.environ["KERNOS_HOME"] = str(home / ".kernos")
    runtime = Runtime(load_config(cwd=home))
    model = FunctionModel(answer)
    runtime.model = lambda name: model  # type: ignore[method-assign]
    manager = TaskManager(runtime)
    session = runtime.session("main", record_turns=False, instructions="")
    session.add_tools(manager.tools_for(session))
    ctx = ToolContext(extras={"session": session})
    started = time.perf_counter()
    left = count
    while left:
        size = min(16, left)
        items = [{"prompt": f"child {left - i}"} for i in range(size)]
        args = {"run_in_background": True, "category": "quick", "tasks": items}
        result = await call_tool(session.tools["task"], json.dumps(args), ctx)
        assert not result.is_error, result.text
        left -= size
    await manager.wait_all()
    elapsed = time.perf_counter() - started
    done = sum(1 for r in manager.records.values() if r.status == "completed")
    await manager.aclose(wait=True)
    runtime.close()
    return elapsed, done


def run_in_process(engine: str, count: int, delay: float, concurrency: int) -> None:
    code = (
        "import asyncio, resource, sys; sys.path.insert(0, 'bench'); import tasks_dbos as b; "
        f"t, d = asyncio.run(b.in_process({engine!r}, {count}, {delay}, {concurrency})); "
        "print(t, d, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    elapsed, done, rss = float(out[-3]), int(out[-2]), int(out[-1])
    label = "local" if engine == "local" else "DBOS/SQLite"
    print(f"   {label:<12} {count:>5} × {delay * 1000:>3.0f} ms  c={concurrency:<3} "
          f"{elapsed:7.2f} s  completed {done}/{count}  peak RSS {rss / 1024:.0f} MB")  # fmt: skip


def workers_on_postgres(
    workers: int,
    count: int,
    delay: float,
    concurrency: int,
    *,
    instant_parent: bool = False,
    hosts: float = 0.0,
    netns: bool = False,
    spread: bool = True,
) -> dict[str, float]:
    """One part-3 run; its figures (seconds): ``elapsed``, ``children`` (first spawned → last
    finished), ``run_cpu`` and ``worker_cpu`` (all workers). ``instant_parent``: only the
    children's model answers after ``delay``, the run's own model at once. ``hosts``: each
    worker in a cgroup of that many CPUs of its own (bench/_hosts.py); ``netns``: each in a
    network namespace of its own too, reaching PostgreSQL and the model over a veth link."""
    import psutil
    import psycopg
    from _hosts import CpuHosts

    from _netns import Namespaces
    from _postgres import PostgresServer, create_database
    from kernos.testing import FakeOpenAIServer, text, tool_call

    with contextlib.ExitStack() as stack:
        net = stack.enter_context(Namespaces(workers)) if netns else None
        cpu = stack.enter_context(CpuHosts(workers, hosts)) if hosts else None
        pg = stack.enter_context(PostgresServer(listen=[net.interface] if net else []))
        url = create_database(pg.url)
        linked = url.replace("@127.0.0.1:", f"@{net.host}:") if net else url
        home = Path(tempfile.mkdtemp())
        (home / "kernos.toml").write_text(
            'default_model = "openai-chat:bench"\n'
            '[agents.main]\ninstructions = "MAIN"\n[agents.explore]\ndescription = "e"\n'
            'instructions = "CHILD"\n'
            f"[tasks]\nconcurrency = {concurrency}\nrun_executes = false\n"
            f"spread = {str(spread).lower()}\n",
            encoding="utf-8",
        )
        calls = []
        for start in range(0, count, 16):
            items = [{"prompt": f"c{n}"} for n in range(start, min(start + 16, count))]
            calls.append({"run_in_background": True, "subagent_type": "explore", "tasks": items})
        inflight, peak, lock = [0], [0], threading.Lock()

        def child(request: dict[str, Any]) -> bool:
            system = json.dumps(request.get("messages", [])[:1])
            if "CHILD" in system:
                with lock:
                    inflight[0] += 1
                    peak[0] = max(peak[0], inflight[0])
                return True
            return False

        script = [tool_call("task", c, when=lambda r, n=n: _turn(r) == n) for n, c in
                  enumerate(calls)]  # fmt: skip
        script += [
            text("all spawned", when=lambda r: _turn(r) >= len(calls) and _main(r), repeat=True),
            text("done", when=child, repeat=True),
        ]
        model = FakeOpenAIServer(
            *script, delay=0.0 if instant_parent else delay, host=net.host if net else "127.0.0.1"
        )
        with model as server:
            connections = _keep_alive(server)
            original = server._answer

            def answer(request: dict[str, Any], auth: str) -> Any:
                planned = original(request, auth)
                if "CHILD" in json.dumps(request.get("messages", [])[:1]):
                    if instant_parent:
                        time.sleep(delay)  # a handler thread of its own; the server's lock is free
                        _leave(inflight, lock)
                    else:
                        threading.Timer(delay, _leave, (inflight, lock)).start()
                return planned

            server._answer = answer  # type: ignore[method-assign]
            env = {**os.environ, **server.env(), "KERNOS_HOME": str(home / ".kernos"),
                   "KERNOS_STORE_URL": url}  # fmt: skip
            procs = []
            for n in range(workers):
                argv = [KERNOS, "worker"]
                argv = net.exec(n, argv) if net else argv
                argv = cpu.wrap(n, argv) if cpu else argv
                worker_env = {**env, "KERNOS_STORE_URL": linked}
                worker = subprocess.Popen(
                    argv, cwd=home, env=worker_env, stderr=subprocess.PIPE, text=True
                )
                procs.append(worker)
            logs = [_ready(proc) for proc in procs]  # each is up (its launch is not measured)
            idle = [psutil.Process(p.pid) for p in procs]
            before = [_cpu(p) for p in idle]
            throttled_before = [cpu.throttled(n) for n in range(workers)] if cpu else []
            requests_before = len(server.requests)
            opened_before = connections[0]
            samples: list[tuple[float, float]] = []  # (time, the workers' CPU seconds)
            machine: list[tuple[float, float]] = []  # (time, the whole machine's)
            sampling = threading.Event()
            sampler = threading.Thread(target=_sample, args=(procs, samples, sampling, machine))
            sampler.start()
            started, wall = time.perf_counter(), time.time()
            output = stack.enter_context(tempfile.TemporaryFile("w+"))
            run = subprocess.Popen(
                [KERNOS, "run", "go", "-q"], cwd=home, env=env, stdout=output, stderr=output,
                text=True,
            )  # fmt: skip
            _, status, usage = os.wait4(run.pid, 0)  # the run's own rusage: its CPU, its RSS
            run.returncode = os.waitstatus_to_exitcode(status)
            elapsed = time.perf_counter() - started
            used = [_cpu(p) - b for p, b in zip(idle, before, strict=True)]
            sampling.set()
            sampler.join()
            worker_rss = [_peak_rss(p.pid) for p in procs]
            throttled = [
                tuple(a - b for a, b in zip(cpu.throttled(n), throttled_before[n], strict=True))
                for n in range(workers)
            ] if cpu else []  # fmt: skip
            requests = len(server.requests) - requests_before
            opened = connections[0] - opened_before
            run_cpu = usage.ru_utime + usage.ru_stime
            contended = [sum("Contention detected" in line for line in log) for log in logs]
            queue_share = _share(url, "kernos.openai-chat:bench")
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.communicate(timeout=60)
                except subprocess.TimeoutExpired:  # say what it was doing, then stop it
                    proc.kill()
                    _, err = proc.communicate()
                    said = "".join(logs[procs.index(proc)]) + err  # drained since it was ready
                    print(f"worker {proc.pid} did not stop in 60 s; its stderr ends:\n"
                          f"{said[-3000:]}")  # fmt: skip
                    raise
            output.seek(0)
            assert run.returncode == 0, output.read()
        with psycopg.connect(url) as db:
            ((first, spawned, last),) = db.execute(
                "SELECT MIN(created_at), MAX(created_at), MAX(finished_at) FROM tasks"
            ).fetchall()
            ((waited, longest),) = db.execute(
                "SELECT AVG(started_at - created_at), MAX(started_at - created_at) FROM tasks"
            ).fetchall()
            shares = [n for (n,) in db.execute(
                "SELECT COUNT(*) FROM tasks GROUP BY executor ORDER BY COUNT(*) DESC"
            )]  # fmt: skip
    worker_cpu = sum(used)
    in_phase = _at(samples, last) - _at(samples, first)  # the workers' CPU in the children phase
    cores = os.cpu_count() or 1
    busy = (_at(machine, last) - _at(machine, first)) / (cores * (last - first))
    label = " (the run's model instant)" if instant_parent else ""
    where = f" on hosts of {hosts:g} CPU" if hosts else ""
    where += " in network namespaces" if netns else ""
    print(f"   DBOS/PG {workers} worker(s){where} {count:>4} × {delay * 1000:.0f} ms{label}  "
          f"c={concurrency:<3} {elapsed:7.2f} s  peak in flight {peak[0]}")  # fmt: skip
    print(f"      run start-up {first - wall:.2f} s, spawning {spawned - first:.2f} s, "
          f"children {last - first:.2f} s (first spawned → last finished), "
          f"end {wall + elapsed - last:.2f} s")  # fmt: skip
    print(f"      CPU: run {run_cpu:.1f} s ({run_cpu / count * 1000:.0f} ms per child, start-up "
          f"included), workers {' + '.join(f'{u:.1f}' for u in used)} s "
          f"({worker_cpu / count * 1000:.0f} ms per child), {in_phase:.1f} s of it in the "
          f"children phase")  # fmt: skip
    if hosts:
        share = in_phase / (workers * hosts * (last - first))
        print(f"      the hosts' CPU quota {hosts:g} CPU each ({hosts * 100:.0f} ms per 100 ms): "
              f"the workers used {share:.0%} of it in the children phase")  # fmt: skip
    bound = " (near all of it: this machine, not the workers, bounds the phase)"
    print(f"      this machine's {cores} cores were busy {busy:.0%} of the children phase "
          f"(every process on it){bound if busy >= 0.9 else ''}")  # fmt: skip
    print(f"      peak RSS: run {usage.ru_maxrss / 1024:.0f} MB, workers "
          f"{' + '.join(f'{r / 1024:.0f}' for r in worker_rss)} MB; model server: "
          f"{requests} requests over {opened} connections (HTTP/1.1 keep-alive)")  # fmt: skip
    print(f"      children per worker {' + '.join(map(str, shares))}; a child waited "
          f"{waited:.2f} s on average from spawned to started ({longest:.2f} s at most); DBOS "
          f"queue contention warnings {' + '.join(map(str, contended))}")  # fmt: skip
    print(
        f"      each worker's share of the limit at the end (spread "
        f"{'on' if spread else 'off'}): {queue_share or 'none (all of it)'}"
    )
    if throttled:
        periods = ", ".join(f"{t:.0f} of {p:.0f} periods ({s:.1f} s)" for p, t, s in throttled)
        print(f"      throttled by their quota in {periods}")
    return {
        "elapsed": elapsed,
        "children": last - first,
        "run_cpu": run_cpu,
        "worker_cpu": worker_cpu,
        "phase_cpu": in_phase,
        "machine_busy": busy,
    }


def scaling(
    count: int,
    delay: float,
    concurrency: int,
    *,
    instant_parent: bool = False,
    hosts: float = 0.0,
    netns: bool = False,
    spread: bool = True,
    rounds: int = 1,
) -> None:
    """1 worker, then 3: the ratios of the whole run and of its children phase, and the CPU
    budget that bounds the ratio on this machine (or on the emulated hosts). ``rounds`` > 1:
    that many pairs, in the order 1-3, 3-1, 1-3, ... (a drift in the machine's speed weighs on
    both sides alike), each pair's ratios and their medians; the budget is the last pair's."""
    kwargs: dict[str, Any] = {
        "instant_parent": instant_parent, "hosts": hosts, "netns": netns, "spread": spread,
    }  # fmt: skip
    whole: list[float] = []
    phase: list[float] = []
    for n in range(rounds):
        load = os.getloadavg()[0]
        order = (1, 3) if n % 2 == 0 else (3, 1)
        runs = {w: workers_on_postgres(w, count, delay, concurrency, **kwargs) for w in order}
        one, three = runs[1], runs[3]
        print(f"   machine load (1-minute average, shared with other work): {load:.2f} before, "
              f"{os.getloadavg()[0]:.2f} after")  # fmt: skip
        whole.append(three["elapsed"] / one["elapsed"])
        phase.append(three["children"] / one["children"])
        if rounds > 1:
            print(f"   round {n + 1} of {rounds}: whole run {whole[-1]:.2f}×, children phase "
                  f"{phase[-1]:.2f}× (the machine busy {one['machine_busy']:.0%} with 1 worker, "
                  f"{three['machine_busy']:.0%} with 3)")  # fmt: skip
    if rounds > 1:
        print(f"   over {rounds} rounds: whole run median {statistics.median(whole):.2f}× "
              f"({min(whole):.2f}-{max(whole):.2f}), children phase median "
              f"{statistics.median(phase):.2f}× ({min(phase):.2f}-{max(phase):.2f}) "
              f"(target ≤ 0.5×)")  # fmt: skip
    cores = os.cpu_count() or 1
    model_time = count * delay / concurrency
    print(f"   3 workers / 1 worker: whole run {three['elapsed'] / one['elapsed']:.2f}×, "
          f"children phase {three['children'] / one['children']:.2f}× (target ≤ 0.5×)")  # fmt: skip
    if hosts:
        print(f"   CPU budget on hosts of {hosts:g} CPU: the children need {model_time:.1f} s of "
              f"model time at c={concurrency}; in the children phase 1 worker used "
              f"{one['phase_cpu']:.1f} CPU s, at least {one['phase_cpu'] / hosts:.1f} s of its "
              f"host (it took {one['children']:.1f} s); 3 workers {three['phase_cpu']:.1f} CPU "
              f"s, at least {three['phase_cpu'] / min(3 * hosts, cores):.1f} s of 3 × "
              f"{hosts:g} CPU (they took {three['children']:.1f} s)")  # fmt: skip
        return
    floor = three["worker_cpu"] / min(cores, 3)
    print(f"   CPU budget on {cores} core(s): the children need {model_time:.1f} s of model time "
          f"at c={concurrency}; 3 workers used {three['worker_cpu']:.1f} CPU s, at least "
          f"{floor:.1f} s on min({cores}, 3) cores, so their children phase cannot be shorter "
          f"than {max(model_time, floor):.1f} s (1 worker's: {one['children']:.1f} s)")  # fmt: skip


def idle_worker(seconds: float = 20.0, poll: float | None = None) -> None:
    """A ``kernos worker`` with nothing to do: CPU seconds over ``seconds`` (from /proc);
    ``poll``: its ``[tasks] poll`` (``None``: the default)."""
    from _postgres import PostgresServer, create_database

    with PostgresServer() as pg:
        url = create_database(pg.url)
        home = Path(tempfile.mkdtemp())
        (home / "kernos.toml").write_text(
            'default_model = "openai-chat:bench"\n[tasks]\nrun_executes = false\n'
            + (f"poll = {poll}\n" if poll is not None else ""),
            encoding="utf-8",
        )
        env = {**os.environ, "KERNOS_HOME": str(home / ".kernos"), "KERNOS_STORE_URL": url,
               "OPENAI_API_KEY": "unused"}  # fmt: skip
        proc = subprocess.Popen(
            [KERNOS, "worker"], cwd=home, env=env, stderr=subprocess.PIPE, text=True
        )
        try:
            _ready(proc)
            time.sleep(2.0)  # past its start-up
            before, started = _proc_cpu(proc.pid), time.perf_counter()
            time.sleep(seconds)
            used, elapsed = _proc_cpu(proc.pid) - before, time.perf_counter() - started
            threads = len(os.listdir(f"/proc/{proc.pid}/task"))
        finally:
            proc.terminate()
            proc.communicate(timeout=60)
    every = f"[tasks] poll = {poll:g}" if poll is not None else "the default poll, 0.1 s"
    print(f"   idle kernos worker ({every}): {used:.2f} CPU s in {elapsed:.0f} s "
          f"({used / elapsed * 100:.1f}% of a core; {threads} threads)")  # fmt: skip


def _share(url: str, queue: str) -> int | None:
    """The queue's per-executor limit (DBOS's ``worker_concurrency``) as the system database
    holds it."""
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=url, application_name="kernos")
    try:
        found = client.retrieve_queue(queue)
        return found.worker_concurrency if found is not None else None
    finally:
        client.destroy()


def _keep_alive(server: Any) -> list[int]:
    """Make ``server`` (a started FakeOpenAIServer) answer HTTP/1.1 with keep-alive, as a real
    model API does, rather than HTTP/1.0 with a connection per request; returns a counter of
    the connections accepted since. Its answers keep their Content-Length; a streamed answer
    (no length) still ends by closing its connection, said in a ``Connection: close``."""
    from kernos.testing._server import _Handler

    opened, lock = [0], threading.Lock()

    class KeepAlive(_Handler):
        protocol_version = "HTTP/1.1"
        closing = False

        def setup(self) -> None:
            super().setup()
            with lock:
                opened[0] += 1

        def _send_stream(self, chunks: list[dict[str, Any]]) -> None:
            self.close_connection = self.closing = True
            super()._send_stream(chunks)

        def end_headers(self) -> None:
            if self.closing:
                self.send_header("Connection", "close")
            super().end_headers()

    server._httpd.RequestHandlerClass = KeepAlive  # serve_forever builds one per connection
    return opened


def _ready(proc: subprocess.Popen[str]) -> list[str]:
    """Wait for a worker's "executing" line, then keep its stderr drained: the list its later
    lines go to."""
    assert proc.stderr is not None
    stderr = proc.stderr
    for line in stderr:
        if "executing" in line:
            break
    else:
        raise RuntimeError(f"a worker ended before it was ready (exit {proc.wait()})")
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(stderr), daemon=True).start()
    return lines


def _sample(
    procs: list[subprocess.Popen[str]],
    samples: list[tuple[float, float]],
    done: threading.Event,
    machine: list[tuple[float, float]] | None = None,
) -> None:
    """Every 50 ms until ``done``: the time and the CPU seconds of all ``procs`` so far (and in
    ``machine``, the time and the CPU seconds every process on this machine used so far)."""
    while True:
        now = time.time()
        samples.append((now, sum(_proc_cpu(p.pid) for p in procs)))
        if machine is not None:
            machine.append((now, _machine_cpu()))
        if done.wait(0.05):
            return


def _machine_cpu() -> float:
    """CPU seconds this machine's cores were busy since boot (all but idle and iowait), from
    /proc/stat."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _at(samples: list[tuple[float, float]], when: float) -> float:
    """The workers' CPU seconds at ``when``: the last sample taken by then."""
    return max((cpu for t, cpu in samples if t <= when), default=samples[0][1])


def _cpu(process: Any) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a running process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss(pid: int) -> int:
    """A running process's peak resident set (VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _leave(inflight: list[int], lock: threading.Lock) -> None:
    with lock:
        inflight[0] -= 1


def _main(request: dict[str, Any]) -> bool:
    return "MAIN" in json.dumps(request.get("messages", [])[:1])


def _turn(request: dict[str, Any]) -> int:
    """How many task calls the main agent has made so far in this request's history."""
    if not _main(request):
        return -1
    return sum(1 for m in request.get("messages", []) if m.get("role") == "tool")


def _parts(argv: list[str]) -> set[str]:
    """``--part N`` (repeatable; ``3i``: part 3's variant): run only those parts; default 1-3."""
    chosen = {argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--part"}
    chosen |= {arg.split("=", 1)[1] for arg in argv if arg.startswith("--part=")}
    return chosen or {"1", "2", "3"}


def _rounds(argv: list[str]) -> int:
    """``--rounds N`` (or ``--rounds=N``): part 3's pairs of runs; 1 when absent."""
    values = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--rounds"]
    values += [arg.split("=", 1)[1] for arg in argv if arg.startswith("--rounds=")]
    if not values:
        return 1
    if not values[-1].isdigit() or not 1 <= int(values[-1]) <= 20:
        sys.exit(f"--rounds takes a number of pairs of runs, 1-20 (e.g. --rounds 3), "
                 f"not {values[-1]!r}")  # fmt: skip
    return int(values[-1])


def _hosts(argv: list[str]) -> float:
    """``--hosts CPU`` (or ``--hosts=CPU``): each worker of part 3 on a host of CPU cores; 0 when
    absent. Exits with one line when the value or this machine cannot do it."""
    from _hosts import unavailable

    values = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--hosts"]
    values += [arg.split("=", 1)[1] for arg in argv if arg.startswith("--hosts=")]
    if not values:
        if "--hosts-netns" in argv:
            sys.exit("--hosts-netns goes with --hosts CPU (e.g. --hosts 0.5 --hosts-netns)")
        return 0.0
    try:
        cores = float(values[-1])
    except ValueError:
        cores = 0.0
    if not 0.01 <= cores <= (os.cpu_count() or 1):
        sys.exit(f"--hosts takes a host's CPU quota in cores, 0.01-{os.cpu_count() or 1} "
                 f"(e.g. --hosts 0.5), not {values[-1]!r}")  # fmt: skip
    reason = unavailable()
    if reason is not None:
        sys.exit(f"--hosts cannot emulate hosts here: {reason}")
    return cores


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    parts = _parts(sys.argv)
    hosts = _hosts(sys.argv)
    netns = "--hosts-netns" in sys.argv
    spread = "--no-spread" not in sys.argv
    rounds = _rounds(sys.argv)
    on = f", each worker on a host of {hosts:g} CPU" if hosts else ""
    on += " in a network namespace of its own" if netns else ""
    if "1" in parts:
        startup()
    if "2" in parts:
        print("2. in one process (DBOS on SQLite, its queue polled every 0.1 s)")
        n = 200 if quick else 1000
        for engine in ("local", "dbos"):
            run_in_process(engine, n, 0.0, 5)
        for engine in ("local", "dbos"):
            run_in_process(engine, 200, 0.2, 60)
    if "3" in parts:
        print(f"3. DBOS on PostgreSQL: one kernos run, children on kernos worker processes{on}")
        scaling(200, 0.2, 60, hosts=hosts, netns=netns, spread=spread, rounds=rounds)
    if "3i" in parts:
        print(f"3i. as 3, the run's own model answering at once (spawning is quick){on}")
        scaling(
            200, 0.2, 60, instant_parent=True, hosts=hosts, netns=netns, spread=spread,
            rounds=rounds,
        )  # fmt: skip
    if "idle" in parts:
        print("idle. one kernos worker on PostgreSQL with nothing to do")
        idle_worker()
        idle_worker(poll=0.5)

"""Where a bench's CPU goes, per layer: py-spy samples summed by layer.

Usage: ``python bench/profile_layers.py [--rate 250] [--top 12] [--raw OUT]
-- bench/bench_engine.py --stores sqlite ...`` records the bench with py-spy
(``pip install py-spy`` into your venv; it is not a project dependency),
every thread of the bench's process (not its subprocesses: a broker bench's
worker process is left out, so the figures are the engine's side), then
prints the share of on-CPU samples per layer. ``--from-raw FILE``
summarizes a recording made before (``py-spy record --threads -f raw``).

``--cprofile`` instead runs the bench in this process under cProfile, one
profiler per thread timed by that thread's CPU clock (so waiting, and other
processes on a shared machine, count for little), and sums each function's
self time by layer the same way; this one also sees the store's thread.

Each sample counts for the layer of its innermost frame (the code running
then; a C function such as ``sqlite3``'s ``execute`` or ``json.dumps``
counts for the Python line that called it):

- serialization: json, cattrs, the engine's ``_serde``/``_wire``/``_codec``
  modules and the stores' row decoding (``_stores/_rows.py``);
- records (attrs): attrs' generated methods and ``evolve`` (making and
  copying records);
- isinstance on Protocols: ``typing``'s runtime-checkable Protocol checks;
- store: ``trio_durable/_stores/``, sqlite3, psycopg (under cProfile, the
  C calls of sqlite3 too);
- trio scheduling: trio (its run loop, to_thread's hand-offs), outcome,
  selectors, threading (and, under cProfile, lock and epoll calls);
- bridge: ``_brokers/_bridge.py``, trio-asyncio;
- broker client: nats-py, aio-pika/aiormq/pamqp, asyncio, the adapters in
  ``brokers/`` and the memory broker;
- engine: the rest of ``trio_durable``;
- other: the bench itself, the standard library's rest.

Samples taken while importing are left out (start-up, not per run), and
so are samples in frames that wait (epoll, an idle worker thread: see
`WAITS`). Also
printed: the top leaf functions, and the engine modules by inclusive share
(samples whose innermost ``trio_durable`` frame is in that module, callees
included). Profiles are for reading; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Final

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("trio scheduling", ("outcome/", "<attrs generated methods outcome.")),
    (
        "serialization",
        (
            "json/",
            "cattrs/",
            "trio_durable/_serde",
            "trio_durable/_wire",
            "trio_durable/_codec",
            "trio_durable/_stores/_rows",
            "trio_durable/_stores/_codec",
            "trio_durable/_brokers/_codec",
        ),
    ),
    ("records (attrs)", ("<attrs generated", "attr/", "attrs/")),
    ("isinstance on Protocols", ("typing.py",)),
    ("bridge", ("trio_durable/_brokers/_bridge", "trio_asyncio/")),
    (
        "broker client",
        (
            "nats/",
            "aio_pika/",
            "aiormq/",
            "pamqp/",
            "asyncio/",
            "trio_durable_nats/",
            "trio_durable_rabbitmq/",
            "trio_durable/_brokers/",
        ),
    ),
    ("store", ("trio_durable/_stores/", "sqlite3", "psycopg/", "psycopg_pool/")),
    (
        "trio scheduling",
        ("trio/", "sniffio/", "selectors.py", "threading.py", "queue.py"),
    ),
    ("engine", ("trio_durable/",)),
)


WAITS: Final = (
    "EpollSelector.select (selectors.py)",
    "EpollIOManager.get_events (trio/_core/_io_epoll.py)",
    "WorkerThread._work (trio/_core/_thread_cache.py)",
    "Condition.wait (threading.py)",
    "Event.wait (threading.py)",
)
"""Leaf frames that block (epoll, a thread waiting for work): py-spy may
count them on CPU (a thread woken and waiting for a core is running to the
OS), so they are counted apart, as waiting."""


def layer_of(file: str) -> str:
    for name, markers in LAYERS:
        if any(marker in file for marker in markers):
            return name
    return "other"


def parse_frame(frame: str) -> tuple[str, str]:
    """(function, file) of a py-spy raw frame ``func (file:line)``."""
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip(), ""
    return match["func"], match["file"]


def summarize(raw: Path, top: int) -> list[str]:
    layers: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    modules: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    startup = total = waiting = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        if any("importlib._bootstrap" in f for f in frames):
            startup += count
            continue
        thread = frames[0] if frames[0].startswith("thread (") else ""
        if thread:
            frames = frames[1:]
        if not frames:
            continue
        func, file = parse_frame(frames[-1])
        if f"{func} ({file})" in WAITS:
            waiting += count
            continue
        total += count
        threads[thread.partition(": ")[2] or "unnamed"] += count
        layers[layer_of(file)] += count
        leaves[f"{func} ({file})"] += count
        for frame in reversed(frames):
            _, frame_file = parse_frame(frame)
            if "trio_durable/" in frame_file:
                modules[frame_file.split("trio_durable/", 1)[1]] += count
                break
    if not total:
        return ["no samples"]
    out = [
        f"{total} samples on CPU ({startup} more while importing and {waiting} in waits, left out)",
        "by layer:",
    ]
    out += [f"  {name:16} {100 * n / total:5.1f}%" for name, n in layers.most_common()]
    out.append("threads:")
    out += [f"  {name[:60]:60} {100 * n / total:5.1f}%" for name, n in threads.most_common(6)]
    out.append(f"top {top} leaf functions:")
    out += [f"  {100 * n / total:5.1f}%  {name}" for name, n in leaves.most_common(top)]
    out.append(f"top {top} engine modules (inclusive):")
    out += [f"  {100 * n / total:5.1f}%  {name}" for name, n in modules.most_common(top)]
    return out


# -- cProfile, CPU time per thread ---------------------------------------------------------

_C_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("store", ("sqlite3", "psycopg")),
    ("serialization", ("_json", "json.")),
    ("trio scheduling", ("epoll", "select.", "_thread", "socket")),
)


def c_layer_of(name: str) -> str:
    """The layer of a built-in function, by its name (cProfile's ``~``)."""
    for layer, markers in _C_LAYERS:
        if any(marker in name for marker in markers):
            return layer
    return "other"


def cprofile(command: list[str], top: int) -> list[str]:
    """Run a bench script in this process under cProfile, one profiler per
    thread timed by `time.thread_time` (CPU, not wall time: what other
    processes on the machine do moves it little), and sum self times by
    layer."""
    import cProfile
    import pstats
    import runpy
    import threading
    import time

    profiles: list[tuple[str, cProfile.Profile]] = []
    guard = threading.Lock()

    def thread_clock() -> Callable[[], float]:
        # This thread's CPU clock, read from whichever thread asks: the
        # profiles are collected from the main thread, which closes the
        # frames still open in other threads at the other thread's time
        # (time.thread_time would give the main thread's).
        clock = time.pthread_getcpuclockid(threading.get_ident())
        last = 0.0

        def read() -> float:
            nonlocal last
            with contextlib.suppress(OSError):  # OSError: the thread has ended
                last = time.clock_gettime(clock)
            return last

        return read

    def start_in_thread(*_: object) -> None:
        # Called by the first event of each new thread (threading.setprofile):
        # enabling a profiler there replaces this function for that thread.
        profile = cProfile.Profile(thread_clock())
        with guard:
            profiles.append((threading.current_thread().name, profile))
        profile.enable()

    main_profile = cProfile.Profile(thread_clock())
    profiles.append(("MainThread", main_profile))
    threading.setprofile(start_in_thread)
    sys.argv = command
    sys.path.insert(0, str(Path(command[0]).resolve().parent))
    main_profile.enable()
    try:
        runpy.run_path(command[0], run_name="__main__")
    except SystemExit:
        pass
    finally:
        main_profile.disable()
        threading.setprofile(None)
    layers: dict[str, float] = defaultdict(float)
    functions: dict[str, float] = defaultdict(float)
    modules: dict[str, float] = defaultdict(float)
    threads: dict[str, float] = defaultdict(float)
    for thread, profile in profiles:
        profile.create_stats()
        stats: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
        stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
        for (file, _, func), (_, _, tottime, _, callers) in stats.items():
            threads[thread.split(" (")[0]] += tottime
            if file == "~":
                where = func
            else:
                where = f"{func} ({file.rpartition('site-packages/')[2]})"
                if "trio_durable/" in file:
                    modules[file.split("trio_durable/", 1)[1]] += tottime
            functions[where] += tottime
            layer = c_layer_of(func) if file == "~" else layer_of(file)
            if layer != "other" or not isinstance(callers, dict) or not callers:
                layers[layer] += tottime
                continue
            # A built-in (getattr, len, str methods) or a generic part of the
            # standard library (contextlib, collections): its time counts
            # for the layer of each caller, as that caller spent it there.
            for (caller_file, _, _), caller_times in callers.items():
                spent = caller_times[2] if isinstance(caller_times, tuple) else 0.0
                layers[layer_of(caller_file) if caller_file != "~" else "other"] += spent
            unattributed = tottime - sum(t[2] for t in callers.values() if isinstance(t, tuple))
            layers["other"] += max(unattributed, 0.0)
    total = sum(layers.values())
    if not total:
        return ["no CPU time recorded"]

    def most(table: dict[str, float], n: int) -> list[tuple[str, float]]:
        return sorted(table.items(), key=lambda item: -item[1])[:n]

    out = [f"{total:.2f} s of CPU in all threads (cProfile, self time)", "by layer:"]
    out += [f"  {name:24} {100 * t / total:5.1f}%" for name, t in most(layers, len(layers))]
    out.append("threads:")
    out += [f"  {name[:60]:60} {100 * t / total:5.1f}%" for name, t in most(threads, 6)]
    out.append(f"top {top} functions (self time):")
    out += [f"  {100 * t / total:5.1f}%  {name}" for name, t in most(functions, top)]
    out.append(f"top {top} engine modules (self time):")
    out += [f"  {100 * t / total:5.1f}%  {name}" for name, t in most(modules, top)]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--raw", type=Path, default=None, help="keep the recording here")
    parser.add_argument("--from-raw", type=Path, default=None, help="summarize this recording")
    parser.add_argument(
        "--cprofile", action="store_true", help="cProfile (CPU per thread) instead of py-spy"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- bench/SCRIPT.py ARGS")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.cprofile:
        if not command:
            parser.error("give a bench to run after --")
        lines = cprofile(command, args.top)
        print("\n".join(lines))
        return 0
    raw = args.from_raw
    if raw is None:
        if not command:
            parser.error("give a bench to run after --, or --from-raw FILE")
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if not Path(spy).exists():
            print("py-spy is not installed here (pip install py-spy)", file=sys.stderr)
            return 2
        raw = args.raw or Path(tempfile.mkstemp(suffix=".txt", prefix="py-spy-")[1])
        record = [spy, "record", "--threads", "-f", "raw", "-r", str(args.rate), "-o", str(raw)]
        # An hour at most: a hung bench fails instead of blocking forever.
        subprocess.run([*record, "--", sys.executable, *command], check=True, timeout=3600)
    print("\n".join(summarize(raw, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

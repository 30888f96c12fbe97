"""Project throughput for N engines (and workers) on one PostgreSQL primary.

The model. Each engine process is one Python thread doing the engines'
work, so a fleet of N engines on hosts of their own goes N times as fast as
one, until something they share runs out. What they share is the primary
(its cores, its WAL flushes, its connection slots) and the broker. With

- ``x1``: one engine's workflows/s when its own core is what limits it
  (``bench_postgres``'s ``postgres.concurrent``, median);
- ``s``: the primary's CPU per workflow, in ms: ``a * t + b * o``, with
  ``a`` its CPU per transaction, ``b`` per store operation (a statement's
  row), ``t`` the transactions and ``o`` the operations of one workflow
  under load (``bench_ops``'s ``ops.postgres.server_ms_per_transaction``,
  ``..._per_op``, ``ops.postgres.load.transactions``, ``.ops``; without
  them, ``bench_postgres``'s ``postgres.concurrent.server_cpu``);
- ``C``: the primary's cores; ``F``: commits/s of one connection (one WAL
  flush each: ``ops.postgres.commits_per_s``); commits that wait at the same
  time share one flush, so the primary commits at most ``F`` times the
  connections committing at once;
- ``P``: the connections of each engine: its ``pool_size``, plus one its
  store's watch listens on (``LISTEN``; ``ops.postgres.connections``
  counts them); ``M``: the primary's ``max_connections``, less
  ``superuser_reserved_connections`` and the connections of anything else
  (tools, the console);
- ``R`` remote steps per workflow, ``B`` the broker's round trips/s (one
  task out, one result back: two messages each, ``bench_ops``'s
  ``ops.<broker>.remote_step.*``);

the projection for N engines is::

    X(N) = min(N * x1,                 engines' own CPU
               1000 * C / s,           the primary's CPU
               F * min(N * p, M) / t,  WAL flushes (commits; p = pool_size)
               B / R)                  the broker (only with R > 0)

for ``N * P <= M``; past that, the fleet's pools do not fit in the
primary's connection slots (connections saturate: lower ``pool_size`` or
put a pooler in front). What saturates first is the term that is smallest
at the lowest N where it is not the engines' own. Workers need no
connection to the store; they scale with the broker, one step at a time
per slot of ``worker_concurrency``, and are not a term here.

The check: with ``--host-cores H`` (the machine bench_postgres ran on,
where engines and primary share H cores), one more term,
``1000 * H / (e + s)`` with ``e`` the engine CPU per workflow
(``postgres.concurrent.engine_cpu``), bounds X(N); the projected X(2) /
X(1) is printed beside ``postgres.two_engines_ratio``, as measured.

The model leaves out lock waits between engines (they touch different
runs), the primary's CPU per workflow falling as its transactions grow
larger under load (group commit: the projection is conservative there),
and the network (a round trip per transaction adds latency, not CPU).

Usage: ``python bench/sizing.py [--figures FILE ...] [--primary-cores 16]
[--max-connections 100] [--pool-size 4] [--remote-steps 0]
[--broker-round-trips B] [--engines 1,2,4,...]``; any input may also be
given as an option, which wins over the files. Without files, the figures
measured for docs/operations.md ("Sizing") are used.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import attrs
from compare import FiguresFileError, read_figures

ENGINES = (1, 2, 4, 8, 16, 24, 25, 32, 50, 64, 100)

# Figures measured on the 2-core VM of docs/operations.md, "Sizing"
# (2026-12-05, commit 3e13a12): what the command uses without --figures.
MEASURED = {
    "engine_rate": 1160.0,
    "engine_ms": 0.745,
    "server_ms": 0.09,
    "two_engines_ratio": 1.82,
    "amqp_round_trips": 982.0,
    "nats_round_trips": 1326.0,
    "server_ms_per_transaction": 1.091,
    "server_ms_per_op": 0.0196,
    "transactions": 0.002,
    "ops": 6.0,
    "transactions_alone": 2.0,
    "commits_per_s": 466.0,
}


@attrs.frozen(kw_only=True)
class Inputs:
    """What the model projects from (see the module's docstring)."""

    engine_rate: float
    """x1: one engine's workflows/s."""
    engine_ms: float
    """e: engine CPU per workflow, ms (for the shared-host term)."""
    server_ms: float
    """s: the primary's CPU per workflow, ms."""
    transactions: float
    """t: transactions per workflow under load."""
    commits_per_s: float
    """F: commits/s of one connection (0: not modelled)."""
    primary_cores: float = 16
    pool_size: int = 4
    max_connections: int = 100
    reserved_connections: int = 3
    """superuser_reserved_connections, plus tools' and the console's."""
    remote_steps: float = 0
    broker_round_trips: float = 0
    """B: the broker's round trips/s (0: not modelled)."""
    host_cores: float = 0
    """H: engines and primary on one host of H cores (0: hosts of their own)."""

    @property
    def connection_slots(self) -> int:
        return self.max_connections - self.reserved_connections

    @property
    def connections_per_engine(self) -> int:
        """P: the pool, and the store's watch (one ``LISTEN`` connection)."""
        return self.pool_size + 1


@attrs.frozen
class Row:
    """The projection for one fleet size: each term's ceiling (workflows/s,
    inf where not modelled), the least of them, and what it is."""

    engines: int
    ceilings: dict[str, float]
    connections: int

    @property
    def fits(self) -> bool:
        """Whether the fleet's pools fit in the primary's connection slots."""
        return self.connections <= 0

    @property
    def throughput(self) -> float:
        return min(self.ceilings.values())

    @property
    def bound_by(self) -> str:
        """The least term; the engines' own on a tie (``--steady`` makes the
        WAL term equal to theirs at ``t``'s bound)."""
        least = self.throughput
        if self.ceilings["engines"] <= least * (1 + 1e-9):
            return "engines"
        return min(self.ceilings, key=lambda name: self.ceilings[name])


TERMS = ("engines", "primary CPU", "WAL commits", "broker", "shared host")


def project(inputs: Inputs, engines: int) -> Row:
    """X(N) for ``engines`` engines, with each term's ceiling."""
    n = engines
    connections = n * inputs.connections_per_engine
    slots = inputs.connection_slots
    inf = math.inf
    ceilings = {
        "engines": n * inputs.engine_rate,
        "primary CPU": 1000 * inputs.primary_cores / inputs.server_ms if inputs.server_ms else inf,
        "WAL commits": (
            inputs.commits_per_s * min(n * inputs.pool_size, slots) / inputs.transactions
            if inputs.commits_per_s and inputs.transactions
            else inf
        ),
        "broker": (
            inputs.broker_round_trips / inputs.remote_steps
            if inputs.remote_steps and inputs.broker_round_trips
            else inf
        ),
        "shared host": (
            1000 * inputs.host_cores / (inputs.engine_ms + inputs.server_ms)
            if inputs.host_cores
            else inf
        ),
    }
    return Row(engines, ceilings, connections - slots)


@attrs.frozen
class Verdict:
    """What saturates first, and from how many engines on."""

    term: str
    engines: int | None
    """The least N at which it binds (None: not within the sizes asked)."""


def saturates_first(inputs: Inputs, sizes: Sequence[int] = tuple(range(1, 101))) -> Verdict:
    """The first term other than the engines' own to bind as N grows (or
    ``connections``, when the pools outgrow the slots first)."""
    for n in sizes:
        row = project(inputs, n)
        if not row.fits:
            return Verdict("connections", n)
        if row.bound_by != "engines":
            return Verdict(row.bound_by, n)
    return Verdict("engines", None)


# -- reading the figures -------------------------------------------------------------

CASES = {
    "engine_rate": ("bench_postgres", "postgres.concurrent"),
    "engine_ms": ("bench_postgres", "postgres.concurrent.engine_cpu"),
    "server_ms": ("bench_postgres", "postgres.concurrent.server_cpu"),
    "two_engines_ratio": ("bench_postgres", "postgres.two_engines_ratio"),
    "server_ms_per_transaction": ("bench_ops", "ops.postgres.server_ms_per_transaction"),
    "server_ms_per_op": ("bench_ops", "ops.postgres.server_ms_per_op"),
    "transactions": ("bench_ops", "ops.postgres.load.transactions"),
    "ops": ("bench_ops", "ops.postgres.load.ops"),
    "transactions_alone": ("bench_ops", "ops.postgres.sequential.transactions"),
    "commits_per_s": ("bench_ops", "ops.postgres.commits_per_s"),
    "amqp_round_trips": ("bench_amqp", "raw.amqp_round_trips"),
    "nats_round_trips": ("bench_nats", "raw.nats_always_round_trips"),
}


def figures_from(paths: Sequence[Path]) -> dict[str, float]:
    """The model's inputs found in figures files (JSON lines): for each
    case, the median of its medians in the files (``compare.py`` takes the
    median of a case's values within one file).

    Raises:
        FiguresFileError: A file cannot be read.
    """
    values: dict[str, list[float]] = {}
    for path in paths:
        found = read_figures(path)
        for name, key in CASES.items():
            if key in found:
                values.setdefault(name, []).append(found[key].value)
    return {name: statistics.median(found) for name, found in values.items()}


def steady_transactions(found: dict[str, float], pool_size: int) -> float:
    """t for a steady stream of arrivals: each of an engine's ``pool_size``
    trips in flight commits what queued while the one before it waited for
    its WAL flush, so an engine commits at most ``pool_size * F`` times a
    second; fewer workflows than that each commit alone (``t`` of one run
    started alone, ``ops.postgres.sequential.transactions``)."""
    alone = found.get("transactions_alone", 2.0)
    commits = found.get("commits_per_s", 0.0)
    if not commits:
        return alone
    return max(
        found.get("transactions", 0.0), min(alone, pool_size * commits / found["engine_rate"])
    )


def server_ms(found: dict[str, float]) -> float:
    """s: from the per-transaction and per-operation costs when all four
    are known, else the measured CPU per workflow."""
    parts = ("server_ms_per_transaction", "server_ms_per_op", "transactions", "ops")
    if all(found.get(name) for name in parts[2:]) and any(found.get(n) for n in parts[:2]):
        return (
            found.get("server_ms_per_transaction", 0.0) * found["transactions"]
            + found.get("server_ms_per_op", 0.0) * found["ops"]
        )
    return found["server_ms"]


# -- the command ---------------------------------------------------------------------


def _rate(value: float) -> str:
    return "-" if math.isinf(value) else f"{value:,.0f}"


def table(inputs: Inputs, sizes: Sequence[int]) -> list[str]:
    """The projection as Markdown rows."""
    first = project(inputs, 1).ceilings
    shown = [term for term in TERMS if not math.isinf(first[term])]
    lines = [
        "| engines | " + " | ".join(shown) + " | projected workflows/s | bound by | connections |",
        "|---" * (len(shown) + 4) + "|",
    ]
    for n in sizes:
        row = project(inputs, n)
        cells = " | ".join(_rate(row.ceilings[t]) for t in shown)
        used = n * inputs.connections_per_engine
        if row.fits:
            what, bound = _rate(row.throughput), row.bound_by
        else:
            what, bound = "-", "connections"
        lines.append(f"| {n} | {cells} | {what} | {bound} | {used} of {inputs.connection_slots} |")
    return lines


def check_lines(inputs: Inputs, measured: float | None) -> list[str]:
    """Projected X(2) / X(1) on the measuring host, beside the measured."""
    one, two = project(inputs, 1).throughput, project(inputs, 2).throughput
    line = (
        f"check, engines and primary on one host of {inputs.host_cores:g} cores:"
        f" projected 1 engine {one:,.0f}/s, 2 engines {two:,.0f}/s, ratio {two / one:.2f}x"
    )
    if measured is None:
        return [line, "  (no postgres.two_engines_ratio in the figures: nothing to check against)"]
    return [
        line,
        f"  measured (bench_postgres, postgres.two_engines_ratio): {measured:.2f}x;"
        f" projected / measured {two / one / measured:.2f}",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figures", type=Path, nargs="*", default=[], help="figures files")
    parser.add_argument("--engine-rate", type=float, help="x1: one engine's workflows/s")
    parser.add_argument("--engine-ms", type=float, help="e: engine CPU ms per workflow")
    parser.add_argument("--server-ms", type=float, help="s: primary CPU ms per workflow")
    parser.add_argument("--transactions", type=float, help="t: transactions per workflow")
    parser.add_argument("--commits-per-s", type=float, help="F: one connection's commits/s")
    parser.add_argument("--primary-cores", type=float, default=16)
    parser.add_argument("--max-connections", type=int, default=100)
    parser.add_argument("--reserved-connections", type=int, default=3)
    parser.add_argument("--pool-size", type=int, default=4)
    parser.add_argument("--remote-steps", type=float, default=0)
    parser.add_argument(
        "--broker-round-trips",
        type=float,
        default=None,
        help="B: broker round trips/s (default: raw.amqp_round_trips in the figures)",
    )
    parser.add_argument(
        "--steady",
        action="store_true",
        help="t for a steady stream of arrivals, not for runs started at once",
    )
    parser.add_argument("--host-cores", type=float, default=2, help="of the measuring host")
    parser.add_argument(
        "--engines", default=",".join(map(str, ENGINES)), help="fleet sizes (comma-separated)"
    )
    args = parser.parse_args(argv)
    try:
        found = figures_from(args.figures) if args.figures else dict(MEASURED)
    except FiguresFileError as exc:
        print(f"sizing.py: {exc}", file=sys.stderr)
        return 2
    for name in ("engine_rate", "engine_ms", "server_ms", "transactions", "commits_per_s"):
        if getattr(args, name) is not None:
            found[name] = getattr(args, name)
            if name == "server_ms":
                found.pop("server_ms_per_transaction", None)
                found.pop("server_ms_per_op", None)
    missing = [n for n in ("engine_rate", "engine_ms") if n not in found]
    if missing or ("server_ms" not in found and "server_ms_per_op" not in found):
        print(
            f"sizing.py: no {', '.join(missing) or 'server_ms'} in the figures"
            " (run bench_postgres.py and bench_ops.py with --json, or give it as an option)",
            file=sys.stderr,
        )
        return 2
    burst = dict(found)
    if args.steady and args.transactions is None:
        found["transactions"] = steady_transactions(found, args.pool_size)
    broker = args.broker_round_trips
    if broker is None:
        broker = found.get("amqp_round_trips", found.get("nats_round_trips", 0.0))
    inputs = Inputs(
        engine_rate=found["engine_rate"],
        engine_ms=found["engine_ms"],
        server_ms=server_ms(found),
        transactions=found.get("transactions", 0.0),
        commits_per_s=found.get("commits_per_s", 0.0),
        primary_cores=args.primary_cores,
        pool_size=args.pool_size,
        max_connections=args.max_connections,
        reserved_connections=args.reserved_connections,
        remote_steps=args.remote_steps,
        broker_round_trips=broker,
    )
    sizes = [int(n) for n in args.engines.split(",") if n]
    print(
        f"inputs: x1 {inputs.engine_rate:,.0f} workflows/s per engine,"
        f" e {inputs.engine_ms:.3f} ms, s {inputs.server_ms:.4f} ms (primary CPU per workflow),"
        f" t {inputs.transactions:.4f} transactions, F {inputs.commits_per_s:,.0f} commits/s,"
        f" C {inputs.primary_cores:g} cores, P {inputs.connections_per_engine} connections per engine"
        f" (pool_size {inputs.pool_size} and the watch),"
        f" {inputs.connection_slots} connection slots,"
        f" R {inputs.remote_steps:g} remote steps, B {inputs.broker_round_trips:,.0f} round trips/s"
    )
    print()
    print("\n".join(table(inputs, sizes)))
    verdict = saturates_first(inputs)
    print()
    if verdict.engines is None:
        print("saturates first: nothing up to 100 engines (each engine's own CPU bounds it)")
    else:
        print(f"saturates first: {verdict.term}, at {verdict.engines} engines")
    print()
    # bench_postgres starts its runs at once: the check projects a burst.
    host = attrs.evolve(
        inputs,
        host_cores=args.host_cores,
        transactions=burst.get("transactions", 0.0),
        server_ms=server_ms(burst),
    )
    print("\n".join(check_lines(host, found.get("two_engines_ratio"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

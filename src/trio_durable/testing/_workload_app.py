"""The built-in workload's app, and how its steps reach the simulation.

Every workflow and step of the built-in workload is registered on `app`
(its parts live in `_workloads`, `_message_flows`, `_control_flows` and
`_deploy_flows`). A
step reaches the simulation that runs it through `record` and `note`, which
write to the simulation the workload last `use`d: steps keep recording after
the workload returns (its runs go on), and the next simulation replaces it.
"""

from __future__ import annotations

import trio

from .._front._app import App
from ._simulation import Simulation

app = App("simulation")
app.queue("limited", concurrency=2)

_current: list[Simulation] = []


def use(sim: Simulation) -> None:
    """Make ``sim`` the simulation the steps record into."""
    _current.append(sim)
    del _current[:-1]


def record(key: str) -> int:
    """`Simulation.record` on the current simulation (1 outside one)."""
    return _current[-1].record(key) if _current else 1


def note(log: str, entry: str) -> None:
    """`Simulation.note` on the current simulation (nothing outside one)."""
    if _current:
        _current[-1].note(log, entry)


def stamp(entry: str) -> str:
    """``entry`` with the virtual time it happened at, for logs whose
    invariants compare when things ran with when the workload acted."""
    return f"{entry}@{trio.current_time()!r}"  # exact: compared with times


def stamped(entry: str) -> tuple[str, float]:
    """What `stamp` made: the entry and its time."""
    text, _, at = entry.rpartition("@")
    return text, float(at)

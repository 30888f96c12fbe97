"""Testing: deterministic simulation of whole fleets, and replay tests.

``simulate(app, workload, seed=...)`` runs engines and workers on one shared
memory store and memory broker, injects the faults of `Faults`, checks the
invariants, and reports a hash of the event trace: the same seed replays the
same run exactly. ``python -m trio_durable.testing.simulate --seeds 1..100``
runs the built-in workload over many seeds.

``replay(app, history)`` and ``replay_all(app, folder)`` replay exported
histories of runs against an app's code in memory: a replay test, which
fails with `NonDeterminismError` where a change of the code would break
runs in flight (see docs/changing-workflow-code.md).
"""

from ._faults import Faults as Faults
from ._faults import FaultyStore as FaultyStore
from ._harness import simulate as simulate
from ._replay import replay as replay
from ._replay import replay_all as replay_all
from ._scheduling import UnseededSchedulingWarning as UnseededSchedulingWarning
from ._scheduling import deterministic_scheduling as deterministic_scheduling
from ._simulation import Simulation as Simulation
from ._simulation import SimulationReport as SimulationReport
from ._simulation import Workload as Workload

__all__ = [
    "Faults",
    "FaultyStore",
    "Simulation",
    "SimulationReport",
    "UnseededSchedulingWarning",
    "Workload",
    "deterministic_scheduling",
    "replay",
    "replay_all",
    "simulate",
]

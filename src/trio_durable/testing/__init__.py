"""Deterministic simulation: whole fleets under a mock clock, faults from a seed.

``simulate(app, workload, seed=...)`` runs engines and workers on one shared
memory store and memory broker, injects the faults of `Faults`, checks the
invariants, and reports a hash of the event trace: the same seed replays the
same run exactly. ``python -m trio_durable.testing.simulate --seeds 1..100``
runs the built-in workload over many seeds.
"""

from ._faults import Faults as Faults
from ._faults import FaultyStore as FaultyStore
from ._harness import simulate as simulate
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
    "simulate",
]

"""The engine's app of tests/integration/test_remote_workflow_processes.py:
no workflow body, no step, no declaration: the engine serves ``order`` by
convention, as its workers announce it.
The engine process runs from this folder, where the workflow code
(remote_workflow_code/remote_orders.py) cannot be imported; importing this
module checks that, so an engine that could reach the code refuses to start."""

from __future__ import annotations

import importlib.util

import trio_durable as td

if importlib.util.find_spec("remote_orders") is not None:
    raise RuntimeError("the engine's process must not reach the workflow code (remote_orders)")

app = td.App("remote-service")

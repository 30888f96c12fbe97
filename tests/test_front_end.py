"""`Engine` and `Client` share one implementation of what they both offer
(`FrontEnd`): every public method of one is the other's same object,
found on their common base, but for the engine's own."""

from __future__ import annotations

import inspect

import trio_durable as td
from trio_durable._front._front_end import FrontEnd

ENGINE_OWN = {
    "drain",
    "subscribe",
    "metrics",
    "metrics_registry",
    "statistics",
    "groups_without_workers",
}
"""The methods only an engine has: it runs runs, a client runs none."""


def _public_methods(cls: type) -> set[str]:
    return {
        name
        for name, value in inspect.getmembers(cls)
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }


def _defined_on(cls: type, name: str) -> type:
    return next(klass for klass in cls.__mro__ if name in vars(klass))


def test_engine_and_client_share_every_method_object_but_the_engines_own() -> None:
    engine, client = _public_methods(td.Engine), _public_methods(td.Client)
    assert engine - client == ENGINE_OWN
    assert client - engine == set()
    for name in sorted(engine & client):
        assert getattr(td.Engine, name) is getattr(td.Client, name), name
        # Through the base: neither class writes it again.
        assert issubclass(FrontEnd, _defined_on(td.Engine, name)), name


def test_the_engines_own_methods_are_its_own() -> None:
    for name in ENGINE_OWN:
        assert _defined_on(td.Engine, name) is td.Engine, name
    # A client adds nothing public of its own but its opening.
    assert {name for name in vars(td.Client) if not name.startswith("_")} == set()


def test_the_shared_calls_named_in_the_plan_are_one_object() -> None:
    for name in (
        "get",
        "result",
        "signal",
        "cancel",
        "retry",
        "fork",
        "start",
        "start_many",
        "fleet",
        "unserved_on_error_routes",
        "entity",
        "stream",
        "send_event",
        "query",
        "update",
        "create_schedule",
        "deliver_webhook",
        "set_breakpoint",
        "list_runs",
    ):
        assert getattr(td.Engine, name) is getattr(td.Client, name) is getattr(FrontEnd, name)

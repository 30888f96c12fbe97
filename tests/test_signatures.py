"""A workflow's parameters as workers announce them (``params`` in each
announced workflow), read back, older announcements without them, and a
start's inputs checked against every signature the live announcers
announce."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict

import attrs
import pytest
import trio

import trio_durable as td
from trio_durable._front._descriptor import describe
from trio_durable._front._signatures import (
    AnnouncedParam,
    announced_params,
    check_announced_inputs,
    input_problem,
    json_types,
    read_params,
    signature_shown,
)
from trio_durable.brokers import descriptor_from_json, descriptor_to_json


@attrs.define
class Order:
    sku: str


@dataclasses.dataclass
class Point:
    x: int


class Placed(TypedDict):
    sku: str


class Opaque:
    pass


@pytest.mark.parametrize(
    ("hint", "types"),
    [
        (str, ("string",)),
        (int, ("integer",)),
        (float, ("number",)),
        (bool, ("boolean",)),
        (list[int], ("array",)),
        (tuple[int, str], ("array",)),
        (Sequence[str], ("array",)),
        (frozenset[str], ("array",)),
        (dict[str, int], ("object",)),
        (Mapping[str, Any], ("object",)),
        (Placed, ("object",)),
        (Order, ("object",)),
        (Point, ("object",)),
        (None, ("null",)),
        (str | None, ("string", "null")),
        (int | float, ("integer", "number")),
        (Literal["a", 1, None], ("string", "integer", "null")),
        # Nothing plain: any value.
        (Any, None),
        (object, None),
        (Opaque, None),
        (bytes, None),
        (Opaque | None, None),
    ],
)
def test_annotations_map_to_json_types(hint: Any, types: tuple[str, ...] | None) -> None:
    assert json_types(hint) == types


async def every_kind(
    ctx: td.Context,
    a: int,
    /,
    order: Order,
    qty: int | None = None,
    *more: str,
    rush: bool = False,
    **extra: Any,
) -> None:
    """Every kind of parameter."""


def test_every_kind_of_parameter_is_announced_with_only_what_it_says() -> None:
    params = announced_params(every_kind)
    # The context is not an input; keys holding their usual value are left out.
    assert [p.to_json() for p in params] == [
        {"name": "a", "kind": "positional_only", "type": ["integer"]},
        {"name": "order", "type": ["object"]},
        {"name": "qty", "default": True, "type": ["integer", "null"]},
        {"name": "more", "kind": "var_positional", "type": ["string"]},
        {"name": "rush", "kind": "keyword_only", "default": True, "type": ["boolean"]},
        {"name": "extra", "kind": "var_keyword"},
    ]
    assert read_params({"params": json.loads(json.dumps([p.to_json() for p in params]))}) == params
    assert signature_shown("every_kind", params) == (
        "every_kind(a: integer, /, order: object, qty: integer|null = ..., *more: string,"
        " rush: boolean = ..., **extra)"
    )
    assert signature_shown("w", None) == "w(?)"


@pytest.mark.parametrize(
    "entry",
    [
        {},
        {"params": None},
        {"params": [{"kind": "positional_only"}]},
        {"params": [{"name": "a", "kind": "sideways"}]},
        {"params": [{"name": "a", "type": ["text"]}]},
        {"params": [{"name": "a", "type": "string"}]},
        {"params": [{"name": "a", "default": "yes"}]},
    ],
)
def test_a_workflow_without_readable_params_has_no_signature(entry: dict[str, Any]) -> None:
    assert read_params(entry) is None


def shop(version: str, fn: Any) -> td.App:
    app = td.App("shop", version=version)
    app.workflow(name="checkout", group="orders")(fn)
    return app


async def checkout_v1(ctx: td.Context, order: Order) -> None:
    """Version one."""


async def checkout_v2(ctx: td.Context, order: Order, coupon: str) -> None:
    """Version two takes a coupon."""


async def test_live_workers_announce_params_and_inputs_are_checked_against_them(
    autojump_clock: trio.abc.Clock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_worker(shop("1", checkout_v1), broker=broker, groups=["orders"], instance_id="w-1"),
        td.open_worker(shop("1", checkout_v1), broker=broker, groups=["orders"], instance_id="w-2"),
    ):
        descriptors = await broker.worker_descriptors()
    assert [d.workflows["checkout"]["params"] for d in descriptors] == [
        [{"name": "order", "type": ["object"]}]
    ] * 2
    fits = check_announced_inputs(descriptors, "checkout", [{"sku": "pen"}])
    assert fits is not None
    assert (fits.fits, fits.note, fits.signatures) == (
        True,
        "",
        {"checkout(order: object)": ("w-1", "w-2")},
    )
    too_few = check_announced_inputs(descriptors, "checkout", [])
    assert too_few is not None
    assert not too_few.fits
    assert too_few.refusal() == (
        "workflow 'checkout' takes 1 positional input after the context (order),"
        " but 0 were given (announced: checkout(order: object))"
    )
    wrong = check_announced_inputs(descriptors, "checkout", ["pen"])
    assert wrong is not None
    assert wrong.refusal() == (
        "workflow 'checkout': input 'order' must be an object, not a string (\"pen\")"
        " (announced: checkout(order: object))"
    )
    # A workflow nobody announces has no signature to check.
    assert check_announced_inputs(descriptors, "refund", []) is None


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ([1, {}], ""),
        ([1, {}, None], ""),
        ([1, {}, 2, "x", "y"], ""),  # into *more: unchecked, as at replay
        ([1.5, {}], ": input 'a' must be an integer, not a number (1.5)"),
        ([True, {}], ": input 'a' must be an integer, not a boolean (true)"),
        ([1, {}, "2"], ": input 'qty' must be an integer or null, not a string (\"2\")"),
        (
            [1],
            " takes at least 2 positional inputs after the context (a, order, qty),"
            " but 1 was given",
        ),
    ],
)
def test_inputs_fit_as_engine_start_checks_them(args: list[Any], problem: str) -> None:
    found = input_problem("w", announced_params(every_kind), args)
    assert found == (f"workflow 'w'{problem}" if problem else "")


def test_a_number_takes_an_integer() -> None:
    async def measure(ctx: td.Context, ratio: float, limit: int = 3) -> None:
        """A float and an optional int."""

    checked = check_announced_inputs([descriptor_of(measure)], "w", [2])
    assert checked is not None
    assert checked.fits
    too_many = check_announced_inputs([descriptor_of(measure)], "w", [2, 1, 0])
    assert too_many is not None
    assert too_many.refusal().startswith(
        "workflow 'w' takes 1 to 2 positional inputs after the context (ratio, limit),"
        " but 3 were given"
    )


def descriptor_of(fn: Any, instance_id: str = "w-1", version: str = "1") -> td.WorkerDescriptor:
    app = td.App("shop", version=version)
    app.workflow(name="w")(fn)
    return describe(app, instance_id, [], [], 0.0)


def test_during_a_rollout_inputs_that_fit_any_signature_are_taken() -> None:
    old = descriptor_of(checkout_v1, "w-old")
    new = descriptor_of(checkout_v2, "w-new")
    checked = check_announced_inputs([old, new], "w", [{"sku": "pen"}])
    assert checked is not None
    assert checked.fits
    assert checked.note == (
        "live workers announce 2 signatures (w(order: object, coupon: string) by w-new;"
        " w(order: object) by w-old); the input fits w(order: object)"
    )
    neither = check_announced_inputs([old, new], "w", ["pen"])
    assert neither is not None
    assert not neither.fits
    assert neither.refusal() == (
        "the input fits none of the 2 signatures live workers announce"
        " (w(order: object, coupon: string) by w-new; w(order: object) by w-old):"
        " w(order: object, coupon: string): workflow 'w' takes 2 positional inputs after"
        " the context (order, coupon), but 1 was given; w(order: object): workflow 'w':"
        " input 'order' must be an object, not a string (\"pen\")"
    )


def test_a_note_names_a_few_announcers_of_each_signature() -> None:
    olds = [descriptor_of(checkout_v1, f"w-old-{n}") for n in range(5)]
    checked = check_announced_inputs([*olds, descriptor_of(checkout_v2, "w-new")], "w", [{}])
    assert checked is not None
    assert "w(order: object) by w-old-0, w-old-1, w-old-2 and 2 more" in checked.note


def older(descriptor: td.WorkerDescriptor) -> dict[str, Any]:
    """``descriptor`` as a worker older than ``params`` writes it."""
    plain = descriptor_to_json(descriptor)
    for entry in plain["workflows"].values():
        del entry["params"]
    through_json: dict[str, Any] = json.loads(json.dumps(plain))
    return through_json


def test_an_older_workers_announcement_reads_and_checks_only_the_array() -> None:
    old = descriptor_from_json(older(descriptor_of(checkout_v1, "w-old")))
    assert "params" not in old.workflows["w"]
    assert check_announced_inputs([old], "w", ["anything", 1]) is None
    # Beside a newer worker, it is a signature any array fits.
    new = descriptor_of(checkout_v2, "w-new")
    checked = check_announced_inputs([old, new], "w", [1])
    assert checked is not None
    assert checked.fits
    assert checked.note.endswith("; the input fits w(?)")


def test_a_newer_announcement_reads_with_keys_this_one_does_not_know() -> None:
    plain = json.loads(json.dumps(descriptor_to_json(descriptor_of(checkout_v1))))
    plain["workflows"]["w"]["params"][0]["format"] = "uuid"
    plain["workflows"]["w"]["signature_hash"] = "abc"
    plain["someday"] = {"new": True}
    descriptor = descriptor_from_json(plain)
    assert read_params(descriptor.workflows["w"]) == (
        AnnouncedParam(name="order", types=("object",)),
    )


def test_params_cost_a_few_dozen_bytes_a_workflow() -> None:
    with_params = descriptor_of(checkout_v2)
    without = json.dumps(older(with_params))
    added = len(json.dumps(descriptor_to_json(with_params))) - len(without)
    assert added == len(
        ', "params": [{"name": "order", "type": ["object"]},'
        ' {"name": "coupon", "type": ["string"]}]'
    )

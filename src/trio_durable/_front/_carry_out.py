"""The engine carrying out the command a remote workflow's decision names,
with the code a local body's turn runs for the same operation (see
`_decision_turn`): the feature `DecisionCommands`, which the kernel asks
(`Features.carry_out`), and what it learns on the way from the workers'
registrations: the remote steps and flow-control queues the command names,
and the types of the search attributes it sets (see `_learned`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, final

from .._base._exceptions import UnknownWorkflowError
from .._base._policies import FlowQueue, Retry
from .._base._records import LATEST_VERSION
from .._base._search_values import SearchValue, load_attributes, type_of
from .._features.children._fans import fan
from .._features.entities._entities import carry_out_call
from .._features.hooks._webhooks import create_webhook
from .._features.search._search_attributes import learned_records
from .._features.steps._breakpoints import pause_decided
from .._features.steps._remote import remote_step
from .._features.waits._waits import signal, timer
from .._kernel._definitions import Step, remote_step_body, shadow_workflow, workflow_of
from .._kernel._hooks import Feature
from .._kernel._replay import Replay
from .._wire._decision_commands import Command
from ._context import Context

if TYPE_CHECKING:
    from .._kernel._runtime import Runtime


@final
class DecisionCommands(Feature):
    """Carries out every command a decision may name, through the same
    `Context` operation a local body calls."""

    async def carry_out(self, replay: Replay, command: Command) -> bool:
        await carry_out(replay, command)
        return True


async def carry_out(replay: Replay, command: Command) -> None:
    """Carry out ``command`` as a local body's turn would."""
    rt = replay.engine
    args = command.args
    if command.op == "step":
        step = learn_step(rt, args)
        await remote_step(
            replay,
            step,
            json.loads(args["input"]),
            compensation=args["compensation"],
            flow_queue=args["flow_queue"],
            priority=args["priority"],
            dedup_key=args["dedup_key"],
        )
    elif command.op == "sleep":
        if "until" in args:
            until = float(args["until"])
            await timer(replay, lambda now: until)
        else:
            seconds = float(args["seconds"])
            await timer(replay, lambda now: now + seconds)
    elif command.op == "signal":
        await signal(replay, args["name"], args["timeout"], Any)
    elif command.op == "webhook":
        await create_webhook(replay, args["name"])
    elif command.op == "send_signal":
        await Context(replay).signal(
            args["run_id"],
            args["name"],
            json.loads(args["payload"]),
            idempotency_key=args["idempotency_key"],
        )
    elif command.op == "set_event":
        await Context(replay).set_event(args["key"], json.loads(args["value"]))
    elif command.op == "pause":
        await pause_decided(replay, args["name"], args["input"], args["compensation"])
    elif command.op == "entity":
        await carry_out_call(replay, args["entity"], args["input"])
    elif command.op == "upsert_search":
        changes: dict[str, Any] = dict(await _learn_attributes(replay, args["attributes"]))
        changes.update(dict.fromkeys(args["remove"]))
        Context(replay).upsert_search_attributes(changes)
    elif command.op == "child":
        wf = _child_workflow(rt, args["workflow"], args["version"])
        inputs = json.loads(args["input"])
        ctx = Context(replay)
        if args["awaited"]:
            await ctx.child(wf, *inputs)
        else:
            text = args["search_attributes"]
            await ctx.start_child(
                wf,
                *inputs,
                cancel_with_parent=args["cancel_with_parent"],
                search_attributes=None if text is None else await _learn_attributes(replay, text),
            )
    else:
        target = (
            learn_step(rt, args)
            if args["target"] == "step"
            else _child_workflow(rt, args["name"], args["version"])
        )
        await fan(replay, target, json.loads(args["inputs"]), args["concurrency"], args["mode"])


async def _learn_attributes(replay: Replay, text: str) -> dict[str, SearchValue]:
    """The search attributes a command carries, their types (as the workers
    declare them) learned where this engine's app does not declare them,
    and recorded in the store with the turn's writes where it records none
    (a type the app or the store holds for a name wins: a value not of it
    fails the operation with `SearchAttributeError`)."""
    rt = replay.engine
    attributes = load_attributes(text)
    learned = {
        name: type_of(value)
        for name, value in attributes.items()
        if name not in rt.app.search_attributes
    }
    replay.turn.ops.extend(await learned_records(rt.store, learned, rt.clock.now()))
    rt.learned.search_attributes.update(learned)
    return attributes


def _child_workflow(rt: Runtime, name: str, version: str) -> Any:
    """The workflow a command starts children of: registered here (at that
    version, or any if none is given), else known by name only."""
    app = rt.app
    if version and app.has_workflow(name, version):
        return app.get_workflow(name, version)
    if not version:
        try:
            return workflow_of(app, name)
        except UnknownWorkflowError:
            pass
    return shadow_workflow(name, version or LATEST_VERSION)


def learn_step(rt: Runtime, spec: dict[str, Any]) -> Step[..., Any]:
    """The remote step a command names: registered here, else made from
    its registration as the command carries it, and kept (see `_learned`)."""
    name = spec["name"]
    registered = rt.app.get_step(name)
    if registered is not None and registered.remote:
        return registered
    queue = spec.get("queue")
    if queue is not None:
        rt.learned.queues[queue["name"]] = FlowQueue(
            name=queue["name"], concurrency=queue["concurrency"], priority=queue["priority"]
        )
    retry = Retry(**spec["retry"])
    known = rt.learned.steps.get(name)
    if (
        known is not None
        and known.group == spec["group"]
        and known.requires == tuple(spec["requires"])
        and known.timeout == spec["timeout"]
        and known.retry == retry
    ):
        return known
    step: Step[..., Any] = Step(
        remote_step_body,
        name=name,
        retry=retry,
        timeout=spec["timeout"],
        group=spec["group"],
        requires=tuple(spec["requires"]),
    )
    rt.learned.steps[name] = step
    return step

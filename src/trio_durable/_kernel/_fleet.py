"""What the fleet of live workers serves, and where its workers disagree.

Workers announce a `WorkerDescriptor` each. Aggregated per workflow and per
step, the announcements show what is served; where two live workers say
different things about one step (its group or its requirements) or one
workflow (its versions), a rollout is in progress or a worker is
misconfigured, and the disagreement is listed with who says what.

Where two builds announce one workflow version, or one step, with
parameters that inputs recorded under one do not bind to under the other
(`accepts`), the new build breaks runs in flight unless the workflow's
version is bumped (a step: renamed): a ``breaking`` disagreement, before
any run meets it. With the workflows' current builds known, only a change
from the current build counts (adding a parameter with a default is safe
then); without, a change that breaks both ways.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, final

import attrs

from .._brokers._base import WorkerDescriptor


@final
@attrs.define(frozen=True, kw_only=True)
class Disagreement:
    """Live workers announcing different things about one subject.

    Attributes:
      kind: What differs: ``group``, ``requires``, ``version``,
        ``on_error``, or ``breaking``: builds announce a workflow version's
        (or a step's) parameters incompatibly; each value is then
        ``{"build", "params"}`` (with ``"version"`` for a workflow).
      subject: The step or workflow name.
      values: Each announced value (as canonical JSON) with the instance ids
        announcing it.
    """

    kind: Literal["group", "requires", "version", "on_error", "breaking"]
    subject: str
    values: dict[str, tuple[str, ...]]


@final
@attrs.define(frozen=True, kw_only=True)
class Fleet:
    """The aggregated view of live workers.

    Attributes:
      workers: Every live descriptor, by instance id.
      workflows: For each workflow, the instance ids that know it.
      steps: For each remote step, the instance ids that serve it.
      deploys: For each registration hash, the instance ids announcing it
        (more than one entry means a rollout is in progress).
      disagreements: Where live workers disagree.
    """

    workers: tuple[WorkerDescriptor, ...]
    workflows: dict[str, tuple[str, ...]]
    steps: dict[str, tuple[str, ...]]
    deploys: dict[str, tuple[str, ...]]
    disagreements: tuple[Disagreement, ...]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def accepts(old: Sequence[Any], new: Sequence[Any]) -> bool:
    """Whether inputs recorded for the parameters ``old`` (as announced:
    ``name``, ``kind``, ``default``, ``type``) bind to ``new``: each old
    parameter is still there, in its place, passed alike, taking at least
    the JSON types it took, and every parameter added has a default."""
    for i, was in enumerate(old):
        if i >= len(new):
            return False
        now = new[i]
        if now.get("name") != was.get("name") or now.get("kind") != was.get("kind"):
            return False
        took, takes = was.get("type"), now.get("type")
        if takes is not None and (took is None or not set(took) <= set(takes)):
            return False
    return all(
        p.get("default") or p.get("kind") in ("var_positional", "var_keyword")
        for p in new[len(old) :]
    )


def _build(d: WorkerDescriptor) -> str:
    return d.build_id or d.registration_hash


def breaking_changes(
    descriptors: Sequence[WorkerDescriptor], current: Mapping[str, str] | None = None
) -> tuple[Disagreement, ...]:
    """The ``breaking`` disagreements between the builds of ``descriptors``
    (see the module's docstring); ``current``: each workflow's current
    build, where known."""
    # (kind, name, version) -> build -> (value, workers)
    signatures: dict[tuple[str, str, str], dict[str, tuple[dict[str, Any], list[str]]]] = {}
    for d in sorted(descriptors, key=lambda d: d.instance_id):
        for name, info in d.workflows.items():
            versions, params = info.get("versions") or [], info.get("params")
            if params is None or not versions:
                continue
            value = {"build": _build(d), "version": versions[-1], "params": params}
            per = signatures.setdefault(("workflow", name, versions[-1]), {})
            per.setdefault(_build(d), (value, []))[1].append(d.instance_id)
        for name, info in d.steps.items():
            if info.get("params") is None:
                continue
            value = {"build": _build(d), "params": info["params"]}
            per = signatures.setdefault(("step", name, ""), {})
            per.setdefault(_build(d), (value, []))[1].append(d.instance_id)
    found: list[Disagreement] = []
    for (kind, name, _), builds in sorted(signatures.items()):
        base = None if current is None or kind != "workflow" else current.get(name)
        pairs = [
            (a, b)
            for a in sorted(builds)
            for b in sorted(builds)
            if a != b and (a == base if base in builds else a < b)
        ]
        broken = any(
            not accepts(builds[a][0]["params"], builds[b][0]["params"])
            and (base in builds or not accepts(builds[b][0]["params"], builds[a][0]["params"]))
            for a, b in pairs
        )
        if broken:
            found.append(
                Disagreement(
                    kind="breaking",
                    subject=name,
                    values={
                        _canonical(value): tuple(who)
                        for value, who in sorted(builds.values(), key=lambda v: v[0]["build"])
                    },
                )
            )
    return tuple(found)


def aggregate(
    descriptors: Sequence[WorkerDescriptor], current: Mapping[str, str] | None = None
) -> Fleet:
    """Aggregate announcements; the result does not depend on their order.
    ``current``: each workflow's current build, where known (for the
    ``breaking`` disagreements)."""
    ordered = sorted(descriptors, key=lambda d: d.instance_id)
    workflows: dict[str, list[str]] = {}
    steps: dict[str, list[str]] = {}
    deploys: dict[str, list[str]] = {}
    said: dict[tuple[str, str], dict[str, list[str]]] = {}

    def say(kind: str, subject: str, value: Any, who: str) -> None:
        said.setdefault((kind, subject), {}).setdefault(_canonical(value), []).append(who)

    for d in ordered:
        deploys.setdefault(d.registration_hash, []).append(d.instance_id)
        for name, info in sorted(d.workflows.items()):
            workflows.setdefault(name, []).append(d.instance_id)
            say("version", name, sorted(info.get("versions", [])), d.instance_id)
            say("on_error", name, info.get("on_error", []), d.instance_id)
        for name, info in sorted(d.steps.items()):
            steps.setdefault(name, []).append(d.instance_id)
            say("group", name, info.get("group"), d.instance_id)
            say("requires", name, sorted(info.get("requires", [])), d.instance_id)
    disagreements = tuple(
        Disagreement(
            kind=kind,  # type: ignore[arg-type]
            subject=subject,
            values={value: tuple(who) for value, who in sorted(values.items())},
        )
        for (kind, subject), values in sorted(said.items())
        if len(values) > 1
    ) + breaking_changes(ordered, current)
    return Fleet(
        workers=tuple(ordered),
        workflows={k: tuple(v) for k, v in sorted(workflows.items())},
        steps={k: tuple(v) for k, v in sorted(steps.items())},
        deploys={k: tuple(v) for k, v in sorted(deploys.items())},
        disagreements=disagreements,
    )

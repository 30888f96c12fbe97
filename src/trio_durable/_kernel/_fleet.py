"""What the fleet of live workers serves, and where its workers disagree.

Workers announce a `WorkerDescriptor` each. Aggregated per workflow and per
step, the announcements show what is served; where two live workers say
different things about one step (its group or its requirements) or one
workflow (its versions), a rollout is in progress or a worker is
misconfigured, and the disagreement is listed with who says what.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal, final

import attrs

from .._brokers._base import WorkerDescriptor


@final
@attrs.define(frozen=True, kw_only=True)
class Disagreement:
    """Live workers announcing different things about one subject.

    Attributes:
      kind: What differs: ``group``, ``requires``, ``version`` or
        ``on_error``.
      subject: The step or workflow name.
      values: Each announced value (as canonical JSON) with the instance ids
        announcing it.
    """

    kind: Literal["group", "requires", "version", "on_error"]
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


def aggregate(descriptors: Sequence[WorkerDescriptor]) -> Fleet:
    """Aggregate announcements; the result does not depend on their order."""
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
    )
    return Fleet(
        workers=tuple(ordered),
        workflows={k: tuple(v) for k, v in sorted(workflows.items())},
        steps={k: tuple(v) for k, v in sorted(steps.items())},
        deploys={k: tuple(v) for k, v in sorted(deploys.items())},
        disagreements=disagreements,
    )

"""The canonical hash of an app's registrations, which workers and engines
announce: equal for two processes of one deploy, different across a
rollout (see `Fleet`)."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._app import App


def _number(value: float | None) -> float | None:
    # json writes 1 and 1.0 differently; equal settings must hash alike.
    return None if value is None else float(value)


def registration_hash(app: App) -> str:
    """A canonical hash of every registration of ``app``: steps with their
    groups, requirements, flow-control queues, retries and timeouts, the
    queues (with their rate limits), and workflows with their versions,
    on-error routes and groups.

    It does not depend on registration order, nor on how an equal number
    is written (``backoff=1`` or ``1.0``). A setting added later is hashed
    only when given, so a deploy that does not use it hashes as before.
    """

    def queue(q: Any) -> dict[str, Any]:
        data: dict[str, Any] = {"concurrency": q.concurrency, "priority": q.priority}
        if q.rate_limit is not None:
            data["rate_limit"] = [q.rate_limit.starts, _number(q.rate_limit.per)]
        return data

    data = {
        "steps": {
            s.name: {
                "group": s.group,
                "requires": list(s.requires),
                "queue": s.queue,
                "retry": {
                    "attempts": s.retry.attempts,
                    "backoff": _number(s.retry.backoff),
                    "max_backoff": _number(s.retry.max_backoff),
                    "jitter": _number(s.retry.jitter),
                },
                "timeout": _number(s.timeout),
            }
            for s in sorted(app.steps, key=lambda s: s.name)
        },
        "queues": {q.name: queue(q) for q in app.queues},
        "workflows": sorted(
            [
                wf.name,
                wf.version,
                sorted([r.code or "", r.workflow] for r in wf.on_error),
                # Only when given, so that a deploy declaring no workflow
                # group hashes as it did before groups existed.
                *([] if wf.group is None else [wf.group]),
                # Likewise only when not the default.
                *([] if wf.versioning == "auto_upgrade" else [wf.versioning]),
            ]
            for wf in app.workflows
        ),
    }
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]

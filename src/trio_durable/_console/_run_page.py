"""The run page, ``/runs/{id}``: the run's facts, input and output, its
timeline (a chart on a time axis and a table with each operation's input,
output, durations and errors), why each pending operation waits, its
lineage, fans, stream, retried histories and the actions that apply.

It reads the run's detail (`RunDetail`: wide fans folded, so O(1) rows per
operation outside them), then the timeline's own checkpoints with their
payloads by ranges of seqs that skip the folded fans, a page of each wide
fan's members, the live workers' groups from the broker (for the reason a
remote step waits) and the flow-control queues' depths.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from starlette.requests import Request
from starlette.responses import Response

from .._base._exceptions import UsageError
from .._base._on_error import lineage
from .._base._records import TERMINAL_STATUSES, Checkpoint, QueueDepth, Run
from .._brokers._base import BrokerError
from .._features.messages._streams import STREAM_HEAD, offset_key, stream_scope
from .._kernel._views import FOLD_WIDTH, FanPage, FanStats, HistoryEntry, RunDetail
from .._payloads._stored_payloads import is_marked, payload_for_people
from ._page_params import flag, natural, one
from ._render import FAN_PAGE, page_response
from ._timeline import chart

if TYPE_CHECKING:
    from ._app import Console, ConsoleSource

MAX_FAN_PAGE: Final = 100
"""The most members a page of a fan shows (``?limit=``; 50 by default)."""

RETRIED_ROWS: Final = 100
"""The most operations of one retry the run page lists (the run's history
in the API has every one)."""

STREAM_TAIL: Final = 50
"""The most values of a run's stream its page shows: the last ones."""

_HANDLER: Final = ".onError."
POSITIONS_READ: Final = 50
"""The most places in queues' lines one page reads (one count each); the
reasons of pending steps past them give the queue's depth alone."""


def _source(request: Request) -> ConsoleSource:
    console: Console = request.app.state.console
    return console.source


async def _fan_pages(
    request: Request, run_id: str, fans: tuple[FanStats, ...]
) -> dict[int, tuple[FanPage | None, bool]]:
    """The page of members shown for each wide fan (and the one the query
    names: ``fan``, ``offset``, ``limit``, ``failed``), with whether it lists
    only failed members. A fan with failures shows them first."""
    source = _source(request)
    chosen = natural(request, "fan", -1) if one(request, "fan") is not None else None
    offset = natural(request, "offset", 0)
    limit = natural(request, "limit", FAN_PAGE)
    if not 1 <= limit <= MAX_FAN_PAGE:
        raise UsageError(f"limit must be an integer from 1 to {MAX_FAN_PAGE}, not {limit}")
    failed_only = flag(request, "failed")
    if chosen is not None and chosen not in {fan.first_seq for fan in fans}:
        raise UsageError(f"run {run_id!r} has no fan starting at seq {chosen}")
    pages: dict[int, tuple[FanPage | None, bool]] = {}
    for fan in fans:
        if fan.size <= FOLD_WIDTH and fan.first_seq != chosen:
            # A narrow fan's members stand in the timeline themselves.
            continue
        failed = bool(fan.counts.get("failed"))
        start, size = 0, FAN_PAGE
        if fan.first_seq == chosen:
            failed = failed if failed_only is None else failed_only
            start, size = offset, limit
        try:
            members: FanPage | None = await source.fan_page(
                run_id, fan.first_seq, offset=start, limit=size, failed=failed
            )
        except UsageError:
            # Its first member is being recorded again (a retry deleted
            # it): the page shows the fan's bar until it is back.
            members = None
        pages[fan.first_seq] = (members, failed)
    return pages


def _ranges(seqs: Iterable[int], folded: Sequence[FanStats]) -> list[tuple[int, int]]:
    """``seqs`` (sorted) as ranges of seqs that hold no folded fan's member,
    so reading them reads no member of a wide fan."""
    bounds = sorted((fan.first_seq, fan.last_seq) for fan in folded)
    ranges: list[tuple[int, int]] = []
    for seq in sorted(seqs):
        if ranges and not any(ranges[-1][1] < lo <= seq for lo, _ in bounds):
            ranges[-1] = (ranges[-1][0], seq)
        else:
            ranges.append((seq, seq))
    return ranges


async def _checkpoints(
    source: ConsoleSource, run_id: str, entries: Iterable[HistoryEntry], folded: Sequence[FanStats]
) -> dict[int, Checkpoint]:
    """The stored checkpoints (payloads and marks) of ``entries``, by seq."""
    seqs = {entry.seq for entry in entries}
    found: dict[int, Checkpoint] = {}
    for lo, hi in _ranges(seqs, folded):
        for cp in await source.store.get_checkpoints(run_id, lo, hi):
            if cp.seq in seqs:
                found[cp.seq] = cp
    return found


def payload(text: str | None) -> dict[str, Any]:
    """A stored payload for the JSON viewer: ``{"value": ...}``, or
    ``{"sealed": "encrypted with k2"}`` (and the like) for one this console
    cannot read."""
    value = payload_for_people(text)
    if is_marked(text) and isinstance(value, dict):
        if "encrypted_with" in value:
            return {"sealed": f"encrypted with {value['encrypted_with']}"}
        if "encoded" in value:
            return {"sealed": "encoded by a codec this console was not given"}
        if "blob" in value:
            return {"sealed": f"in blob {value['blob']} ({value['size']} bytes)"}
    return {"value": value, "absent": text is None}


async def _live_groups(source: ConsoleSource) -> set[str] | None:
    """The groups live workers serve now (routes' groups), or None when
    the console has no broker or it does not answer."""
    if source.broker is None:
        return None
    try:
        routes = await source.broker.worker_groups()
    except BrokerError:
        return None
    return {route.partition("@")[0] for route in routes}


def reason(
    entry: HistoryEntry,
    cp: Checkpoint | None,
    live: set[str] | None,
    queues: dict[str, QueueDepth],
    position: int | None = None,
) -> tuple[str, float | None] | None:
    """Why a pending operation waits, in words, and until when if that is
    known; None for one that does not wait. ``position`` is its place in
    its queue's line, if it waits in one and that was read."""
    if entry.status not in ("pending", "running"):
        return None
    code = None if cp is None or cp.mark is None else cp.mark.code
    if entry.paused:
        return "paused at a breakpoint: continue it or skip the step", None
    if code == "rate_limited":
        return entry.waiting or "rate-limited", entry.wake_at
    if code == "queued" and entry.waiting:
        depth = None if entry.queue is None else queues.get(entry.queue)
        said = entry.waiting
        if position is not None:
            said += f": queued at position {position}"
            if depth is not None:
                said += f" of {depth.waiting}"
        if depth is None:
            return said, None
        return f"{said} ({depth.waiting} waiting, {depth.admitted} admitted)", None
    if code == "blocked":
        return f"blocked: {entry.waiting}", entry.wake_at
    if entry.waiting:
        return entry.waiting, None
    if entry.kind == "remote" and entry.group is not None:
        if live is not None and entry.group not in live:
            where = entry.out_on or "the broker"
            return f"no live worker of group {entry.group}: the task waits on {where}", None
        if entry.out_on:
            return f"sent to group {entry.group} on {entry.out_on}: a worker runs it", None
        return f"to be sent to group {entry.group}", entry.wake_at
    if entry.kind == "timer":
        return "sleeping", entry.wake_at
    if entry.kind == "signal":
        return f"waiting for signal {entry.name!r}", entry.wake_at
    if entry.kind == "child":
        return f"waiting for child run {entry.child_id}", None
    return (
        "running in an engine" if entry.started_at is not None else "waiting for an engine"
    ), None


def actions(run: Run, detail: RunDetail) -> set[str]:
    """The actions that apply to the run as it stands."""
    offered = {"fork"}
    if run.status not in TERMINAL_STATUSES and run.status != "cancelling":
        offered |= {"cancel", "signal"}
    if run.status in ("failed", "dead"):
        offered.add("retry")
    if run.status == "suspended" and any(
        isinstance(item, HistoryEntry) and item.kind == "remote" and item.status == "pending"
        for item in detail.timeline
    ):
        offered.add("resend")
    if run.status in TERMINAL_STATUSES:
        offered.add("retry-from")
    return offered


async def _stream_tail(source: ConsoleSource, run_id: str) -> dict[str, Any] | None:
    """How many values the run emitted and the last `STREAM_TAIL` of them
    (offset, value as JSON text); None if it emitted none. The page's live
    refresh follows it: each emit changes the run's stamp."""
    store = source.store
    head = [r for r in await store.get_records(run_id) if r.kind == STREAM_HEAD]
    if not head or head[0].output is None:
        return None
    count = int(head[0].output)
    first = max(0, count - STREAM_TAIL)
    after = None if first == 0 else offset_key(first - 1)
    rows = await store.list_values(stream_scope(run_id), after=after, limit=STREAM_TAIL)
    return {
        "count": count,
        "first": first,
        "values": [(first + i, row.value) for i, row in enumerate(rows)],
    }


async def run_page(request: Request) -> Response:
    """``/runs/{id}``: the run's header, input and output, lineage, chart
    and timeline with wide fans folded, each fan's progress and a page of
    its members, and the actions that apply."""
    source = _source(request)
    run_id: str = request.path_params["run_id"]
    detail = await source.run_detail(run_id)
    run = detail.run
    entries = [item for item in detail.timeline if isinstance(item, HistoryEntry)]
    folded = [item for item in detail.timeline if isinstance(item, FanStats)]
    fan_pages = await _fan_pages(request, run.id, detail.fans)
    members = [
        member for page, _ in fan_pages.values() if page is not None for member in page.members
    ]
    stored = await _checkpoints(source, run.id, entries, folded)
    # A failed fan page lists members far apart: read them one by one.
    for member in members:
        if member.seq not in stored:
            found = await source.store.get_checkpoints(run.id, member.seq, member.seq)
            stored.update((cp.seq, cp) for cp in found)
    pending = [e for e in [*entries, *members] if e.status in ("pending", "running")]
    live = await _live_groups(source) if pending else None
    queues = {d.queue: d for d in await source.store.queue_depths()} if pending else {}
    positions: dict[int, int | None] = {}
    for entry in [e for e in pending if e.queue is not None][:POSITIONS_READ]:
        assert entry.queue is not None
        positions[entry.seq] = await source.store.queue_position(entry.queue, run.id, entry.seq)
    now = source.clock.now()
    handles = run.id.rpartition(_HANDLER)[0] if _HANDLER in run.id else None
    return page_response(
        request,
        "run.html",
        title=f"Run {run.id}",
        nav="runs",
        detail=detail,
        run=run,
        run_input=payload(run.input),
        run_output=payload(run.output),
        payloads={seq: (payload(cp.input), payload(cp.output)) for seq, cp in stored.items()},
        reasons={
            e.seq: reason(e, stored.get(e.seq), live, queues, positions.get(e.seq)) for e in pending
        },
        actions=actions(run, detail),
        chart=chart(run, detail.timeline, now),
        ancestors=list(reversed(lineage(run.id)[1:])),
        handles=handles,
        fan_pages=fan_pages,
        paused=[entry for entry in entries if entry.paused],
        fold_width=FOLD_WIDTH,
        fan_page_size=FAN_PAGE,
        retried_rows=RETRIED_ROWS,
        stream=await _stream_tail(source, run.id),
        # How long pending operations have waited, as of this page.
        now=now,
    )

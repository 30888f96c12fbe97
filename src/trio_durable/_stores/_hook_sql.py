"""Webhooks, breakpoints, pauses and settings in the SQL stores: their
tables, the writes of `HookOp` and the reads, written once for SQLite and
PostgreSQL (which differ here only in the placeholder)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .._base._records import TERMINAL_STATUSES, Breakpoint, PausedStep, Webhook
from ._base import WriteConflict
from ._hook_ops import (
    CreateWebhook,
    DeleteBreakpoint,
    KeepSetting,
    PauseStep,
    PutBreakpoint,
    ResumeStep,
    UseWebhook,
)

if TYPE_CHECKING:
    from ._group_commit import GroupCommit
    from ._sql_store import Dialect

# The same statements create them in both stores (``double precision`` is
# a REAL in SQLite). Webhooks are kept by the SHA-256 of their token only.
TABLES: Final = (
    """
    CREATE TABLE IF NOT EXISTS webhooks (
        token_hash TEXT PRIMARY KEY,
        run_id TEXT NOT NULL,
        name TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        used_at DOUBLE PRECISION
    )
    """,
    "CREATE INDEX IF NOT EXISTS webhooks_run ON webhooks (run_id)",
    """
    CREATE TABLE IF NOT EXISTS breakpoints (
        id TEXT PRIMARY KEY,
        workflow TEXT NOT NULL,
        step TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS paused_steps (
        run_id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        workflow TEXT NOT NULL,
        step TEXT NOT NULL,
        breakpoint_id TEXT NOT NULL,
        paused_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (run_id, seq)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS store_settings (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )
    """,
)

RUN_TABLES: Final = ("webhooks", "paused_steps")
"""The tables above with rows of a run, deleted when it is pruned."""

_PAUSED_COLUMNS: Final = "run_id, seq, workflow, step, breakpoint_id, paused_at"


def hook_ops(p: str) -> dict[type[Any], Callable[[Any, Any], Any]]:
    """The handlers of `HookOp`, for a dialect whose placeholder is ``p``."""

    def create_webhook(cur: Any, op: CreateWebhook) -> None:
        cur.execute(
            "INSERT INTO webhooks (token_hash, run_id, name, created_at)"
            f" VALUES ({p}, {p}, {p}, {p}) ON CONFLICT (token_hash) DO NOTHING",
            (op.token_hash, op.run_id, op.name, op.at),
        )

    def use_webhook(cur: Any, op: UseWebhook) -> None:
        cur.execute(
            f"UPDATE webhooks SET used_at = {p} WHERE token_hash = {p} AND used_at IS NULL",
            (op.at, op.token_hash),
        )
        if cur.rowcount != 1:
            raise WriteConflict("the webhook is unknown or used")

    def keep_setting(cur: Any, op: KeepSetting) -> str:
        cur.execute(
            f"INSERT INTO store_settings (name, value) VALUES ({p}, {p})"
            " ON CONFLICT (name) DO NOTHING",
            (op.name, op.value),
        )
        row = cur.execute(f"SELECT value FROM store_settings WHERE name = {p}", (op.name,))
        return str(row.fetchone()[0])

    def put_breakpoint(cur: Any, op: PutBreakpoint) -> None:
        bp = op.breakpoint
        cur.execute(
            f"INSERT INTO breakpoints (id, workflow, step, created_at) VALUES ({p}, {p}, {p}, {p})"
            " ON CONFLICT (id) DO NOTHING",
            (bp.id, bp.workflow, bp.step, bp.created_at),
        )

    def delete_breakpoint(cur: Any, op: DeleteBreakpoint) -> bool:
        cur.execute(f"DELETE FROM breakpoints WHERE id = {p}", (op.breakpoint_id,))
        return bool(cur.rowcount == 1)

    def pause_step(cur: Any, op: PauseStep) -> None:
        x = op.paused
        cur.execute(
            f"INSERT INTO paused_steps ({_PAUSED_COLUMNS}) VALUES ({p}, {p}, {p}, {p}, {p}, {p})"
            " ON CONFLICT (run_id, seq) DO NOTHING",
            (x.run_id, x.seq, x.workflow, x.step, x.breakpoint_id, x.paused_at),
        )

    def resume_step(cur: Any, op: ResumeStep) -> None:
        cur.execute(
            f"DELETE FROM paused_steps WHERE run_id = {p} AND seq = {p}", (op.run_id, op.seq)
        )
        if cur.rowcount != 1:
            raise WriteConflict(f"run {op.run_id!r} is not paused at seq {op.seq}")

    return {
        CreateWebhook: create_webhook,
        UseWebhook: use_webhook,
        KeepSetting: keep_setting,
        PutBreakpoint: put_breakpoint,
        DeleteBreakpoint: delete_breakpoint,
        PauseStep: pause_step,
        ResumeStep: resume_step,
    }


class SQLHooks:
    """The read methods of webhooks, breakpoints and pauses for `SQLStore`."""

    _commit: GroupCommit[Any]
    _dialect: Dialect[Any]

    async def _rows(self, statement: str, params: tuple[Any, ...]) -> list[Any]:
        def work(cur: Any) -> tuple[list[Any], None]:
            return list(cur.execute(statement, params).fetchall()), None

        return await self._commit.submit(work, writes=False)

    async def get_webhook(self, token_hash: str) -> Webhook | None:
        p = self._dialect.param
        rows = await self._rows(
            "SELECT token_hash, run_id, name, created_at, used_at FROM webhooks"
            f" WHERE token_hash = {p}",
            (token_hash,),
        )
        if not rows:
            return None
        token, run_id, name, created_at, used_at = rows[0]
        return Webhook(
            token_hash=token, run_id=run_id, name=name, created_at=created_at, used_at=used_at
        )

    async def list_breakpoints(self) -> list[Breakpoint]:
        rows = await self._rows(
            "SELECT id, workflow, step, created_at FROM breakpoints ORDER BY created_at, id", ()
        )
        return [Breakpoint(id=i, workflow=w, step=s, created_at=c) for i, w, s, c in rows]

    async def paused_steps(self, run_id: str | None = None) -> list[PausedStep]:
        p = self._dialect.param
        where, params = ("", ()) if run_id is None else (f" AND s.run_id = {p}", (run_id,))
        # Pauses of runs that ended meanwhile (cancelled) are not shown.
        terminal = ", ".join(f"'{status}'" for status in sorted(TERMINAL_STATUSES))
        columns = ", ".join(f"s.{c}" for c in _PAUSED_COLUMNS.split(", "))
        rows = await self._rows(
            f"SELECT {columns} FROM paused_steps s JOIN runs r ON r.id = s.run_id"
            f" WHERE r.status NOT IN ({terminal}){where} ORDER BY s.run_id, s.seq",
            params,
        )
        return [
            PausedStep(run_id=r, seq=int(s), workflow=w, step=st, breakpoint_id=b, paused_at=at)
            for r, s, w, st, b, at in rows
        ]

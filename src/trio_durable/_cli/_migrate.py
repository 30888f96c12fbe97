"""``trio-durable migrate``: create or upgrade a store's schema, and say what
was done.

Engines create and upgrade the schema themselves when they open a store;
``migrate`` does it ahead of a deploy, under an operator's eye (and with
``--check``, only says whether it is needed). It is idempotent: on a store
whose schema is current it changes nothing and says so.
"""

from __future__ import annotations

from typing import Final, Literal, final

import attrs
import click
import trio

from .._base._exceptions import StoreError
from .._stores import open_store
from .._stores._versions import has_schema_versions, schema_version
from ._common import (
    EXIT_FAILED,
    EXIT_USAGE,
    CommandError,
    json_option,
    logging_to_stderr,
    need_store,
    plain,
    print_json,
    shown,
    store_option,
)

Action = Literal["created", "upgraded", "current", "needed", "opened"]

_SAID: Final[dict[Action, str]] = {
    "created": "created the schema (version {after})",
    "upgraded": "upgraded the schema from version {before} to {after}",
    "current": "the schema is current (version {after}): nothing to do",
    "needed": "the schema is at version {before}, this trio-durable writes {newest}:"
    " `trio-durable migrate` would {verb} it",
    "opened": "opened: this store creates or upgrades its schema itself as it opens",
}


@final
@attrs.define(frozen=True, kw_only=True)
class Migration:
    """What ``migrate`` found and did.

    Attributes:
      store: The store's URL, without its secrets.
      action: ``created``, ``upgraded`` or ``current`` (nothing to do);
        ``needed`` with ``--check`` when it would create or upgrade;
        ``opened`` for a store of another package, whose versions it does
        not know.
      before: The schema version found (0: none), None if unknown.
      after: The version left, None if unknown (or with ``--check``).
      newest: The version this trio-durable writes, None if unknown.
    """

    store: str
    action: Action
    before: int | None
    after: int | None
    newest: int | None

    def message(self) -> str:
        """The line ``migrate`` prints for people."""
        text = _SAID[self.action].format(
            before=self.before,
            after=self.after,
            newest=self.newest,
            verb="create" if self.before == 0 else "upgrade",
        )
        return f"{self.store}: {text}"


async def migrate_store(url: str, *, check: bool = False) -> Migration:
    """Bring the schema of the store ``url`` names up to date (or, with
    ``check``, only find out whether it is).

    Raises:
      InvalidURLError: The URL is malformed.
      StoreError: The store cannot be reached, or its schema is newer than
        this trio-durable knows.
    """
    masked = shown(url)
    if not has_schema_versions(url):
        if check:
            raise CommandError(
                f"{masked}: --check reads the schema of SQLite and PostgreSQL stores only",
                EXIT_USAGE,
            )
        async with open_store(url):
            pass
        return Migration(store=masked, action="opened", before=None, after=None, newest=None)
    before = await schema_version(url)
    if check:
        if before.found > before.newest:
            raise StoreError(
                f"{masked} has schema version {before.found}, newer than {before.newest},"
                " the newest this trio-durable knows: upgrade trio-durable"
            )
        action: Action = "current" if before.found == before.newest else "needed"
        return Migration(
            store=masked,
            action=action,
            before=before.found,
            after=before.found if action == "current" else None,
            newest=before.newest,
        )
    async with open_store(url):
        # Opening migrated it (under the store's own lock, so an engine
        # opening at the same time does not migrate it twice).
        pass
    after = await schema_version(url)
    if before.found == after.found:
        action = "current"
    else:
        action = "created" if before.found == 0 else "upgraded"
    return Migration(
        store=masked, action=action, before=before.found, after=after.found, newest=after.newest
    )


@click.command("migrate", short_help="Create or upgrade the store's schema.")
@store_option("The store's URL (required).")
@click.option(
    "--check",
    is_flag=True,
    help="Write nothing; exit with status 1 if the schema needs creating or upgrading.",
)
@json_option
@click.pass_context
def migrate_command(ctx: click.Context, store: str | None, check: bool, as_json: bool) -> None:
    """Create the store's schema, or apply its missing migrations.

    Engines do this when they open a store; run it ahead of a deploy to do
    it once, on purpose. It is idempotent: on a current schema it changes
    nothing. SQLite and PostgreSQL stores say which version they were at
    and are at now.
    """
    store = need_store(store)
    if store.partition("://")[0].lower() == "memory":
        raise CommandError(
            "the memory store lives inside one process and has no schema to migrate", EXIT_USAGE
        )
    # Each step of an upgrade is logged at WARNING, one line on stderr.
    with logging_to_stderr("warning"):
        migration = trio.run(lambda: migrate_store(store, check=check))
    if as_json:
        print_json(plain(migration))
    else:
        click.echo(migration.message())
    if migration.action == "needed":
        ctx.exit(EXIT_FAILED)

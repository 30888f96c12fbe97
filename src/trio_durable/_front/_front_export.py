"""`ExportsHistories`: the `export_history` that `Engine` and `Client`
share, a run's history read from the front end's store as the document of
`_wire._histories`, which the replay tests read back."""

from __future__ import annotations

from typing import Any

import attrs

from .._base._exceptions import CodecError, EncryptedHistoryError
from .._base._records import Checkpoint, ErrorInfo
from .._base._run_records import RunRecord
from .._kernel._run_reads import read_run
from .._payloads._stored_payloads import unreadable
from .._wire._histories import History, history_document
from ._front_core import FrontPart


class ExportsHistories(FrontPart):
    """`export_history`, shared by `Engine` and `Client`."""

    async def export_history(
        self, run_id: str, *, namespace: str | None = None, encrypted: bool = False
    ) -> dict[str, Any]:
        """The run's history as one JSON document: the run, its checkpoints
        (each operation's inputs and outputs) and its run records, with the
        app's name and `App.registration_hash` (null for a client opened
        without an app), under a format version. It only reads the store.

        `trio_durable.testing.replay` replays it against a workflow's code
        (see docs/changing-workflow-code.md, which also gives the format's
        JSON Schema); ``trio-durable runs export`` writes it to files.

        Payloads are as the front end reads them: decrypted by its codec
        (``codec=`` of `open_engine` or `open_client`), else as stored.

        Args:
          run_id: The run's id.
          namespace: If given, a run of another namespace counts as missing.
          encrypted: Export payloads that no codec here decrypts as they
            are stored (the document says ``"encrypted": true``; replaying
            it needs the codec) instead of refusing.

        Returns:
          The document, a dict of JSON values (``json.dumps`` writes it).

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          EncryptedHistoryError: Payloads of the run are encrypted and
            the front end has no codec for them (and ``encrypted`` is
            false).
          CodecError: The codec lacks a key the payloads name.
          BlobNotFound: A payload is kept in a blob store the front end
            was opened without (or its blob is gone).
        """
        core = self._core
        core.check_open()
        run = await read_run(core.store, run_id, namespace)
        history = History(
            run=run,
            checkpoints=tuple(await core.store.get_checkpoints(run.id)),
            records=tuple(await core.store.get_records(run.id)),
            app_name=None if core.app is None else core.app.name,
            registration_hash=None if core.app is None else core.app.registration_hash(),
        )
        sealed = _encrypted(history)
        if sealed is not None and not encrypted:
            raise EncryptedHistoryError(
                f"run {run.id!r} holds encrypted payloads ({sealed}): give the codec's keys"
                " to export them decrypted, or export them as stored (encrypted=True)"
            )
        return history_document(attrs.evolve(history, encrypted=sealed is not None))


def _encrypted(history: History) -> str | None:
    """What says that payloads of ``history`` are encrypted as stored (the
    first such), or None if none is.

    Raises:
      BlobNotFound: A payload is kept in a blob store not read here.
    """
    run = history.run
    texts = [run.input, run.output]
    errors: list[ErrorInfo | None] = [run.error]
    rows: list[Checkpoint | RunRecord] = [*history.checkpoints, *history.records]
    for row in rows:
        texts += [row.input, row.output]
        errors += [row.error, *row.errors]
    for text in texts:
        error = unreadable(text)
        if isinstance(error, CodecError):
            return str(error).partition(",")[0]
        if error is not None:
            raise error
    for info in errors:
        if info is not None and info.sealed is not None:
            return f"an error {info.message}"
    return None

"""Replay tests: exported histories (`Client.export_history`, ``trio-durable
runs export``) replayed against an app's code in memory, so that a change
that would break runs in flight fails a test instead of a deploy.

`replay` replays one history, `replay_all` every history of a folder, and
``trio-durable replay`` files and folders for CI; each reads the files
here (`history_paths`, `load_history`) and replays them with
`replay_against` (`.._features.messages._history_replay`). See
docs/changing-workflow-code.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, final

import attrs
import trio

from .._base._clock import Clock
from .._base._exceptions import EncryptedHistoryError, HistoryError, TrioDurableError
from .._features.messages._history_replay import Replayed, replay_against
from .._front._app import App
from .._payloads._codec import PayloadCodec
from .._stores._codec import PayloadCoder
from .._wire._histories import History, read_history

HistorySource = Mapping[str, Any] | str | os.PathLike[str]
"""A history as the replay tests take it: its document (what
`Client.export_history` returns), or the path of its file."""


def replay(app: App, history: HistorySource, *, codec: PayloadCodec | None = None) -> None:
    """Replay an exported history against ``app``'s code, in memory (no
    store, no broker, no step runs), as an engine would replay the run.

    Every operation the history recorded replays with its recorded
    outcome; patches (`Context.patched`) answer as on an engine. A run
    still open replays up to where it stands; a run that ended (completed
    or failed) replays to its end, and must end the same way: the same
    output, or the same error. Call it from synchronous code (a plain
    pytest test): it runs Trio itself.

    Args:
      app: The app whose workflow the run executes.
      history: The history's document (`Client.export_history`), or the
        path of its file (``trio-durable runs export``).
      codec: The codec that decrypts a history exported encrypted
        (``encrypted=True``, ``runs export --encrypted``).

    Raises:
      NonDeterminismError: The code does not fit the history. Its message
        is a report for people: the seq, what the history recorded there
        (kind, name, a digest of the arguments), what the code asks for,
        and the file and line of the code that asked. Its ``details``
        hold the same (``seq``, ``recorded``, ``requested``, their kinds,
        ``asked_at``, ...).
      HistoryError: The file cannot be read, is not JSON, or is no history
        of this format or format version.
      EncryptedHistoryError: The history is encrypted and no ``codec``
        was given.
      UnknownWorkflowError: ``app`` lacks the run's workflow or version.
    """
    if isinstance(history, Mapping):
        run = history.get("run")
        source = f"the history of run {run.get('id') if isinstance(run, Mapping) else None!r}"
        read = read_history(history, source)
    else:
        source = os.fspath(history)
        read = load_history(Path(source))

    async def main() -> None:
        await replay_against(app, Clock(), decoded(read, codec, source), source)

    trio.run(main)


def replay_all(
    app: App, folder: str | os.PathLike[str], *, codec: PayloadCodec | None = None
) -> int:
    """Replay every exported history in ``folder`` (each ``*.json`` file in
    it or below it), as `replay` does, and report every one that fails.

    Args:
      app: The app whose workflows the runs execute.
      folder: The folder.
      codec: The codec that decrypts histories exported encrypted.

    Returns:
      How many histories replayed.

    Raises:
      ExceptionGroup: One or more histories failed: one exception each
        (`NonDeterminismError`, `HistoryError`, ...) as `replay` raises it,
        its message naming the file.
      HistoryError: ``folder`` is no folder, or holds no ``*.json`` file.
    """
    path = Path(folder)
    if not path.is_dir():
        raise HistoryError(f"{os.fspath(folder)} is no folder")
    outcomes = trio.run(replay_files, app, history_paths([path]), codec)
    failures = [o.error for o in outcomes if o.error is not None]
    if failures:
        raise ExceptionGroup(
            f"{len(failures)} of {len(outcomes)} histories in {path} do not replay", failures
        )
    return len(outcomes)


def history_paths(paths: Iterable[Path]) -> list[Path]:
    """The history files ``paths`` name: a file as it is, a folder's
    ``*.json`` files (below it too), sorted.

    Raises:
      HistoryError: A path is neither a file nor a folder, or a folder
        holds no ``*.json`` file.
    """
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(p for p in path.rglob("*.json") if p.is_file())
            if not inside:
                raise HistoryError(f"{path} holds no exported history (no *.json file)")
            found += inside
        elif path.is_file():
            found.append(path)
        else:
            raise HistoryError(f"{path} is neither a file nor a folder")
    return found


def load_history(path: Path) -> History:
    """The history in the file at ``path``.

    Raises:
      HistoryError: It cannot be read, is not JSON, or is no history of
        this format and version.
    """
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise HistoryError(f"{path} cannot be read: {exc.strerror or exc}") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise HistoryError(f"{path} is not JSON: {exc}") from None
    return read_history(document, os.fspath(path))


def decoded(history: History, codec: PayloadCodec | None, source: str) -> History:
    """``history`` with its payloads decrypted by ``codec`` if it was
    exported encrypted.

    Raises:
      EncryptedHistoryError: It is encrypted and ``codec`` is None.
      CodecError: ``codec`` lacks a key it names.
    """
    if not history.encrypted:
        return history
    if codec is None:
        raise EncryptedHistoryError(
            f"{source} was exported with its payloads encrypted: replay it with the codec"
            " (codec=, or the keys in TRIO_DURABLE_CODEC_KEYS)"
        )
    coder = PayloadCoder(codec)
    return History(
        run=coder.run_out(history.run),
        checkpoints=tuple(map(coder.checkpoint_out, history.checkpoints)),
        records=tuple(map(coder.checkpoint_out, history.records)),
        app_name=history.app_name,
        registration_hash=history.registration_hash,
    )


@final
@attrs.define(frozen=True, kw_only=True)
class Outcome:
    """How the replay of one history file went.

    Attributes:
      path: The file.
      replayed: What the replay found, if it passed.
      error: Why it failed, if it did.
    """

    path: Path
    replayed: Replayed | None = None
    error: TrioDurableError | None = None


async def replay_files(
    app: App, paths: Sequence[Path], codec: PayloadCodec | None
) -> list[Outcome]:
    """Replay each history file of ``paths`` against ``app``'s code, one
    after the other; the outcome of each."""
    clock = Clock()
    outcomes = []
    for path in paths:
        source = os.fspath(path)
        try:
            history = decoded(load_history(path), codec, source)
            replayed = await replay_against(app, clock, history, source)
        except TrioDurableError as exc:
            if source not in str(exc):
                exc.add_note(f"(replaying {source})")
            outcomes.append(Outcome(path=path, error=exc))
        else:
            outcomes.append(Outcome(path=path, replayed=replayed))
    return outcomes

"""Rows as the release before out-of-band payload marks wrote them, written
by hand into a SQL store set back to the schema version before the marks,
and what the migration must make of them (for
`test_payload_marks_migration` on SQLite and its PostgreSQL twin).

The old release kept `AesGcmCodec`'s envelope ``{"$enc":"k1","d":"..."}``
and the reference ``{"$blob":"sha256-...","size":N}`` in the payload's
place, and an encrypted error's envelope in its ``details``. Texts of
those exact forms are marked; look-alikes of other forms (spaced, with
another key, a short hash) were payloads and stay as they are.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any, Final

import trio_durable as td
from trio_durable._base._records import Checkpoint, ErrorInfo, Run, signal_token
from trio_durable._stores._blob_store import SCOPE
from trio_durable._stores._ops import CreateRun, DeliverSignal, PutCheckpoint, PutValue

K1: Final = bytes(range(16))
RING1: Final = td.Keyring.single(K1, "k1")
CODEC: Final = td.AesGcmCodec(RING1)

app = td.App("legacy-rows")


@app.workflow()
async def waits(ctx: td.Context, text: str) -> dict[str, Any]:
    first = await ctx.wait_signal("s")
    return {"text": text, "first": first}


LOOKALIKES: Final = (
    '{"$enc": "k1", "d": "AAAA"}',
    '{"$enc":"k1","d":"AAAA","e":1}',
    '{"d":"AAAA","$enc":"k1"}',
    '{"$blob":"sha256-abc","size":3}',
    '{"$blob":"sha256-' + "0" * 64 + '","size":3,"x":1}',
)
"""Payloads in the clear that look like what the old release marked."""

SEALED_DETAILS: Final = {"card": "SECRET-1"}


def _sealed_error(message: str, details: Any, code: str | None = None) -> ErrorInfo:
    """An error as the old `CodecStore` kept it."""
    sealed = CODEC.encode(json.dumps({"message": message, "details": details, "traceback": None}))
    return ErrorInfo(
        message="encrypted with k1", code=code, details=json.loads(sealed), type="FatalError"
    )


async def write_legacy(store: td.Store, blobs: td.LocalBlobStore) -> dict[str, str]:
    """Write the old rows into ``store`` (no payload layers) and their blobs;
    return the blob keys by name."""
    # A run's input in a blob, the blob an encrypted payload in band.
    secret_input = json.dumps(["SECRET-input " * 10])
    content = CODEC.encode(secret_input).encode()
    input_key = "sha256-" + hashlib.sha256(content).hexdigest()
    await blobs.put(input_key, content, at=1.0)
    # A signal's payload in a blob, in the clear.
    signal_text = json.dumps({"value": "SECRET-signal " * 10})
    signal_key = "sha256-" + hashlib.sha256(signal_text.encode()).hexdigest()
    await blobs.put(signal_key, signal_text.encode(), at=1.0)

    def reference(blob: str, size: int) -> str:
        return json.dumps({"$blob": blob, "size": size}, separators=(",", ":"))

    run = Run(
        id="old-1",
        workflow="waits",
        status="pending",
        input=reference(input_key, len(content)),
        created_at=1.0,
        updated_at=1.0,
    )
    failed = Run(
        id="old-2",
        workflow="waits",
        status="failed",
        input=CODEC.encode('["SECRET-two"]'),
        error=_sealed_error("declined", SEALED_DETAILS, code="declined"),
        created_at=1.0,
        updated_at=1.0,
    )
    lookalikes = [
        Run(
            id=f"look-{n}",
            workflow="waits",
            status="completed",
            input="[]",
            output=text,
            created_at=1.0,
            updated_at=1.0,
        )
        for n, text in enumerate(LOOKALIKES)
    ]
    step = Checkpoint(
        run_id="old-2",
        seq=1,
        name="refuse",
        kind="local",
        status="failed",
        input=CODEC.encode('["SECRET-two"]'),
        attempts=2,
        error=_sealed_error("declined", SEALED_DETAILS, code="declined"),
        errors=(
            _sealed_error("timed out", None),
            # In the clear: details that look like an envelope but have a
            # third key.
            ErrorInfo(message="in the clear", details={"$enc": "k1", "d": "x", "e": 1}),
            _sealed_error("declined", SEALED_DETAILS, code="declined"),
        ),
    )
    # An error in the clear with a NUL in its message, where the migration
    # looks ("$enc" in it): left as it is.
    nul = Checkpoint(
        run_id="old-2",
        seq=2,
        name="other",
        kind="local",
        status="failed",
        error=ErrorInfo(message="nul \x00 here", details={"$enc": 5}),
        errors=(ErrorInfo(message="nul \x00 here", details={"$enc": 5}),),
    )
    await store.apply(
        [
            CreateRun(run),
            CreateRun(failed),
            *(CreateRun(r) for r in lookalikes),
            PutCheckpoint(step),
            PutCheckpoint(nul),
            # Buffered for "s" of old-1 (no waiter is registered).
            DeliverSignal(signal_token("old-1", "s"), reference(signal_key, len(signal_text))),
            PutValue("things", "a", CODEC.encode('{"secret":"SECRET-value"}'), 1.0),
            PutValue("things", "b", LOOKALIKES[0], 1.0),
            # The blobs' references of the run, as the old release kept them.
            *(
                PutValue(SCOPE, key, "1", 1.0)
                for blob in (input_key, signal_key)
                for key in (f"r/{blob}/old-1", f'o/["old-1","{blob}"]')
            ),
        ]
    )
    return {"input": input_key, "signal": signal_key}


async def check_marked(store: td.Store, keys: dict[str, str]) -> None:
    """The migration marked exactly the old forms, in ``store`` (no layers)."""
    old_1 = await store.get_run("old-1")
    assert old_1 is not None
    assert old_1.input.startswith('~blob:{"$blob":"' + keys["input"])
    old_2 = await store.get_run("old-2")
    assert old_2 is not None
    assert old_2.input.startswith('~enc:{"$enc":"k1","d":"')
    assert old_2.error is not None
    assert old_2.error.details is None
    assert old_2.error.sealed is not None
    assert json.loads(old_2.error.sealed)["$enc"] == "k1"
    assert (old_2.error.message, old_2.error.code) == ("encrypted with k1", "declined")
    for n, text in enumerate(LOOKALIKES):
        look = await store.get_run(f"look-{n}")
        assert look is not None
        assert look.output == text
    [step, nul] = await store.get_checkpoints("old-2")
    assert step.input is not None
    assert step.input.startswith("~enc:")
    assert [e.sealed is not None for e in step.errors] == [True, False, True]
    assert step.errors[1] == ErrorInfo(
        message="in the clear", details={"$enc": "k1", "d": "x", "e": 1}
    )
    assert nul.error == ErrorInfo(message="nul \x00 here", details={"$enc": 5})
    assert nul.errors == (nul.error,)
    [buffered] = await store.buffered_signals(signal_token("old-1", "s"))
    assert buffered.startswith('~blob:{"$blob":"' + keys["signal"])
    a = await store.get_value("things", "a")
    b = await store.get_value("things", "b")
    assert a is not None
    assert b is not None
    assert a.value.startswith('~enc:{"$enc":"k1"')
    assert b.value == LOOKALIKES[0]


async def check_read_back(engine: td.Engine) -> None:
    """An engine with the key and the blob store reads the old rows as the
    old release did, and the waiting run goes on."""
    failed = await engine.get("old-2")
    assert json.loads(failed.input) == ["SECRET-two"]
    assert failed.error is not None
    assert (failed.error.message, failed.error.details) == ("declined", SEALED_DETAILS)
    [entry, _] = (await engine.history("old-2")).entries
    assert [e.message for e in entry.errors] == ["timed out", "in the clear", "declined"]
    assert entry.errors[2].details == SEALED_DETAILS
    for n, text in enumerate(LOOKALIKES):
        assert (await engine.get(f"look-{n}")).output == text
    # Its turn takes the signal buffered for it.
    assert await engine.result("old-1") == {
        "text": "SECRET-input " * 10,
        "first": {"value": "SECRET-signal " * 10},
    }


def set_sqlite_version(path: Path, version: int) -> None:
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute(f"PRAGMA user_version = {version}")
    finally:
        connection.close()

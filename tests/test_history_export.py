"""Exported histories: what `export_history` (on a client and on an engine)
and ``trio-durable runs export`` write, checked against the format's JSON
Schema (docs/history.schema.json); the command only reads the store (the
SQLite file stays byte-identical); encrypted payloads are exported
decrypted with the codec's keys, refused without them (nothing written),
or exported as stored with ``--encrypted``, which replay decrypts with
the codec."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, Final

import jsonschema
import pytest
import trio

import replay_app
import trio_durable as td
import trio_durable.testing
from cli_families_store import unchanged
from replay_store import RUNS, export, fill, filled, histories
from test_cli import invoke, one_error_line

__all__ = ["filled", "histories"]

SCHEMA: Final = json.loads(
    (Path(__file__).resolve().parents[1] / "docs" / "history.schema.json").read_text()
)
KEY: Final = bytes(range(32))
KEYS: Final = f"k1:{base64.b64encode(KEY).decode()}"
CODEC: Final = td.AesGcmCodec(td.Keyring.parse(KEYS))


def valid(document: dict[str, Any]) -> None:
    """Checks ``document`` against the format's JSON Schema."""
    jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft202012Validator)


def test_the_schema_is_a_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert set(SCHEMA["required"]) == {
        "format",
        "format_version",
        "app",
        "encrypted",
        "run",
        "checkpoints",
        "records",
    }


def test_an_export_holds_the_run_its_checkpoints_and_the_app(histories: Path) -> None:
    for run_id in RUNS:
        valid(json.loads((histories / f"{run_id}.json").read_text()))
    done = json.loads((histories / "o-done.json").read_text())
    assert (done["format"], done["format_version"], done["encrypted"]) == (
        "trio-durable-history",
        1,
        False,
    )
    assert done["app"] == {
        "name": "shop",
        "registration_hash": replay_app.app.registration_hash(),
    }
    assert (done["run"]["id"], done["run"]["status"]) == ("o-done", "completed")
    assert json.loads(done["run"]["output"]) == ["charged o-2", "shipped o-2"]
    assert [(cp["seq"], cp["kind"], cp["name"]) for cp in done["checkpoints"]] == [
        (1, "local", "charge"),
        (2, "signal", "packed"),
        (3, "local", "ship"),
    ]
    charge = done["checkpoints"][0]
    assert (json.loads(charge["input"]), json.loads(charge["output"])) == (
        ["o-2"],
        "charged o-2",
    )
    priced = json.loads((histories / "p-1.json").read_text())
    assert "checked_from" in [record["kind"] for record in priced["records"]]


async def test_an_engine_exports_as_a_client_does(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    await fill(url)
    documents = await export(url, tmp_path / "out")
    async with td.open_engine(replay_app.app, store=url) as engine:
        assert await engine.export_history("o-done") == documents["o-done"]
        with pytest.raises(td.RunNotFoundError):
            await engine.export_history("nobody")
        with pytest.raises(td.RunNotFoundError):
            await engine.export_history("o-done", namespace="elsewhere")
    async with td.open_client(url) as client:
        # A client without the app cannot say which app made the history.
        assert (await client.export_history("o-done"))["app"] is None


def test_the_command_writes_one_file_per_run_and_writes_no_store(
    filled: Path, histories: Path, tmp_path: Path
) -> None:
    env = {"TRIO_DURABLE_STORE": f"sqlite:///{filled}", "TRIO_DURABLE_APP": "replay_app:app"}
    out = tmp_path / "out"
    with unchanged(filled):
        result = invoke(["runs", "export", *RUNS, "--out", str(out)], env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"exported {len(RUNS)} histories to {out}\n"
    for run_id in RUNS:
        written = json.loads((out / f"{run_id}.json").read_text())
        assert written == json.loads((histories / f"{run_id}.json").read_text())
    with unchanged(filled):
        chosen = invoke(
            ["runs", "export", "--workflow", "order", "--out", str(tmp_path / "o"), "--json"],
            env=env,
        )
    assert chosen.exit_code == 0, chosen.output
    assert sorted(Path(f).name for f in json.loads(chosen.stdout)["files"]) == [
        "o-done.json",
        "o-open.json",
    ]
    assert invoke(["replay", "replay_app:app", str(tmp_path / "o")]).exit_code == 0


def test_the_command_refuses_what_it_cannot_export(filled: Path, tmp_path: Path) -> None:
    env = {"TRIO_DURABLE_STORE": f"sqlite:///{filled}"}
    out = tmp_path / "out"
    for args, code, said in [
        (["nobody"], 1, "nobody"),
        (["--out-of-place"], 2, "No such option"),
        ([], 2, "give RUN ids, or at least one filter"),
        (["o-done", "--workflow", "order"], 2, "not both"),
        (["--status", "sleeping"], 2, "'sleeping' is not a status"),
    ]:
        with unchanged(filled):
            result = invoke(["runs", "export", *args, "--out", str(out)], env=env)
        assert result.exit_code == code, (args, result.output)
        assert said in one_error_line(result), args
        assert not out.exists()


def test_an_encrypted_store_exports_with_keys_and_is_refused_without(tmp_path: Path) -> None:
    path = tmp_path / "vault.db"
    url = f"sqlite:///{path}"
    trio.run(fill, url, CODEC)
    env = {"TRIO_DURABLE_STORE": url, "TRIO_DURABLE_CODEC_KEYS": None}

    refused = tmp_path / "refused"
    with unchanged(path):
        result = invoke(["runs", "export", *RUNS, "--out", str(refused)], env=env)
    assert result.exit_code == 2, result.output
    assert "holds encrypted payloads" in one_error_line(result)
    assert not refused.exists()

    clear = tmp_path / "clear"
    with unchanged(path):
        result = invoke(
            ["runs", "export", *RUNS, "--out", str(clear)],
            env={**env, "TRIO_DURABLE_CODEC_KEYS": KEYS},
        )
    assert result.exit_code == 0, result.output
    done = json.loads((clear / "o-done.json").read_text())
    valid(done)
    assert not done["encrypted"]
    assert json.loads(done["run"]["output"]) == ["charged o-2", "shipped o-2"]
    assert td.testing.replay_all(replay_app.app, clear) == len(RUNS)

    sealed = tmp_path / "sealed"
    with unchanged(path):
        result = invoke(["runs", "export", *RUNS, "--out", str(sealed), "--encrypted"], env=env)
    assert result.exit_code == 0, result.output
    kept = json.loads((sealed / "o-done.json").read_text())
    valid(kept)
    assert kept["encrypted"]
    assert kept["run"]["output"].startswith("~enc:")
    assert "charged" not in (sealed / "o-done.json").read_text()
    assert td.testing.replay_all(replay_app.app, sealed, codec=CODEC) == len(RUNS)
    with pytest.raises(td.EncryptedHistoryError, match="replay it with the codec"):
        td.testing.replay(replay_app.app, sealed / "o-done.json")
    with pytest.raises(td.NonDeterminismError):
        td.testing.replay(replay_app.changed, sealed / "o-done.json", codec=CODEC)
    replayed = invoke(
        ["replay", "replay_app:app", str(sealed)], env={"TRIO_DURABLE_CODEC_KEYS": KEYS}
    )
    assert replayed.exit_code == 0, replayed.output
    assert invoke(["replay", "replay_app:app", str(sealed)], env=env).exit_code == 2


async def test_a_client_without_the_codec_refuses_an_encrypted_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'vault.db'}"
    await fill(url, CODEC)
    async with td.open_client(url) as client:
        with pytest.raises(td.EncryptedHistoryError, match="'o-done' holds encrypted"):
            await client.export_history("o-done")
        kept = await client.export_history("o-done", encrypted=True)
    assert kept["encrypted"]
    async with td.open_client(url, codec=CODEC) as client:
        assert not (await client.export_history("o-done"))["encrypted"]

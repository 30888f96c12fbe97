"""Keyrings: the keys that sign messages and encrypt payloads, rotated by id."""

from __future__ import annotations

import base64

import pytest

import trio_durable as td

OLD = bytes(range(16))
NEW = bytes(range(16, 48))


def test_a_keyring_names_its_current_key_and_finds_every_key_by_id() -> None:
    ring = td.Keyring({"k2": NEW, "k1": OLD}, current="k2")
    assert ring.current_key == NEW
    assert ring.key("k1") == OLD
    assert ring.key("k3") is None
    assert td.Keyring.single(OLD).current == "k1"


def test_a_keyring_never_prints_its_keys() -> None:
    ring = td.Keyring({"k2": NEW, "k1": OLD}, current="k2")
    assert repr(ring) == "Keyring(ids=['k1', 'k2'], current='k2')"
    assert NEW.hex() not in repr(ring)
    assert str(NEW) not in repr(ring)


def test_a_keyring_is_read_from_text_with_the_first_key_current() -> None:
    text = f"k2:{base64.b64encode(NEW).decode()}, k1:{base64.b64encode(OLD).decode()}"
    ring = td.Keyring.parse(text)
    assert ring.current == "k2"
    assert dict(ring.keys) == {"k2": NEW, "k1": OLD}


@pytest.mark.parametrize(
    ("keys", "current"),
    [
        ({}, "k1"),
        ({"k1": OLD}, "k2"),
        ({"k1": b"short"}, "k1"),
        ({"k1": "not bytes"}, "k1"),
        ({"bad id!": OLD}, "bad id!"),
        ({"": OLD}, ""),
    ],
)
def test_a_bad_keyring_is_refused_with_its_own_error(keys: dict[str, bytes], current: str) -> None:
    with pytest.raises(td.KeyringError):
        td.Keyring(keys, current=current)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "k1",
        "k1:not base64!",
        f"k1:{base64.b64encode(OLD).decode()},k1:{base64.b64encode(NEW).decode()}",
    ],
)
def test_bad_keyring_text_is_refused_with_its_own_error(text: str) -> None:
    with pytest.raises(td.KeyringError):
        td.Keyring.parse(text)


def test_a_keyring_error_is_a_usage_error() -> None:
    assert issubclass(td.KeyringError, td.UsageError)

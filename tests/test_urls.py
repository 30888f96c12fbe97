"""No password of a store or broker URL reaches an error message, its
traceback or a log line, for every scheme, whatever characters the password
holds (`trio_durable._base._urls`). What needs a server (a refused login, a
connection that fails) is in ``tests/integration``."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

import trio_durable as td
from trio_durable._base._urls import mask_url, scrub, userinfo_is_ambiguous
from trio_durable._brokers import open_broker
from trio_durable._brokers._memory import open_memory_broker
from trio_durable._stores import open_store
from trio_durable._stores._memory import open_memory_store
from trio_durable._stores._sqlite import open_sqlite_store

SECRET = "s3cr"
"""Every password below holds these two pieces (around a hostile character
or not); neither may show anywhere."""
TAIL = "Et9"


def leaks(exc: BaseException, *pieces: str) -> list[str]:
    """The pieces that show in ``exc``'s message or its printed traceback
    (with every cause and context)."""
    shown = "".join(traceback.format_exception(exc)) + str(exc) + repr(exc)
    return [piece for piece in pieces if piece in shown]


def test_mask_url() -> None:
    assert mask_url("amqp://u:s3crEt9@h:5672/vh") == "amqp://u:***@h:5672/vh"
    assert mask_url("amqp://h:5672/vh") == "amqp://h:5672/vh"
    assert mask_url("postgresql://u@h/d") == "postgresql://u@h/d"
    assert mask_url("postgresql://u:p:q@h/d") == "postgresql://u:***@h/d"
    assert mask_url("postgres://h/d?user=u&password=s3cr&x=1") == (
        "postgres://h/d?user=u&password=***&x=1"
    )
    # Unencoded '#', '/', '?' and '@' in a password: the userinfo runs to the
    # last '@', wherever urllib would end the netloc.
    for char in "#/?@:":
        url = f"postgresql://u:{SECRET}{char}{TAIL}@h:5432/d"
        assert mask_url(url) == "postgresql://u:***@h:5432/d", url
    # NATS tokens: a lone user is the secret there.
    assert mask_url("nats://s3crEt9@h:4222") == "nats://s3crEt9@h:4222"
    assert mask_url("nats://s3crEt9@h:4222", user_is_secret=True) == "nats://***@h:4222"
    # Not a URL, but it may hold a password all the same.
    assert mask_url("u:s3crEt9@h") == "u:***@h"
    assert mask_url("localhost:5672") == "localhost:5672"
    # When in doubt it masks more, never less: an '@' in a query value
    # after a host:port reads as the end of a userinfo.
    assert mask_url("amqp://h:5672/?name=a@b") == "amqp://h:***@b"


def test_scrub_masks_passwords_where_urls_show_them() -> None:
    url = "postgresql://u:s3cr%23Et9@h/d?password=other"
    text = (
        "at postgresql://u:s3cr%23Et9@h/d?password=other (netloc='u:s3cr#Et9@h',"
        " conninfo \"user=u password='s3cr#Et9' host=h\") and amqp://v:w@m/"
    )
    assert scrub(text, url) == (
        "at postgresql://u:***@h/d?password=*** (netloc='u:***@h',"
        ' conninfo "user=u password=*** host=h") and amqp://v:***@m/'
    )
    assert scrub("via nats://tok@h and tok", "nats://tok@h") == "via nats://tok@h and tok"
    assert scrub("via nats://tok@h and tok", "nats://tok@h", user_is_secret=True) == (
        "via nats://***@h and tok"
    )


# A password equal to the user name, the scheme, the host, a path segment or
# a word of the message: only the URL's password component is masked.
SAME_WORDS = [
    "postgresql://postgres:postgres@127.0.0.1:1/postgres",
    "amqp://amqp:amqp@127.0.0.1:1/amqp",
    "nats://nats:nats@127.0.0.1:1",
    "a://a:a@a/a",
    "postgresql://u:127.0.0.1@127.0.0.1:1/x",
    "amqp://u:pip%20install@h/",
    "sqlite://u:store@host/store.db",
]


@pytest.mark.parametrize("url", SAME_WORDS)
def test_a_password_equal_to_another_part_masks_only_the_password(url: str) -> None:
    scheme, _, rest = url.partition("://")
    user, _, after = rest.rpartition("@")[0].partition(":")
    masked = f"{scheme}://{user.partition(':')[0]}:***@{rest.rpartition('@')[2]}"
    assert mask_url(url) == masked
    assert mask_url(url, user_is_secret=True) == masked
    message = f"the {scheme} scheme {scheme!r} at {url} needs {user!r}: {after} in {rest}"
    assert scrub(message, url) == message.replace(url, masked).replace(
        rest, masked[len(scheme) + 3 :]
    )


def test_userinfo_is_ambiguous() -> None:
    for char in "#/?":
        assert userinfo_is_ambiguous(f"amqp://u:{SECRET}{char}{TAIL}@h/")
        assert userinfo_is_ambiguous(f"nats://{SECRET}{char}{TAIL}@h", user_is_secret=True)
    assert not userinfo_is_ambiguous("amqp://u:p@h/vh?name=a@b")
    assert not userinfo_is_ambiguous("amqp://u:p%23x@h/")
    assert not userinfo_is_ambiguous("amqp://h/vh")
    assert not userinfo_is_ambiguous("memory://x?y=a@b")


Opener = Callable[[str], AbstractAsyncContextManager[Any]]


def _amqp(url: str) -> AbstractAsyncContextManager[Any]:
    from trio_durable_rabbitmq import open_amqp_broker

    return open_amqp_broker(url)


def _nats(url: str) -> AbstractAsyncContextManager[Any]:
    from trio_durable_nats import open_nats_broker

    return open_nats_broker(url)


def _postgres(url: str) -> AbstractAsyncContextManager[Any]:
    from trio_durable._stores._postgres import open_postgres_store

    return open_postgres_store(url)


def _engine_store(url: str) -> AbstractAsyncContextManager[Any]:
    return td.open_engine(td.App("urls"), store=url)


def _engine_broker(url: str) -> AbstractAsyncContextManager[Any]:
    return td.open_engine(td.App("urls"), broker=url)


def _worker(url: str) -> AbstractAsyncContextManager[Any]:
    app = td.App("urls")

    @app.step(group="g")
    async def step() -> None:
        pass

    return td.open_worker(app, broker=url, groups=["g"])


def _hostile(template: str) -> list[str]:
    """``template`` with ``{pw}`` filled by passwords with and without the
    characters that end a netloc early."""
    return [template.format(pw=f"{SECRET}{char}{TAIL}") for char in ("", "#", "/", "?")]


BAD_URLS: list[tuple[str, Opener, str]] = [
    # (what, opener, URL): each URL is refused with InvalidURLError.
    *(("memory broker", open_memory_broker, u) for u in _hostile("memory://u:{pw}@x")),
    *(("memory broker", open_broker, u) for u in _hostile("memory://u:{pw}@x")),
    *(("memory broker", _engine_broker, u) for u in _hostile("memory://u:{pw}@x")),
    *(("memory broker", _worker, u) for u in _hostile("memory://u:{pw}@x")),
    *(("memory store", open_memory_store, u) for u in _hostile("memory://u:{pw}@x")),
    *(("memory store", open_store, u) for u in _hostile("memory://u:{pw}@x")),
    *(("memory store", _engine_store, u) for u in _hostile("memory://u:{pw}@x")),
    *(("sqlite", open_sqlite_store, u) for u in _hostile("sqlite://u:{pw}@host/x.db")),
    *(("sqlite", open_store, u) for u in _hostile("sqlite://u:{pw}@host/x.db")),
    *(("postgresql", _postgres, u) for u in _hostile("postgresql://u:{pw}@h:1/d#frag")),
    *(("postgresql", _postgres, u) for u in _hostile("postgresql://u:{pw}@h:1/d?pool_size=0")),
    ("postgresql", _postgres, f"postgresql://u:4321/{SECRET}@h:1/d"),
    ("postgresql", _postgres, f"postgresql://u:{SECRET}%zz{TAIL}@127.0.0.1:1/d"),
    *(("amqp", _amqp, u) for u in _hostile("amqp://u:{pw}@h/?durable=1")),
    *(("amqp", _amqp, u) for u in _hostile("amqp://u:{pw}@h/?prefetch=0")),
    ("amqp", _amqp, f"amqp://u:4321/{SECRET}@h/"),
    ("amqp", open_broker, f"amqps://u:{SECRET}{TAIL}@/"),
    *(("nats", _nats, u) for u in _hostile("nats://u:{pw}@h?bogus=1")),
    *(("nats", _nats, u) for u in _hostile("nats://{pw}@h/path")),
    ("nats", _nats, f"nats://u:4321/{SECRET}@h"),
    *(("nats", open_broker, u) for u in _hostile("nats+tls://u:{pw}@h?bogus=1")),
    ("nats", _nats, f"nats://h?monitor=http://u:{SECRET}{TAIL}@m:8222/x&monitor=off"),
    ("nats", _nats, f"nats://h?monitor=ftp://u:{SECRET}{TAIL}@m"),
    ("unknown scheme", open_broker, f"carrier://u:{SECRET}{TAIL}@coop"),
    ("unknown scheme", open_store, f"carrier://u:{SECRET}{TAIL}@coop"),
    ("not a URL", open_broker, f"u:{SECRET}{TAIL}@host"),
    ("not a URL", open_store, f"u:{SECRET}{TAIL}@host"),
]


@pytest.mark.parametrize(
    ("what", "opener", "url"), BAD_URLS, ids=[f"{w}:{u}" for w, _, u in BAD_URLS]
)
async def test_a_refused_url_never_shows_its_password(
    what: str, opener: Opener, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    if what in ("amqp", "nats", "postgresql"):
        # The adapters are distributions of their own (brokers/).
        pytest.importorskip(
            {"amqp": "trio_durable_rabbitmq", "nats": "trio_durable_nats", "postgresql": "psycopg"}[
                what
            ]
        )
    caplog.set_level(logging.DEBUG)
    with pytest.raises(td.InvalidURLError) as caught:
        async with opener(url):
            pytest.fail(f"opened {url!r}")  # pragma: no cover
    assert leaks(caught.value, SECRET, TAIL, "4321") == []
    assert "***" in str(caught.value) or "u:" not in url
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert SECRET not in logged
    assert TAIL not in logged

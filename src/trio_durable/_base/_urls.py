"""Store and broker URLs in messages and log lines, without their secrets.

One rule, `scrub`: a text (an error message, a log line, a client
library's message about a URL) keeps every character except the secret
parts of URLs: the password of a userinfo (``user:***@host``), the value of
a secret query option (``?password=***``) and, for NATS, a token given as
the userinfo (``nats://***@host``). `mask_url` is that rule applied to a
URL alone. The password is masked where it stands in a URL, never as a
bare substring: ``postgresql://postgres:postgres@db/x`` masks to
``postgresql://postgres:***@db/x``, and a message that names the scheme
``postgresql`` or the extra ``postgres`` keeps those words.

URLs are masked by their text, not by what `urllib.parse.urlsplit` makes of
them: a password with an unencoded ``#``, ``/`` or ``?`` ends the netloc
early, so the parsed netloc holds only the first part of the password and
the rest lands in the path, query or fragment. The userinfo is taken to run
to the *last* ``@`` instead. When that guess is wrong (an ``@`` in a query
value after a ``host:port``), more is masked than needed, never less.

Such a URL is also refused where it is parsed (`userinfo_is_ambiguous`):
read as urllib reads it, part of the secret would become a host, a port or
a path, and the client library would quote it later ("cannot connect to
port 1234") outside any URL, out of reach of the masking. So is a userinfo
with a ``%`` that starts no percent-escape, which a client library quotes
alone when it cannot decode it.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import unquote, urlsplit

MASK: Final = "***"

_SECRET_KEYS: Final = "password|passwd|pass|token|auth_token|secret|sslpassword"
"""Query options (and libpq ``key=value`` settings) that carry a secret:
libpq's ``password``, and the usual names of tokens."""

_SECRET_OPTION: Final = re.compile(
    rf"(?i)(?P<key>(?:^|(?<=[?&;\s'\"(]))(?:{_SECRET_KEYS})=)"
    r"(?P<value>'(?:[^'\\]|\\.)*'|[^&;#\s'\")]*)"
)
"""A secret option in a URL's query (``?password=...``) or a libpq
connection string (``password='...'``), wherever it stands in a text."""

_BEFORE_AUTHORITY: Final = r"(?<![^\s/'\"(\[<=,;])"
"""Where a userinfo may begin in a text: at its start, after ``//``, or
after a space, quote, bracket, ``=``, ``,`` or ``;`` (a netloc that a
client library shows without its scheme: ``netloc='u:p@host'``)."""

_ANY_PASSWORD: Final = re.compile(
    r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s/?#@:'\"]*:)(?P<password>[^\s/?#@'\"]*)@"
)
"""The password of any URL in a text, when it holds no character that ends
a netloc (a URL other than the one the text is about: a monitor URL inside
a NATS URL's query)."""

_PERCENT_ESCAPE: Final = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _split(url: str) -> tuple[str, str | None, str]:
    """``(scheme://, userinfo or None, rest after the userinfo's @)``; a
    text without ``://`` (not a URL, but maybe ``user:password@host``) is
    all authority."""
    scheme, sep, rest = url.partition("://")
    prefix = scheme + sep if sep else ""
    if not sep:
        rest = url
    userinfo, at, after = rest.rpartition("@")
    if not at:
        return prefix, None, rest
    return prefix, userinfo, after


def _forms(text: str) -> list[str]:
    """``text`` as written and percent-decoded (a client library may show
    either)."""
    return list(dict.fromkeys((text, unquote(text))))


def _userinfo_patterns(url: str, user_is_secret: bool) -> list[tuple[re.Pattern[str], str]]:
    """``(pattern, replacement)`` for each way ``url``'s userinfo may be
    written in a text: ``user:password@`` becomes ``user:***@``, and with
    ``user_is_secret`` a lone ``token@`` becomes ``***@``."""
    _, userinfo, _ = _split(url)
    if userinfo is None:
        return []
    user, colon, password = userinfo.partition(":")
    found: list[tuple[re.Pattern[str], str]] = []
    if colon:
        for shown_user in _forms(user):
            for secret in _forms(password):
                pattern = re.compile(_BEFORE_AUTHORITY + re.escape(f"{shown_user}:{secret}@"))
                found.append((pattern, f"{shown_user}:{MASK}@"))
    elif user_is_secret and user:
        for secret in _forms(user):
            found.append((re.compile(_BEFORE_AUTHORITY + re.escape(f"{secret}@")), f"{MASK}@"))
    # The longest first: a decoded password may be a prefix of the written one.
    return sorted(found, key=lambda item: -len(item[0].pattern))


def _option_patterns(url: str) -> list[re.Pattern[str]]:
    """A pattern for each secret option of ``url`` as it may be written in
    a text (``key=value``, the value as written or decoded), which catches a
    value that holds characters the general `_SECRET_OPTION` stops at."""
    _, _, rest = _split(url)
    found: list[re.Pattern[str]] = []
    for match in _SECRET_OPTION.finditer(rest):
        for value in _forms(match["value"]):
            if value:
                key = re.escape(match["key"].lstrip("?&;"))
                found.append(re.compile(rf"(?i)(?<![\w]){key}{re.escape(value)}(?![^&;#\s'\")])"))
    return found


def scrub(text: str, url: str, *, user_is_secret: bool = False) -> str:
    """``text`` (say, a client library's error message about ``url``) with
    the secret parts of URLs replaced by ``***``: ``url``'s password
    wherever ``url``'s userinfo stands in it (``user:***@``, as written or
    percent-decoded), the password of any other URL in it, and the value
    of every secret option (``password=***``). The password alone, outside
    a URL, is not touched: it may well be a word the message needs (a
    password ``postgres`` and the extra ``postgres``).

    Args:
      text: Any text.
      url: The store or broker URL the text is about (its userinfo may hold
        characters that a general pattern would stop at).
      user_is_secret: Mask a userinfo without a password as a whole
        (NATS takes ``nats://<token>@host`` as a token).
    """
    for pattern, replacement in _userinfo_patterns(url, user_is_secret):
        text = pattern.sub(replacement, text)
    text = _ANY_PASSWORD.sub(lambda m: m["head"] + MASK + "@", text)
    for option in _option_patterns(url):
        text = option.sub(lambda m: m[0].partition("=")[0] + "=" + MASK, text)
    return _SECRET_OPTION.sub(lambda m: m["key"] + MASK, text)


def mask_url(url: str, *, user_is_secret: bool = False) -> str:
    """``url`` with every secret replaced by ``***``: the password in its
    userinfo (``user:***@host``) and those given as query options
    (``?password=***``); `scrub` of the URL itself.

    Args:
      url: A store or broker URL, well-formed or not.
      user_is_secret: Mask a userinfo without a password as a whole
        (NATS takes ``nats://<token>@host`` as a token).
    """
    return scrub(url, url, user_is_secret=user_is_secret)


def userinfo_is_ambiguous(url: str, *, user_is_secret: bool = False) -> bool:
    """Whether ``url`` seems to hold a secret that a client library would
    quote outside the URL, where no masking can find it: its text has a
    userinfo with a password (or a token, with ``user_is_secret``) before
    an ``@``, and either `urllib.parse.urlsplit` finds no userinfo, having
    ended the netloc inside the secret at an unencoded ``/``, ``?`` or
    ``#`` (the secret would be read as a host, a port, a path or a query:
    "cannot connect to port ..."), or the userinfo holds a ``%`` that
    starts no percent-escape (libpq quotes such a token alone). Refuse it
    instead (with `AMBIGUOUS_HINT`). A URL whose netloc has a well-encoded
    userinfo is read as urllib reads it.
    """
    _, userinfo, _ = _split(url)
    if userinfo is None or not (":" in userinfo or (user_is_secret and userinfo)):
        return False
    if _PERCENT_ESCAPE.search(userinfo):
        return True
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        return True
    return "@" not in netloc


AMBIGUOUS_HINT: Final = (
    "percent-encode '/', '?', '#', '@' and '%' in a user name or password"
    " (as %2F, %3F, %23, %40, %25), and '@' in a query value"
)
"""What to tell the author of a URL that `userinfo_is_ambiguous` refused."""

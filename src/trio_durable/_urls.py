"""Store and broker URLs in messages and log lines, without their secrets.

Every error and log line that shows a URL shows it through `mask_url`, and
every text that may echo part of a URL (a client library's error message)
goes through `scrub` first: a password never reaches a message, a log line
or a traceback, whatever characters it holds.

URLs are masked by their text, not by what `urllib.parse.urlsplit` makes of
them: a password with an unencoded ``#``, ``/`` or ``?`` ends the netloc
early, so the parsed netloc holds only the first part of the password and
the rest lands in the path, query or fragment. The userinfo is taken to run
to the *last* ``@`` instead. When that guess is wrong (an ``@`` in a query
value after a ``host:port``), more is masked than needed, never less.

Such a URL is also refused where it is parsed (`userinfo_is_ambiguous`):
read as urllib reads it, part of the secret would become a host, a port or
a path, and the client library would quote it later ("cannot connect to
port 1234"), out of reach of any masking.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import unquote, urlsplit

MASK: Final = "***"

# Query options that carry a secret (libpq's ``password``, and the usual
# names of tokens); their values are masked wherever they appear.
_SECRET_OPTION: Final = re.compile(
    r"(?i)(?P<key>(?:^|[?&;])(?:password|passwd|pass|token|auth_token|secret|sslpassword)=)"
    r"(?P<value>[^&;#]*)"
)


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


def mask_url(url: str, *, user_is_secret: bool = False) -> str:
    """``url`` with every password replaced by ``***``: the one in its
    userinfo (``user:***@host``) and those given as query options
    (``?password=***``).

    Args:
      url: A store or broker URL, well-formed or not.
      user_is_secret: Mask a userinfo without a password as a whole
        (NATS takes ``nats://<token>@host`` as a token).
    """
    prefix, userinfo, rest = _split(url)
    if userinfo is not None:
        user, colon, _ = userinfo.partition(":")
        if colon:
            prefix += f"{user}:{MASK}@"
        elif user_is_secret and userinfo:
            prefix += f"{MASK}@"
        else:
            prefix += f"{userinfo}@"
    return prefix + _SECRET_OPTION.sub(lambda m: m["key"] + MASK, rest)


def url_secrets(url: str, *, user_is_secret: bool = False) -> list[str]:
    """The secrets ``url`` holds, as written and percent-decoded, longest
    first (what `scrub` removes from a text); ``user_is_secret`` as in
    `mask_url`."""
    found: list[str] = []
    _, userinfo, rest = _split(url)
    if userinfo is not None:
        user, colon, password = userinfo.partition(":")
        if colon:
            found.append(password)
        elif user_is_secret:
            found.append(user)
    found.extend(m["value"] for m in _SECRET_OPTION.finditer(rest))
    texts = {text for secret in found for text in (secret, unquote(secret)) if text}
    return sorted(texts, key=lambda text: (-len(text), text))


def scrub(text: str, url: str, *, user_is_secret: bool = False) -> str:
    """``text`` (say, a client library's error message about ``url``) with
    every secret of ``url`` replaced by ``***``; ``user_is_secret`` as in
    `mask_url`."""
    for secret in url_secrets(url, user_is_secret=user_is_secret):
        text = text.replace(secret, MASK)
    return text


def userinfo_is_ambiguous(url: str, *, user_is_secret: bool = False) -> bool:
    """Whether ``url`` seems to hold a secret with an unencoded ``/``, ``?``
    or ``#``: its text has a userinfo with a password (or a token, with
    ``user_is_secret``) before an ``@``, but `urllib.parse.urlsplit` finds
    no userinfo, having ended the netloc inside the secret. Such a URL
    would be read with part of the secret as a host, a port, a path or a
    query, which later messages ("cannot connect to port ...") would show:
    refuse it instead (with `AMBIGUOUS_HINT`). A URL whose netloc has a
    userinfo is read as urllib reads it.
    """
    _, userinfo, _ = _split(url)
    if userinfo is None or not (":" in userinfo or (user_is_secret and userinfo)):
        return False
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        return True
    return "@" not in netloc


AMBIGUOUS_HINT: Final = (
    "percent-encode '/', '?', '#' and '@' in a user name or password (as %2F, %3F, %23, %40),"
    " and '@' in a query value"
)
"""What to tell the author of a URL that `userinfo_is_ambiguous` refused."""

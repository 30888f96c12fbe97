"""The console: a JSON API and web pages over runs (docs/console.md).

`console_app` builds the ASGI application over an `Engine` or a `Client`,
to serve or to mount in your own server; `serve_console` serves it with
hypercorn in your nursery.
"""

from ._console import ConsoleSource, console_app, serve_console

__all__ = ["ConsoleSource", "console_app", "serve_console"]

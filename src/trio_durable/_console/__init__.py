"""The console: a JSON API and web pages over runs, fans, the fleet and
the flow-control queues, served on Trio by hypercorn (docs/console.md).

`console_app` builds the ASGI application over an `Engine` or a `Client`;
`serve_console` serves it in the caller's nursery. Starlette, Jinja2 and
hypercorn are imported only here, so `import trio_durable` never loads them.
"""

from ._app import ConsoleSource
from ._make import console_app
from ._serve import serve_console

__all__ = ["ConsoleSource", "console_app", "serve_console"]

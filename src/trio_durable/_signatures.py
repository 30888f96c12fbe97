"""The signatures a registration accepts: the inputs of steps and
workflows are passed positionally, a workflow's after its `Context`."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

from ._exceptions import RegistrationError


def check_parameters(target: str, fn: Callable[..., Any], *, context: bool) -> None:
    """Refuse what no call could fill: inputs are passed positionally, after
    the context for a workflow."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as exc:
        raise RegistrationError(f"{target}: cannot read its signature ({exc})") from exc
    if context:
        first = params[0] if params else None
        if first is None or first.kind not in (first.POSITIONAL_ONLY, first.POSITIONAL_OR_KEYWORD):
            raise RegistrationError(
                f"{target} must take the context first:"
                f" async def {fn.__name__}(ctx: td.Context, ...)"
            )
        if first.annotation is not first.empty and not _is_context(fn, first):
            raise RegistrationError(
                f"{target} must take the context first, but its first parameter"
                f" {first.name!r} is annotated {_annotation_text(first.annotation)},"
                " not td.Context"
            )
    for param in params:
        if param.kind == param.KEYWORD_ONLY and param.default is param.empty:
            raise RegistrationError(
                f"{target} has the required keyword-only parameter {param.name!r}:"
                " inputs are passed positionally"
            )


def _annotation_text(annotation: object) -> str:
    if isinstance(annotation, str):
        return annotation
    return getattr(annotation, "__qualname__", None) or repr(annotation)


def _is_context(fn: Callable[..., Any], param: inspect.Parameter) -> bool:
    """Whether ``param`` is annotated `Context` (or `typing.Any`, which
    claims nothing, or something that cannot be resolved at run time).

    `Context` is recognised by where it is defined: ``_context`` imports this
    module, so this one cannot import it back.
    """
    hint = param.annotation
    if isinstance(hint, str):
        try:
            hint = typing.get_type_hints(fn)[param.name]
        except Exception:
            # An annotation names something only a type checker sees (an
            # import under TYPE_CHECKING, perhaps of Context by another
            # name): what cannot be resolved cannot be judged.
            return True
    return hint is Any or (
        getattr(hint, "__module__", None) == "trio_durable._context"
        and getattr(hint, "__qualname__", None) == "Context"
    )

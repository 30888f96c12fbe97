"""Worker descriptors as JSON, for adapters that keep them on a server.

A broker adapter stores or sends each `WorkerDescriptor` it is given by
`Broker.announce` and gives it back, every field as announced, from
`Broker.worker_descriptors`. These two functions are the one JSON form of a
descriptor, so every adapter writes the same thing and reads it back through
the same converter as the rest of trio-durable.
"""

from __future__ import annotations

from typing import Any

from .._base._serde import converter
from ._base import WorkerDescriptor


def descriptor_to_json(descriptor: WorkerDescriptor) -> dict[str, Any]:
    """``descriptor`` as a dict that `json.dumps` writes as it is (tuples
    become arrays), for an adapter to embed in what it stores or sends."""
    plain: dict[str, Any] = converter.unstructure(descriptor)
    return plain


def descriptor_from_json(data: object) -> WorkerDescriptor:
    """The descriptor that `descriptor_to_json` made ``data`` from (after a
    trip through JSON). Fields it does not know are ignored, so a newer
    worker's announcement still reads.

    Raises:
      ValueError: ``data`` is no descriptor: not an object, a required field
        missing, or a field of the wrong type. An adapter skips (and logs)
        such an announcement rather than failing the read.
    """
    try:
        descriptor: WorkerDescriptor = converter.structure(data, WorkerDescriptor)
    except Exception as exc:
        raise ValueError(f"not a worker descriptor: {exc!r}") from exc
    return descriptor

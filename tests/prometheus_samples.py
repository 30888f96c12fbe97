"""Reading metrics the way Prometheus does: the text format parsed by
prometheus-client's own parser (shared by every test tree)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def families(text: str) -> dict[str, str]:
    """Each family's name (a counter's without ``_total``) and type."""
    return {family.name: family.type for family in text_string_to_metric_families(text)}


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample called ``name``: its sorted labels to its value."""
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample called ``name`` with exactly ``labels``, or
    None if there is none."""
    return samples(text, name).get(tuple(sorted(labels.items())))

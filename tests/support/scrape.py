"""Reading /metrics: one scrape as ``{(sample name, sorted labels): value}``."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Prometheus text exposition as samples, each with the labels Prometheus keeps: an empty label
    (repository="" outside a repository) is no label."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted((k, v) for k, v in sample.labels.items() if v)))] = sample.value
    return samples


def keyed(text: str) -> dict[str, float]:
    """Prometheus text exposition as ``{'name{label="value",...}': value}``, labels sorted, empty ones left out."""
    return {name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else ""): number
            for (name, labels), number in parse(text).items()}


def fetch(url: str, timeout: float = 5.0) -> str:
    """The body of one GET, as text."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def scrape(url: str, timeout: float = 5.0) -> Samples:
    """One /metrics scrape as samples."""
    return parse(fetch(url, timeout))


def value(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value (0 when absent)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def stalled(samples: Samples, **labels: str) -> float:
    """The copilot_session_stalled_seconds sample with these labels, whatever its trace_id (0 when absent)."""
    for (sample, found), number in samples.items():
        others = {k: v for k, v in found if k != "trace_id"}
        if sample == "copilot_session_stalled_seconds" and others == labels:
            return number
    return 0.0


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    """{value of ``label``: sample value} of every sample named ``name`` that has that label."""
    out = {}
    for (sample, labels), number in samples.items():
        found = dict(labels)
        if sample == name and label in found:
            out[found[label]] = number
    return out

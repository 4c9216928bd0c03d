"""Parse Prometheus text exposition into {(sample name, labels): value} for assertions."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Labels = frozenset[tuple[str, str]]


def parse_samples(text: str) -> dict[tuple[str, Labels], float]:
    samples: dict[tuple[str, Labels], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def family_types(text: str) -> dict[str, str]:
    """Family name as written on the '# TYPE' line -> type."""
    types = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
    return types


def sample_names(text: str) -> set[str]:
    """Every series name a query may use: the samples present, plus the series a typed family
    exports (a histogram with no observation yet still names its _bucket/_sum/_count)."""
    names: set[str] = set()
    for name, kind in family_types(text).items():
        names.add(name)
        if kind == "histogram":
            names.update(f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
    for family in text_string_to_metric_families(text):
        names.update(sample.name for sample in family.samples)
    return names


def value(samples: dict[tuple[str, Labels], float], name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    if key not in samples:
        near = sorted(str(dict(k[1])) for k in samples if k[0] == name)
        raise AssertionError(f"no sample {name}{labels}; have {near}")
    return samples[key]

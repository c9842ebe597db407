"""YAML of a bounded size: no aliases, a limited depth and number of nodes.

A 300-byte document of nested aliases (the "billion laughs") stands for billions of values once
anything walks it, and deep nesting exhausts the parser's recursion. The files copilot-otel reads
(--budgets-file, --web-config-file, a session's workspace.yaml) need neither, so their event stream
is checked first (in C, with libyaml when PyYAML has it) and only a document within the bounds is
built.
"""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 32  # nesting of mappings and sequences
MAX_NODES = 50_000  # scalars, mappings and sequences


def load(data: bytes | str) -> Any:
    """The one YAML document in ``data`` (safe types only), or yaml.YAMLError: not YAML, or an alias (``*name``),
    nesting deeper than MAX_DEPTH or more than MAX_NODES nodes (a MarkedYAMLError: ``problem`` says which,
    ``problem_mark`` where)."""
    import yaml  # here: its import is paid only by a command that reads YAML

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    depth = nodes = 0
    for event in yaml.parse(data, Loader=loader):
        kind = type(event)
        if kind is yaml.AliasEvent:
            _refuse(event, "an alias (*name): aliases are not allowed here")
        if kind is yaml.ScalarEvent or kind is yaml.SequenceStartEvent or kind is yaml.MappingStartEvent:
            nodes += 1
            if nodes > MAX_NODES:
                _refuse(event, f"more than {MAX_NODES} values")
        if kind is yaml.SequenceStartEvent or kind is yaml.MappingStartEvent:
            depth += 1
            if depth > MAX_DEPTH:
                _refuse(event, f"nested deeper than {MAX_DEPTH} levels")
        elif kind is yaml.SequenceEndEvent or kind is yaml.MappingEndEvent:
            depth -= 1
    return yaml.load(data, Loader=loader)  # noqa: S506 - a safe loader


def _refuse(event: Any, problem: str) -> None:
    import yaml

    exc = yaml.MarkedYAMLError(problem=problem, problem_mark=event.start_mark)
    exc.beyond_bounds = True  # not a syntax error: a document this reader will not build
    raise exc


def describe(exc: Exception) -> str:
    """What is wrong with a YAML document, where: 'at line 3 (an alias ...)'."""
    mark = getattr(exc, "problem_mark", None)
    at = f" at line {mark.line + 1}" if mark is not None else ""
    return f"{at} ({getattr(exc, 'problem', None) or 'syntax error'})"


def load_config(text: str, where: str) -> Any:
    """The YAML document of a config file; a ConfigError that starts with ``where`` if it is not valid YAML or
    not within the bounds (see load)."""
    import yaml

    from .parsing import ConfigError

    try:
        return load(text)
    except (yaml.YAMLError, RecursionError, KeyError) as exc:  # KeyError: what PyYAML raises for "!!bool "
        raise ConfigError(f"{where}: not valid YAML{describe(exc)}") from None

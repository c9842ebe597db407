"""The bounded YAML reader and the regular-file reader every config file goes through."""

from __future__ import annotations

import os

import pytest
import yaml

from copilot_otel.base import boundedyaml
from copilot_otel.base.regular_files import NotRegular, TooLarge, read_regular


def test_plain_documents_read_as_the_safe_loader_reads_them():
    """What a config file holds (mappings, lists, scalars, anchors without aliases) loads as yaml.safe_load."""
    text = "budgets:\n  - &x {name: a, ai_credits: 5}\n  - name: b\n    ai_credits: 2.5\n"
    assert boundedyaml.load(text) == yaml.safe_load(text)


@pytest.mark.parametrize("text, problem", [
    ("a: &a [1, 2]\nb: *a\n", "alias"),
    ("a: &a {x: 1}\nb:\n  <<: *a\n", "alias"),
    ("x: " + "[" * 40 + "]" * 40 + "\n", f"nested deeper than {boundedyaml.MAX_DEPTH}"),
    ("[" + "1, " * (boundedyaml.MAX_NODES + 1) + "]\n", f"more than {boundedyaml.MAX_NODES}"),
])
def test_aliases_depth_and_size_are_refused_with_where(text, problem):
    """A document beyond the bounds is a YAMLError that says what and where, built never."""
    with pytest.raises(yaml.YAMLError) as caught:
        boundedyaml.load(text)
    assert problem in boundedyaml.describe(caught.value) and "at line" in boundedyaml.describe(caught.value)


def test_read_regular_refuses_a_fifo_a_device_and_a_file_past_its_cap(tmp_path):
    """A FIFO without a writer and /dev/zero are refused at once; a file larger than the cap is not read."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero", tmp_path):
        with pytest.raises(NotRegular):
            read_regular(path, 1024)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 1025)
    with pytest.raises(TooLarge):
        read_regular(big, 1024)
    assert read_regular(big, 1025) == b"x" * 1025

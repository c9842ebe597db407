"""source/trust.py through the one listing every command reads session-state with (sources.list_sessions): only the
user's sessions, each real file once, none through a link out of the tree; each refusal said once."""

from __future__ import annotations

import logging
import os

import pytest

from copilot_otel.source import trust
from copilot_otel.source.sources import EVENTS_FILE, list_sessions

NOBODY = 65534


def _session(root, name: str, data: bytes = b'{"type":"session.start"}\n'):
    folder = root / name
    folder.mkdir(parents=True)
    (folder / EVENTS_FILE).write_bytes(data)
    return folder / EVENTS_FILE


def test_aliases_and_links_out_of_the_tree_are_left_out(tmp_path, caplog):
    """A symlinked alias and a hard link of a listed log are the same session, listed once under the real folder
    (the symlink never, the first hard link by name); a folder and a log linked in from outside are refused,
    each said once however often the folder is listed."""
    root = tmp_path / "session-state"
    real = _session(root, "b-real")
    (root / "current").symlink_to("b-real", target_is_directory=True)
    (root / "c-hard").mkdir()
    os.link(real, root / "c-hard" / EVENTS_FILE)
    outside = _session(tmp_path / "outside", "theirs")
    (root / "d-out").symlink_to(outside.parent, target_is_directory=True)
    (root / "e-out-file").mkdir()
    (root / "e-out-file" / EVENTS_FILE).symlink_to(outside)
    mine = _session(root, "a-mine", b'{"type":"other"}\n')
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert list_sessions(root) == [mine, real]
    said = [r.getMessage() for r in caplog.records if "leads outside" in r.getMessage()]
    refused = ("d-out", "e-out-file")
    assert sorted(said) == sorted(trust.leads_outside(root / name / EVENTS_FILE, root) for name in refused)


@pytest.mark.skipif(os.geteuid() != 0, reason="gives files to another uid: needs root")
@pytest.mark.parametrize("given", ["folder", "log"])
def test_a_folder_or_a_log_of_another_user_is_refused_once_naming_its_owner(tmp_path, caplog, given):
    """A session whose folder, or whose log alone, belongs to nobody is left out, said once with the path and
    the owner; a root-owned session is the user's (root may write anywhere: it is trusted, as ssh trusts it)."""
    root = tmp_path / "session-state"
    ours = _session(root, "ours")
    theirs = _session(root, "theirs")
    os.chown(theirs.parent if given == "folder" else theirs, NOBODY, NOBODY)
    with caplog.at_level(logging.WARNING):
        assert list_sessions(root) == [ours]
        assert list_sessions(root) == [ours]
    [said] = [r.getMessage() for r in caplog.records if str(theirs) in r.getMessage()]
    owned = theirs.parent if given == "folder" else theirs
    assert said == f"not reading {theirs} as your session: {owned} belongs to user nobody, not to you"


def test_an_open_session_state_is_said_and_a_private_one_is_not(tmp_path):
    """session-state writable by others (sticky or not) is said, with the mode and what follows; 0700 is not."""
    root = tmp_path / "session-state"
    root.mkdir(mode=0o700)
    assert trust.open_to_others(root) is None
    root.chmod(0o1777)
    said = trust.open_to_others(root)
    assert said is not None and "may be written by other users (mode 1777" in said and "plant sessions" in said

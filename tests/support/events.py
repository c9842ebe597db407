"""Session events for tests."""

from __future__ import annotations

import json
from typing import Any


def event_line(event_type: Any, timestamp: Any, event_id: Any, data: Any = None, **top: Any) -> bytes:
    """One event as a JSON line, any field of any type (for lines planted into a real log)."""
    return json.dumps({"type": event_type, "data": {} if data is None else data, "id": event_id,
                       "timestamp": timestamp, "parentId": None, **top}).encode()

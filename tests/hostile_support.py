"""What the suites that attack a real server share: the RSS margin they allow above the
budget, and the one-line JSON error every refusal must be (tests/serve/test_hostile_server.py,
tests/query/test_query_hostile.py, tests/profile_tab/test_profile_tab_hostile.py)."""

from __future__ import annotations

import gzip
import json

# Peak RSS may exceed its idle level by the budget plus what nobody counts: Python's own
# objects around a request, allocator slack, TensorBoard. Wide on purpose: before the fix
# these files took the server to 4.9 GB and past 8 GB.
MARGIN_MB = 160


def error_of(status: int, body: bytes) -> str:
    doc = json.loads(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)
    assert set(doc) == {"error"} and "\n" not in doc["error"] and "Traceback" not in doc["error"], doc
    return doc["error"]

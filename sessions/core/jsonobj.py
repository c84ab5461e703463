"""`JsonObject`: a JSON object whose keys are someone else's, so this code cannot name them.

Used only at the genuine JSON boundaries: an agent's raw ACP message or update (its schema is the agent's, extended
by every adapter), the free-form `content` of a stored event (the agent's keys after ours), a hook's JSON in and out,
a JSON schema an agent sends. Everything the daemon builds itself with known keys is a TypedDict or a model instead
(sessions/core/live.py, sessions/store/rows.py, sessions/live/transcript.py, …): an alias is no typing, so it is not
for those.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Free-form JSON (see above): the values are whatever the JSON holds.
JsonObject = dict[str, Any]
# An event's content on its way to the store, only read there: the agent's mapped update (a TypedDict,
# sessions/acp/mapping.py `MappedContent`) or a row the daemon writes; free-form once stored.
EventContent = Mapping[str, Any]

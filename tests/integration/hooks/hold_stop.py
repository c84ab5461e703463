"""A session.pre_stop command hook that holds the stop: it says it runs (`stop-held` in the workspace), then waits
for the test to write `release-stop` there (at most 30 s), and patches nothing."""

import json
import sys
import time
from pathlib import Path

payload = json.load(sys.stdin)
root = Path(str(payload.get("workspace") or "."))
(root / "stop-held").write_text("held\n")
deadline = time.monotonic() + 30
while not (root / "release-stop").exists() and time.monotonic() < deadline:
    time.sleep(0.05)

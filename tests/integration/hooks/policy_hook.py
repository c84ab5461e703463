# ruff: noqa: T201 - a command hook answers on its stdout
"""A real command hook for the tests: reads the payload on stdin, prints one JSON patch on stdout."""

import json
import sys

payload = json.load(sys.stdin)
message = str(payload.get("message", ""))
if payload.get("event") == "input.pre_submit":
    if "forbidden" in message:
        print(json.dumps({"deny": True, "deny_reason": "forbidden word in prompt"}))
    elif message.startswith("shout "):
        print(json.dumps({"message": message.upper()}))
elif payload.get("event") == "tool.pre_call" and "secret" in str(payload.get("tool_id", "")):
    print(json.dumps({"deny": True, "deny_reason": "secret files are off limits"}))
elif payload.get("event") == "session.pre_create" and str(payload.get("session_name", "")).startswith("blocked"):
    print(json.dumps({"deny": True, "deny_reason": "blocked names are not allowed"}))
elif payload.get("event") == "session.pre_create" and payload.get("session_name") == "rename me":
    print(json.dumps({"session_name": "renamed by policy"}))
elif payload.get("event") == "agent.pre_start" and payload.get("provider") == "demo":
    # Looks inside the workspace, resolves outside it: the daemon must resolve before it checks.
    print(json.dumps({"cwd": str(payload.get("cwd")) + "/../.."}))
elif payload.get("event") == "agent.pre_start":
    print(json.dumps({"deny": True, "deny_reason": "this agent may not start"}))

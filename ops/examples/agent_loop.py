#!/usr/bin/env python3
"""A minimal agent loop on memd: record every turn, build a bundle before
every model call.

    MEMD_URL=http://127.0.0.1:7070 MEMD_TOKEN=memd_... ops/examples/agent_loop.py

Type a line, get a reply; Ctrl-D ends. Standard library only.

`call_model` is where your LLM goes: it receives the bundle's rendered
prompt (identity, rules, tasks, decisions, cited evidence, recent turns)
and the user's line. As shipped it answers with what the bundle holds, so
the loop runs without any model or API key.
"""

import json
import os
import sys
import urllib.error
import urllib.request

URL = os.environ.get("MEMD_URL", "http://127.0.0.1:7070").rstrip("/")
TOKEN = os.environ.get("MEMD_TOKEN") or sys.exit("set MEMD_TOKEN (memd tenant create NAME prints one)")
SESSION = os.environ.get("MEMD_SESSION", "example-session")
AGENT = os.environ.get("MEMD_AGENT", "example-agent")


def memd(path, body):
    request = urllib.request.Request(
        URL + path,
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)
    except urllib.error.HTTPError as err:
        # memd's errors name the field at fault: {"error": {"code", "message", "field"}}
        sys.exit(f"memd {path}: {err.code} {err.read().decode()}")


def record(actor_type, actor_id, text):
    return memd("/api/v1/events", {
        "session_id": SESSION, "channel": "private",
        "actor": {"type": actor_type, "id": actor_id},
        "kind": "message", "content": {"text": text},
    })


def call_model(prompt, user_line):
    """Replace with your LLM call: system prompt = `prompt`, user message = `user_line`."""
    evidence = [line for line in prompt.splitlines() if line.startswith("[E")]
    return (f"(no model wired in) my context is {len(prompt)} characters; "
            f"{len(evidence)} retrieved item(s), first: {evidence[0] if evidence else 'none'}")


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        record("human", "user", line)
        bundle = memd("/api/v1/acb/build", {
            "session_id": SESSION, "agent_id": AGENT, "channel": "private",
            "intent": "question", "query_text": line, "max_tokens": 8000, "render": True,
        })
        reply = call_model(bundle["prompt"], line)
        record("agent", AGENT, reply)
        print(f"{reply}\n  [bundle {bundle['token_used_est']}/{bundle['budget_tokens']} tokens, "
              f"{bundle['provenance']['path']} path, {bundle['provenance']['elapsed_ms']:.1f} ms]")
        sys.stdout.flush()


if __name__ == "__main__":
    main()

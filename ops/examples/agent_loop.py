#!/usr/bin/env python3
"""A minimal agent loop on memd: record every turn, build a bundle before
every model call.

    pip install ./clients/python
    MEMD_URL=http://127.0.0.1:7070 MEMD_TOKEN=memd_... ops/examples/agent_loop.py

Type a line, get a reply; Ctrl-D ends.

`call_model` is where your LLM goes: it receives the chat messages for the
next call (the bundle's rendered prompt as the system message: identity,
rules, tasks, decisions, cited evidence, recent turns; then the user's
line). As shipped it answers with what the bundle holds, so the loop runs
without any model or API key.
"""

import os
import sys
from typing import Dict, List

from memd import Client, MemdError, bundle_to_messages, message

URL = os.environ.get("MEMD_URL", "http://127.0.0.1:7070")
TOKEN = os.environ.get("MEMD_TOKEN") or sys.exit("set MEMD_TOKEN (memd tenant create NAME prints one)")
SESSION = os.environ.get("MEMD_SESSION", "example-session")
AGENT = os.environ.get("MEMD_AGENT", "example-agent")


def call_model(messages: List[Dict[str, str]]) -> str:
    """Replace with your LLM call, e.g.
    `openai.OpenAI().chat.completions.create(model=..., messages=messages)`."""
    prompt = messages[0]["content"]
    evidence = [line for line in prompt.splitlines() if line.startswith("[E")]
    return (f"(no model wired in) my context is {len(prompt)} characters; "
            f"{len(evidence)} retrieved item(s), first: {evidence[0] if evidence else 'none'}")


def main() -> None:
    with Client(URL, TOKEN) as memd:
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            try:
                memd.record(message(SESSION, line))
                bundle = memd.build_acb(line, session_id=SESSION, agent_id=AGENT,
                                        intent="question", max_tokens=8000)
                reply = call_model(bundle_to_messages(bundle, line))
                memd.record(message(SESSION, reply, actor_type="agent", actor_id=AGENT,
                                    agent_id=AGENT))
            except MemdError as err:
                # memd's errors name the field at fault (err.field) and its code.
                sys.exit(str(err))
            print(f"{reply}\n  [bundle {bundle['token_used_est']}/{bundle['budget_tokens']} tokens, "
                  f"{bundle['provenance']['path']} path, {bundle['provenance']['elapsed_ms']:.1f} ms]")
            sys.stdout.flush()


if __name__ == "__main__":
    main()

"""A bundle as chat messages for an OpenAI-style chat API."""

from __future__ import annotations

from typing import Dict, List, Optional

from ._types import Acb

ChatMessage = Dict[str, str]


def bundle_to_messages(
    bundle: Acb,
    user_message: Optional[str] = None,
    *,
    instructions: Optional[str] = None,
) -> List[ChatMessage]:
    """`[{"role": "system", ...}, {"role": "user", ...}]` for
    `client.chat.completions.create(messages=...)` and its many clones.

    The system message is the bundle's rendered prompt (identity, rules,
    tasks, decisions, cited evidence, the recent window), after your own
    `instructions` when given; the user's message follows. Build the bundle
    with `render=True` (the clients' default).
    """
    prompt = bundle.get("prompt")
    if prompt is None:
        raise ValueError("the bundle has no prompt: build it with render=True")
    system = f"{instructions}\n\n{prompt}" if instructions else prompt
    messages: List[ChatMessage] = [{"role": "system", "content": system}]
    if user_message is not None:
        messages.append({"role": "user", "content": user_message})
    return messages

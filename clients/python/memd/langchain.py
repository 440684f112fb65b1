"""memd as a LangChain chat message history.

`MemdChatMessageHistory` implements langchain-core's
`BaseChatMessageHistory`, the interface LangChain's
`RunnableWithMessageHistory` (and most LangChain chat apps) keep
conversations in: each message it is given is recorded as a memd event in
the session, and `messages` reads the session back from memd's log. The
conversation is then part of the tenant's memory, retrieved into bundles,
auditable and rebuildable like everything else memd holds.

Needs `pip install memd-client[langchain]`.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from ._client import Client, message
from ._types import ActorType, Channel, EventRequest, StoredEvent

# Log pages read per request (memd's maximum).
_PAGE = 1000


class MemdChatMessageHistory(BaseChatMessageHistory):
    """The messages of one memd session. Human messages are recorded with
    actor `human:<user_id>`, the model's with `agent:<agent_id>`, system
    messages with `system:<agent_id>`."""

    def __init__(
        self,
        client: Client,
        session_id: str,
        *,
        agent_id: str = "assistant",
        user_id: str = "user",
        channel: Channel = "private",
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.agent_id = agent_id
        self.user_id = user_id
        self.channel: Channel = channel

    @property
    def messages(self) -> List[BaseMessage]:  # type: ignore[override]
        """The session's messages, oldest first, read from memd's log;
        those a retraction withdrew are left out."""
        found: List[BaseMessage] = []
        after: Optional[int] = None
        while True:
            page = self.client.events(
                session_id=self.session_id, kind="message", after_seq=after, limit=_PAGE
            )
            found.extend(
                _as_message(event) for event in page["events"] if not event.get("retracted_by")
            )
            after = page["next_after_seq"]
            if after is None:
                return found

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Records the messages as one batch (one transaction)."""
        events: List[EventRequest] = [self._event(m) for m in messages]
        if events:
            self.client.record_batch(events)

    def _event(self, chat: BaseMessage) -> EventRequest:
        text = chat.content if isinstance(chat.content, str) else str(chat.content)
        actor: Tuple[ActorType, str]
        if isinstance(chat, HumanMessage):
            actor = ("human", self.user_id)
        elif isinstance(chat, SystemMessage):
            actor = ("system", self.agent_id)
        else:
            actor = ("agent", self.agent_id)
        return message(
            self.session_id, text, actor_type=actor[0], actor_id=actor[1], channel=self.channel
        )

    def clear(self) -> None:
        """memd's log is append-only: a conversation is never deleted from
        it (retention and erasure are the tenant's policy, not a client's).
        Start a new `session_id` instead."""
        raise NotImplementedError(
            "memd's log is append-only; use a new session_id for a fresh conversation"
        )


def _as_message(event: StoredEvent) -> BaseMessage:
    content = event["content"]
    text = content.get("text", "") if isinstance(content, dict) else str(content)
    if event["actor_type"] == "human":
        return HumanMessage(content=text)
    if event["actor_type"] == "system":
        return SystemMessage(content=text)
    return AIMessage(content=text)

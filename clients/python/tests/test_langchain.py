"""The LangChain adapter: a conversation kept through LangChain's chat
history interface is memd memory, read back from the log and retrieved
into bundles."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from memd import Client
from memd.langchain import MemdChatMessageHistory

from .conftest import Daemon


def test_a_langchain_history_is_recorded_in_memd_and_read_back(
    daemon: Daemon, session_id: str
) -> None:
    with Client(daemon.url, daemon.token) as client:
        history = MemdChatMessageHistory(client, session_id, agent_id="helper")
        history.add_messages(
            [SystemMessage(content="You help with deployments."),
             HumanMessage(content="Which region do we deploy to?")]
        )
        history.add_ai_message("We deploy to eu-west-3, the Paris region.")
        assert [type(m) for m in history.messages] == [SystemMessage, HumanMessage, AIMessage]
        assert history.messages[2].content == "We deploy to eu-west-3, the Paris region."

        stored = client.events(session_id=session_id)["events"]
        assert [(e["actor_type"], e["actor_id"]) for e in stored] == [
            ("system", "helper"), ("human", "user"), ("agent", "helper")]

        # The conversation is memory like any other: another session's
        # bundle retrieves it.
        bundle = client.build_acb(
            "what region do we deploy to?", session_id="elsewhere", consistency="strong"
        )
        texts = [item["text"] for s in bundle["sections"] for item in s["items"]]
        assert any("eu-west-3" in text for text in texts), texts

        # A second history over the same session sees the same messages.
        again = MemdChatMessageHistory(client, session_id)
        assert [m.content for m in again.messages] == [m.content for m in history.messages]

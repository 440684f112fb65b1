"""The clients against a real daemon: the quick start, retries, errors,
and every route an agent uses."""

from __future__ import annotations

import asyncio
from typing import Callable, List

import httpx
import pytest

import memd
from memd import (
    AsyncClient,
    Client,
    InvalidRequest,
    NotFound,
    Retries,
    bundle_to_messages,
    message,
)

from memd._types import SearchOptions

from .conftest import Daemon


class Flaky(httpx.BaseTransport):
    """A real transport that loses chosen answers: for each request,
    `lose(request)` says whether to forward it and then raise as if the
    connection had dropped before the answer arrived."""

    def __init__(self, lose: Callable[[httpx.Request], bool]) -> None:
        self.inner = httpx.HTTPTransport()
        self.lose = lose
        self.seen: List[int] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        response.read()
        self.seen.append(response.status_code)
        if self.lose(request):
            raise httpx.ReadError("connection dropped before the answer", request=request)
        return response


def events_in(client: Client, session_id: str) -> List[memd.StoredEvent]:
    return client.events(session_id=session_id, limit=1000)["events"]


def test_the_quick_start_gives_a_bundle(daemon: Daemon, session_id: str) -> None:
    with Client(daemon.url, daemon.token) as client:
        appended = client.record(message(session_id, "We ship the exporter on Friday."))
        assert appended["seq"] >= 1
        bundle = client.build_acb(
            "when do we ship the exporter?", session_id=session_id, consistency="strong"
        )
    texts = [
        item["text"]
        for section in bundle["sections"]
        for item in section["items"]
    ]
    assert any("ship the exporter on Friday" in text for text in texts), texts
    assert bundle["token_used_est"] <= bundle["budget_tokens"]
    chat = bundle_to_messages(bundle, "when do we ship?", instructions="Be brief.")
    assert chat[0]["role"] == "system"
    assert chat[0]["content"].startswith("Be brief.\n\n")
    assert "ship the exporter on Friday" in chat[0]["content"]
    assert chat[1] == {"role": "user", "content": "when do we ship?"}


def test_an_append_whose_answer_was_lost_is_resent_and_stored_once(
    daemon: Daemon, session_id: str
) -> None:
    first = [True]

    def lose_first_append(request: httpx.Request) -> bool:
        if request.url.path == "/api/v1/events" and request.method == "POST" and first[0]:
            first[0] = False
            return True
        return False

    flaky = Flaky(lose_first_append)
    with Client(daemon.url, daemon.token, transport=flaky, retries=Retries(backoff=0.01)) as client:
        appended = client.record(message(session_id, "said once, sent twice"))
        assert flaky.seen == [201, 200], "stored, then answered from the idempotency key"
        assert appended.get("replayed") is True
        stored = events_in(client, session_id)
    assert [e["event_id"] for e in stored] == [appended["event_id"]]
    assert (stored[0]["idempotency_key"] or "").startswith("py-")


def test_a_key_reused_for_another_request_raises_idempotency_conflict(
    daemon: Daemon, session_id: str
) -> None:
    with Client(daemon.url, daemon.token) as client:
        first = message(session_id, "said once")
        first["idempotency_key"] = f"{session_id}-k1"
        appended = client.record(first)
        assert client.record(first)["event_id"] == appended["event_id"]
        other = message(session_id, "said otherwise")
        other["idempotency_key"] = f"{session_id}-k1"
        with pytest.raises(memd.IdempotencyConflict) as conflict:
            client.record(other)
        assert conflict.value.status == 409
        assert conflict.value.field == "idempotency_key"
        with pytest.raises(memd.IdempotencyConflict) as in_batch:
            client.record_batch([message(session_id, "fine"), other])
        assert in_batch.value.field == "events[1].idempotency_key"
        assert [e["event_id"] for e in events_in(client, session_id)] == [appended["event_id"]]


def test_a_batch_resent_after_a_lost_answer_stores_each_event_once(
    daemon: Daemon, session_id: str
) -> None:
    lost = [0]

    def lose_first(request: httpx.Request) -> bool:
        lost[0] += 1
        return request.method == "POST" and lost[0] == 1

    with Client(
        daemon.url, daemon.token, transport=Flaky(lose_first), retries=Retries(backoff=0.01)
    ) as client:
        batch = [message(session_id, f"turn {n}") for n in range(5)]
        appended = client.record_batch(batch)
        assert len(appended) == 5
        assert len(events_in(client, session_id)) == 5


def test_a_handoff_is_not_resent_when_its_answer_is_lost(
    daemon: Daemon, session_id: str
) -> None:
    def lose_handoffs(request: httpx.Request) -> bool:
        return request.url.path == "/api/v1/handoffs"

    flaky = Flaky(lose_handoffs)
    with Client(daemon.url, daemon.token, transport=flaky, retries=Retries(backoff=0.01)) as client:
        with pytest.raises(memd.Unavailable) as lost:
            client.handoff(
                {"from_agent": "planner", "to_agent": "coder", "session_id": session_id,
                 "task": "write the exporter"}
            )
        assert lost.value.status == 0
        assert flaky.seen == [201], "sent once: a handoff has no idempotency key"
        assert len(client.events(session_id=session_id, kind="handoff")["events"]) == 1


def test_a_429_is_retried_after_retry_after_and_stores_one_event(
    strict_daemon: Daemon, session_id: str
) -> None:
    counting = Flaky(lambda _: False)
    with Client(strict_daemon.url, strict_daemon.token, transport=counting) as client:
        for n in range(4):
            client.record(message(session_id, f"burst {n}"))
        assert 429 in counting.seen, f"the daemon never refused: {counting.seen}"
        texts = [e["content"]["text"] for e in events_in(client, session_id)]
    assert texts == [f"burst {n}" for n in range(4)]


def test_a_429_past_the_retries_is_raised_with_retry_after(
    strict_daemon: Daemon, session_id: str
) -> None:
    with Client(strict_daemon.url, strict_daemon.token, retries=Retries(attempts=1)) as client:
        with pytest.raises(memd.RateLimited) as refused:
            for n in range(6):
                client.record(message(session_id, f"flood {n}"))
    assert refused.value.status == 429
    assert refused.value.code == "rate_limited"
    assert refused.value.retry_after is not None and refused.value.retry_after >= 1


def test_errors_carry_memds_code_and_field(daemon: Daemon, session_id: str) -> None:
    with Client(daemon.url, daemon.token) as client:
        bad = message(session_id, "x")
        bad["channel"] = "radio"  # type: ignore[typeddict-item]
        with pytest.raises(memd.InvalidRequest) as invalid:
            client.record(bad)
        assert invalid.value.code == "invalid_field"
        assert invalid.value.field == "channel"
        with pytest.raises(memd.NotFound):
            client.get_artifact("art_does_not_exist")
        with pytest.raises(memd.InvalidRequest) as filters:
            client.build_acb("x", filters={"tags_any": [""]})
        assert filters.value.field == "filters.tags_any"
    with Client(daemon.url, "memd_not_a_token") as client, pytest.raises(memd.AuthError) as auth:
        client.build_acb("anything")
    assert auth.value.status == 401


def test_artifacts_decisions_handoffs_and_the_log(daemon: Daemon, session_id: str) -> None:
    output = "\n".join(f"line {n}: " + "x" * 200 for n in range(600))
    with Client(daemon.url, daemon.token) as client:
        result = client.record(
            {"session_id": session_id, "channel": "private",
             "actor": {"type": "tool", "id": "fs"}, "kind": "tool_result",
             "content": {"tool": "fs.read_file", "path": "big.log", "output": output}}
        )
        artifact_id = result.get("artifact_id")
        assert artifact_id, result
        artifact = client.get_artifact(artifact_id)
        assert artifact["text"] == output
        assert artifact["event_id"] == result["event_id"]
        assert len(artifact["sha256"]) == 64

        said = client.record(message(session_id, "The exporter writes CSV."))
        client.record(
            {"session_id": session_id, "channel": "private",
             "actor": {"type": "agent", "id": "planner"}, "kind": "decision",
             "content": {"decision": "Exports are CSV", "key": f"{session_id}.format",
                         "scope": "project"},
             "refs": [said["event_id"]]}
        )
        client.build_acb("wait", consistency="strong", intent="continue")
        found = client.search("what format do exports use?", k=5, consistency="strong")
        texts = [r["text"] for r in found["results"]]
        assert "Exports are CSV" in texts, texts
        assert all(0.0 <= r["relevance"] <= 1.0 for r in found["results"])
        with pytest.raises(InvalidRequest) as refused:
            client.search("exports", k=0)
        assert refused.value.field == "k"
        decisions = client.decisions(key=f"{session_id}.format")
        assert [d["decision"] for d in decisions] == ["Exports are CSV"]
        assert decisions[0]["status"] == "active"

        packet = client.handoff(
            {"from_agent": "planner", "to_agent": "coder", "task": "write the CSV exporter",
             "refs": [said["event_id"]]}
        )
        received = client.build_acb(
            session_id=packet["session_id"], agent_id="coder", consistency="strong"
        )
        names = [section["name"] for section in received["sections"]]
        assert "handoff_packet" in names, names

        page = client.events(session_id=session_id, limit=2)
        assert len(page["events"]) == 2 and page["next_after_seq"] is not None
        rest = client.events(session_id=session_id, after_seq=page["next_after_seq"])
        assert rest["events"][0]["seq"] > page["events"][1]["seq"]
        one = client.event(said["event_id"])
        assert one["content"] == {"text": "The exporter writes CSV."}
        assert len(one["hash"]) == 64


def test_a_memory_is_corrected_then_retracted(daemon: Daemon, session_id: str) -> None:
    with Client(daemon.url, daemon.token) as client:
        wrong = client.record(message(session_id, "The staging port is 8080."))
        fixed = client.correct(
            wrong["event_id"],
            {"text": "The staging port is 9090."},
            "misread the config",
            actor={"type": "human", "id": "alice"},
        )
        assert fixed["event"]["seq"] == fixed["retraction"]["seq"] + 1
        assert client.event(wrong["event_id"])["retracted_by"] == fixed["retraction"]["event_id"]
        client.build_acb("wait", consistency="strong", intent="continue")
        only: SearchOptions = {"consistency": "strong", "filters": {"sessions": [session_id]}}
        found = client.search("staging port", **only)
        assert [r["text"] for r in found["results"]] == ["The staging port is 9090."]
        assert "retracted" in [o["reason"] for o in found["omissions"]]

        client.retract(
            [fixed["event"]["event_id"]],
            "the service moved",
            session_id=session_id,
            actor={"type": "human", "id": "alice"},
        )
        client.build_acb("wait", consistency="strong", intent="continue")
        assert client.search("staging port", **only)["results"] == []
        with pytest.raises(NotFound):
            client.correct(
                "evt_01J00000000000000000000000",
                {"text": "x"},
                "r",
                actor={"type": "human", "id": "alice"},
            )


def test_a_memory_block_is_set_and_read_back(daemon: Daemon, session_id: str) -> None:
    with Client(daemon.url, daemon.token) as client:
        client.record(
            {"session_id": session_id, "channel": "team",
             "actor": {"type": "agent", "id": "helper"}, "kind": "view_update",
             "content": {"view": f"notes-{session_id}", "text": "Exports are CSV."}}
        )
        client.build_acb("wait", consistency="strong", intent="continue")
        views = {v["view"]: v for v in client.views()}
        assert views[f"notes-{session_id}"]["text"] == "Exports are CSV."


def test_sessions_and_agents_are_listed(daemon: Daemon, session_id: str) -> None:
    with Client(daemon.url, daemon.token) as client:
        client.record(message(session_id, "hello", agent_id="lister"))
        client.build_acb("wait", consistency="strong", intent="continue")
        page = client.sessions(agent_id="lister")
        assert [s["session_id"] for s in page["sessions"]] == [session_id]
        assert page["sessions"][0]["agents"] == ["lister"]
        agents = client.agents()["agents"]
        lister = [a for a in agents if a["agent_id"] == "lister"]
        assert lister and lister[0]["events"] == 1, agents


def test_the_async_client_makes_the_same_calls(daemon: Daemon, session_id: str) -> None:
    async def run() -> memd.Acb:
        async with AsyncClient(daemon.url, daemon.token) as client:
            await client.record_batch(
                [message(session_id, "Async agents remember too."),
                 message(session_id, "The cache lives in Redis.", actor_type="agent",
                         actor_id="helper")]
            )
            assert len((await client.events(session_id=session_id))["events"]) == 2
            return await client.build_acb(
                "where does the cache live?", session_id=session_id, consistency="strong"
            )

    bundle = asyncio.run(run())
    texts = [item["text"] for s in bundle["sections"] for item in s["items"]]
    assert any("Redis" in text for text in texts), texts

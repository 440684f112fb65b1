"""The clients: `Client` (blocking) and `AsyncClient` (asyncio), on httpx.

Each call is described once (`_Call`: method, path, body, whether a resend
is safe, how to read the answer) by the functions at the top; the two
clients only send it, retrying as `Retries` says:

- 429 and 503 are retried after the `Retry-After` memd sends (or a backoff
  when it sends none): memd did nothing, so a retry is always safe.
- A request that never reached memd (connect errors) is retried too.
- A request that may have reached memd but whose answer was lost (the
  connection dropped mid-way) is retried only where a second copy cannot
  be stored: appends carry an idempotency key, made here once per event
  unless the caller gives one, so memd answers a resend with the original
  event (`replayed: true`); reads are safe anyway. A handoff has no key and
  is not resent.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import httpx

from ._errors import MemdError, Unavailable, error_for
from ._types import (
    Acb,
    AcbOptions,
    ActorType,
    AgentPage,
    Appended,
    Artifact,
    Channel,
    Corrected,
    Decision,
    EventPage,
    EventRequest,
    HandoffCreated,
    HandoffRequest,
    SearchOptions,
    SearchResults,
    SessionPage,
    StoredEvent,
    View,
)

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover
    from typing_extensions import Unpack

DEFAULT_URL = "http://127.0.0.1:7070"
USER_AGENT = "memd-python/0.1.0"


@dataclass(frozen=True)
class Retries:
    """How often and how long to retry. `attempts` counts the first try."""

    attempts: int = 5
    backoff: float = 0.25
    max_wait: float = 30.0

    def wait(self, attempt: int, retry_after: Optional[float]) -> float:
        """Seconds before try `attempt + 1`: memd's `Retry-After` when it
        sent one, else exponential backoff with jitter."""
        if retry_after is not None:
            return min(retry_after, self.max_wait)
        return min(self.backoff * 2.0 ** (attempt - 1) * (0.5 + random.random()), self.max_wait)


@dataclass(frozen=True)
class _Call:
    method: str
    path: str
    read: Callable[[httpx.Response], Any]
    body: Any = None
    params: Mapping[str, Any] = field(default_factory=dict)
    # Whether sending it again after an answer was lost stores nothing twice.
    resend_safe: bool = True


def _json(response: httpx.Response) -> Any:
    return response.json()


def _with_key(event: EventRequest) -> EventRequest:
    """`event` with an idempotency key: the caller's, or a new one that
    every retry of this call reuses."""
    if event.get("idempotency_key"):
        return event
    keyed: EventRequest = {**event}
    keyed["idempotency_key"] = f"py-{uuid.uuid4().hex}"
    return keyed


def _record(event: EventRequest) -> _Call:
    return _Call("POST", "/api/v1/events", _json, body=_with_key(event))


def _record_batch(events: Sequence[EventRequest]) -> _Call:
    body = {"events": [_with_key(event) for event in events]}
    return _Call("POST", "/api/v1/events", lambda r: r.json()["events"], body=body)


def _retract(
    event_ids: Sequence[str], reason: str, envelope: Mapping[str, Any]
) -> _Call:
    event: EventRequest = {
        **envelope,  # type: ignore[typeddict-item]
        "kind": "retraction",
        "content": {"reason": reason},
        "refs": list(event_ids),
    }
    return _record(event)


def _correct(event_id: str, content: Mapping[str, Any], reason: str, actor: Any) -> _Call:
    # A correction carries a key too: a resend answers the original pair.
    body = {
        "content": dict(content),
        "reason": reason,
        "actor": actor,
        "idempotency_key": f"py-{uuid.uuid4().hex}",
    }
    return _Call("POST", f"/api/v1/events/{_segment(event_id)}/correct", _json, body=body)


def _build_acb(query_text: Optional[str], request: AcbOptions) -> _Call:
    body: Dict[str, Any] = {"render": True, **request}
    if query_text is not None:
        body["query_text"] = query_text
    return _Call("POST", "/api/v1/acb/build", _json, body=body)


def _search(query: str, request: SearchOptions) -> _Call:
    return _Call("POST", "/api/v1/search", _json, body={**request, "query": query})


def _artifact(artifact_id: str) -> _Call:
    def read(response: httpx.Response) -> Artifact:
        return {
            "artifact_id": artifact_id,
            "text": response.text,
            "event_id": response.headers.get("x-memd-event-id", ""),
            "sha256": response.headers.get("x-memd-sha256", ""),
            "sealed": response.headers.get("x-memd-sealed") == "true",
        }

    return _Call("GET", f"/api/v1/artifacts/{_segment(artifact_id)}", read)


def _decisions(params: Mapping[str, Any]) -> _Call:
    return _Call("GET", "/api/v1/decisions", lambda r: r.json()["decisions"], params=params)


def _handoff(request: HandoffRequest) -> _Call:
    return _Call("POST", "/api/v1/handoffs", _json, body=request, resend_safe=False)


def _events(params: Mapping[str, Any]) -> _Call:
    return _Call("GET", "/api/v1/events", _json, params=params)


def _views() -> _Call:
    return _Call("GET", "/api/v1/views", lambda r: r.json()["views"])


def _sessions(params: Mapping[str, Any]) -> _Call:
    return _Call("GET", "/api/v1/sessions", _json, params=params)


def _agents(params: Mapping[str, Any]) -> _Call:
    return _Call("GET", "/api/v1/agents", _json, params=params)


def _event(event_id: str) -> _Call:
    return _Call("GET", f"/api/v1/events/{_segment(event_id)}", _json)


def _segment(value: str) -> str:
    """An id as one path segment."""
    from urllib.parse import quote

    return quote(value, safe="")


def _present(**params: Any) -> Dict[str, Any]:
    return {name: value for name, value in params.items() if value is not None}


def _failure(response: httpx.Response) -> MemdError:
    retry_after = _retry_after(response)
    try:
        error = response.json()["error"]
        return error_for(
            response.status_code,
            str(error.get("code", "unknown")),
            str(error.get("message", response.text)),
            error.get("field"),
            retry_after,
        )
    except (ValueError, KeyError, TypeError):
        return error_for(response.status_code, "unknown", response.text[:500], None, retry_after)


def _retry_after(response: httpx.Response) -> Optional[float]:
    try:
        return float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None


def _retryable(call: _Call, outcome: "httpx.Response | httpx.TransportError") -> bool:
    if isinstance(outcome, httpx.Response):
        return outcome.status_code in (429, 503)
    never_sent = isinstance(outcome, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))
    return never_sent or call.resend_safe


def _finish(call: _Call, outcome: "httpx.Response | httpx.TransportError") -> Any:
    if isinstance(outcome, httpx.TransportError):
        raise Unavailable(0, "unreachable", f"{type(outcome).__name__}: {outcome}") from outcome
    if outcome.is_success:
        return call.read(outcome)
    raise _failure(outcome)


def _settings(
    url: str, token: str, timeout: float
) -> Tuple[str, Dict[str, str], httpx.Timeout]:
    headers = {"Authorization": f"Bearer {token}", "User-Agent": USER_AGENT}
    return url.rstrip("/"), headers, httpx.Timeout(timeout)


class Client:
    """A blocking client. `token` is a tenant's (`memd tenant create NAME`).

    `transport` is httpx's, for tests and proxies. Use it as a context
    manager, or call `close()`.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str = "",
        *,
        timeout: float = 30.0,
        retries: Retries = Retries(),
        transport: Optional[httpx.BaseTransport] = None,
    ) -> None:
        base, headers, limits = _settings(url, token, timeout)
        self.retries = retries
        self._http = httpx.Client(base_url=base, headers=headers, timeout=limits, transport=transport)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: _Call) -> Any:
        attempt = 1
        while True:
            outcome: "httpx.Response | httpx.TransportError"
            try:
                outcome = self._http.request(
                    call.method, call.path, json=call.body, params=dict(call.params) or None
                )
            except httpx.TransportError as err:
                outcome = err
            if attempt >= self.retries.attempts or not _retryable(call, outcome):
                return _finish(call, outcome)
            wait = self.retries.wait(
                attempt, _retry_after(outcome) if isinstance(outcome, httpx.Response) else None
            )
            time.sleep(wait)
            attempt += 1

    def record(self, event: EventRequest) -> Appended:
        """Appends one event; returns its `event_id` and `seq`."""
        result: Appended = self._send(_record(event))
        return result

    def record_batch(self, events: Sequence[EventRequest]) -> List[Appended]:
        """Appends up to 1,000 events in one transaction, in order."""
        result: List[Appended] = self._send(_record_batch(events))
        return result

    def retract(
        self,
        event_ids: Sequence[str],
        reason: str,
        *,
        session_id: str,
        actor: Mapping[str, str],
        channel: Channel = "private",
        agent_id: Optional[str] = None,
    ) -> Appended:
        """Withdraws `event_ids` (a `retraction` event): no bundle, search or
        view shows them from then on; the log keeps them."""
        envelope = _present(session_id=session_id, actor=dict(actor), channel=channel, agent_id=agent_id)
        result: Appended = self._send(_retract(event_ids, reason, envelope))
        return result

    def correct(
        self,
        event_id: str,
        content: Mapping[str, Any],
        reason: str,
        *,
        actor: Mapping[str, str],
    ) -> Corrected:
        """Withdraws `event_id` and records `content` in its place (same
        kind, session, channel and agent), both at once."""
        result: Corrected = self._send(_correct(event_id, content, reason, dict(actor)))
        return result

    def build_acb(self, query_text: Optional[str] = None, **request: Unpack[AcbOptions]) -> Acb:
        """The Active Context Bundle for the next model call (rendered as
        `prompt` unless `render=False`)."""
        result: Acb = self._send(_build_acb(query_text, request))
        return result

    def search(self, query: str, **request: Unpack[SearchOptions]) -> SearchResults:
        """Up to `k` (default 10) memories that best answer `query`, best
        first, with their scores; no bundle around them."""
        result: SearchResults = self._send(_search(query, request))
        return result

    def get_artifact(self, artifact_id: str) -> Artifact:
        """A truncated tool output, whole."""
        result: Artifact = self._send(_artifact(artifact_id))
        return result

    def decisions(
        self,
        *,
        status: Optional[str] = None,
        scope: Optional[str] = None,
        key: Optional[str] = None,
        channel: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> List[Decision]:
        """The decision ledger, newest first."""
        params = _present(status=status, scope=scope, key=key, channel=channel, limit=limit)
        result: List[Decision] = self._send(_decisions(params))
        return result

    def handoff(self, request: HandoffRequest) -> HandoffCreated:
        """Records a handoff packet for another agent."""
        result: HandoffCreated = self._send(_handoff(request))
        return result

    def events(
        self,
        *,
        session_id: Optional[str] = None,
        kind: Optional[str] = None,
        after_seq: Optional[int] = None,
        before_seq: Optional[int] = None,
        order: Optional[str] = None,
        text: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> EventPage:
        """One page of the log as stored; page on with `next_after_seq`."""
        params = _present(
            session_id=session_id,
            kind=kind,
            after_seq=after_seq,
            before_seq=before_seq,
            order=order,
            text=text,
            limit=limit,
        )
        result: EventPage = self._send(_events(params))
        return result

    def event(self, event_id: str) -> StoredEvent:
        """One event as stored, with its chain hashes."""
        result: StoredEvent = self._send(_event(event_id))
        return result

    def views(self) -> List[View]:
        """The views (memory blocks), by name: the caller's own version of
        each where it has one, else the shared one. Set one by recording a
        `view_update` event."""
        result: List[View] = self._send(_views())
        return result

    def sessions(
        self,
        *,
        agent_id: Optional[str] = None,
        since: Optional[str] = None,
        until: Optional[str] = None,
        before_seq: Optional[int] = None,
        limit: Optional[int] = None,
    ) -> SessionPage:
        """One page of the sessions, most recently active first; page on
        with `next_before_seq`."""
        params = _present(
            agent_id=agent_id, since=since, until=until, before_seq=before_seq, limit=limit
        )
        result: SessionPage = self._send(_sessions(params))
        return result

    def agents(self, *, after: Optional[str] = None, limit: Optional[int] = None) -> AgentPage:
        """One page of the agents, by id; page on with `next_after`."""
        result: AgentPage = self._send(_agents(_present(after=after, limit=limit)))
        return result


class AsyncClient:
    """The same calls as `Client`, for asyncio. Use `async with`, or call
    `await aclose()`."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str = "",
        *,
        timeout: float = 30.0,
        retries: Retries = Retries(),
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> None:
        base, headers, limits = _settings(url, token, timeout)
        self.retries = retries
        self._http = httpx.AsyncClient(
            base_url=base, headers=headers, timeout=limits, transport=transport
        )

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: _Call) -> Any:
        attempt = 1
        while True:
            outcome: "httpx.Response | httpx.TransportError"
            try:
                outcome = await self._http.request(
                    call.method, call.path, json=call.body, params=dict(call.params) or None
                )
            except httpx.TransportError as err:
                outcome = err
            if attempt >= self.retries.attempts or not _retryable(call, outcome):
                return _finish(call, outcome)
            wait = self.retries.wait(
                attempt, _retry_after(outcome) if isinstance(outcome, httpx.Response) else None
            )
            await asyncio.sleep(wait)
            attempt += 1

    async def record(self, event: EventRequest) -> Appended:
        result: Appended = await self._send(_record(event))
        return result

    async def record_batch(self, events: Sequence[EventRequest]) -> List[Appended]:
        result: List[Appended] = await self._send(_record_batch(events))
        return result

    async def retract(
        self,
        event_ids: Sequence[str],
        reason: str,
        *,
        session_id: str,
        actor: Mapping[str, str],
        channel: Channel = "private",
        agent_id: Optional[str] = None,
    ) -> Appended:
        envelope = _present(session_id=session_id, actor=dict(actor), channel=channel, agent_id=agent_id)
        result: Appended = await self._send(_retract(event_ids, reason, envelope))
        return result

    async def correct(
        self,
        event_id: str,
        content: Mapping[str, Any],
        reason: str,
        *,
        actor: Mapping[str, str],
    ) -> Corrected:
        result: Corrected = await self._send(_correct(event_id, content, reason, dict(actor)))
        return result

    async def build_acb(
        self, query_text: Optional[str] = None, **request: Unpack[AcbOptions]
    ) -> Acb:
        result: Acb = await self._send(_build_acb(query_text, request))
        return result

    async def search(self, query: str, **request: Unpack[SearchOptions]) -> SearchResults:
        result: SearchResults = await self._send(_search(query, request))
        return result

    async def get_artifact(self, artifact_id: str) -> Artifact:
        result: Artifact = await self._send(_artifact(artifact_id))
        return result

    async def decisions(
        self,
        *,
        status: Optional[str] = None,
        scope: Optional[str] = None,
        key: Optional[str] = None,
        channel: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> List[Decision]:
        params = _present(status=status, scope=scope, key=key, channel=channel, limit=limit)
        result: List[Decision] = await self._send(_decisions(params))
        return result

    async def handoff(self, request: HandoffRequest) -> HandoffCreated:
        result: HandoffCreated = await self._send(_handoff(request))
        return result

    async def events(
        self,
        *,
        session_id: Optional[str] = None,
        kind: Optional[str] = None,
        after_seq: Optional[int] = None,
        before_seq: Optional[int] = None,
        order: Optional[str] = None,
        text: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> EventPage:
        params = _present(
            session_id=session_id,
            kind=kind,
            after_seq=after_seq,
            before_seq=before_seq,
            order=order,
            text=text,
            limit=limit,
        )
        result: EventPage = await self._send(_events(params))
        return result

    async def event(self, event_id: str) -> StoredEvent:
        result: StoredEvent = await self._send(_event(event_id))
        return result

    async def views(self) -> List[View]:
        result: List[View] = await self._send(_views())
        return result

    async def sessions(
        self,
        *,
        agent_id: Optional[str] = None,
        since: Optional[str] = None,
        until: Optional[str] = None,
        before_seq: Optional[int] = None,
        limit: Optional[int] = None,
    ) -> SessionPage:
        params = _present(
            agent_id=agent_id, since=since, until=until, before_seq=before_seq, limit=limit
        )
        result: SessionPage = await self._send(_sessions(params))
        return result

    async def agents(
        self, *, after: Optional[str] = None, limit: Optional[int] = None
    ) -> AgentPage:
        result: AgentPage = await self._send(_agents(_present(after=after, limit=limit)))
        return result


def message(
    session_id: str,
    text: str,
    *,
    actor_type: ActorType = "human",
    actor_id: str = "user",
    channel: Channel = "private",
    agent_id: Optional[str] = None,
    tags: Optional[List[str]] = None,
) -> EventRequest:
    """A chat message as an event, the most common thing an agent records."""
    event: EventRequest = {
        "session_id": session_id,
        "channel": channel,
        "actor": {"type": actor_type, "id": actor_id},
        "kind": "message",
        "content": {"text": text},
    }
    if agent_id is not None:
        event["agent_id"] = agent_id
    if tags:
        event["tags"] = tags
    return event

"""Request and response shapes, as memd's OpenAPI document defines them.

TypedDicts, so a bundle or an event is the plain dict the JSON decodes to,
with the keys a type checker knows. `tests/test_openapi.py` checks each
against the document a live daemon serves (keys and which are required),
so they cannot drift from the server.
"""


import sys
from typing import Any, Dict, List, Literal, Optional

if sys.version_info >= (3, 11):
    from typing import NotRequired, Required, TypedDict
else:  # pragma: no cover
    from typing_extensions import NotRequired, Required, TypedDict

Channel = Literal["private", "public", "team", "agent"]
Sensitivity = Literal["none", "low", "high", "secret"]
ActorType = Literal["human", "agent", "tool", "system"]
# What an append may carry: every kind but `erasure`, which only memd records.
AppendableKind = Literal[
    "message",
    "tool_call",
    "tool_result",
    "decision",
    "task_update",
    "summary",
    "view_update",
    "handoff",
    "artifact",
    "retraction",
]
# What the log holds (nested Literals flatten, PEP 586).
Kind = Literal[AppendableKind, "erasure"]


class ActorRequest(TypedDict):
    type: ActorType
    id: str


class EventRequest(TypedDict, total=False):
    """One event as an agent records it (`POST /api/v1/events`)."""

    session_id: Required[str]
    channel: Required[Channel]
    actor: Required[ActorRequest]
    kind: Required[AppendableKind]
    content: Required[Dict[str, Any]]
    tenant_id: Optional[str]
    agent_id: Optional[str]
    subject_id: Optional[str]
    sensitivity: Sensitivity
    tags: List[str]
    refs: List[str]
    idempotency_key: Optional[str]
    ts: Optional[str]


class Appended(TypedDict):
    """Where an event landed in the log."""

    event_id: str
    seq: int
    created_at: str
    artifact_id: NotRequired[Optional[str]]
    chunk_ids: NotRequired[List[str]]
    replayed: NotRequired[bool]


class AppendedBatch(TypedDict):
    events: List[Appended]


class RetrievalFilters(TypedDict, total=False):
    """Narrows a bundle's retrieved evidence (every field optional)."""

    since: Optional[str]
    until: Optional[str]
    agents: List[str]
    sessions: List[str]
    kinds: List[Kind]
    tags_all: List[str]
    tags_any: List[str]


class AcbOptions(TypedDict, total=False):
    """Everything a bundle request may say but its question."""

    tenant_id: Optional[str]
    session_id: Optional[str]
    agent_id: Optional[str]
    channel: Channel
    intent: Optional[str]
    max_tokens: Optional[int]
    render: bool
    consistency: Literal["eventual", "strong"]
    include_history: Optional[bool]
    handoff_id: Optional[str]
    after: Optional[int]
    filters: RetrievalFilters


class AcbRequest(AcbOptions, total=False):
    """`POST /api/v1/acb/build`: every field optional."""

    query_text: Optional[str]


class Section(TypedDict):
    name: str
    items: List[Dict[str, Any]]
    token_est: int


class Omission(TypedDict):
    reason: str
    candidates: List[str]
    count: int
    section: NotRequired[Optional[str]]


class RecentReport(TypedDict):
    """How a bundle's recent window was read."""

    events: int
    read: int


class Provenance(TypedDict):
    """How a bundle was made. Nested reports are left as plain dicts."""

    intent: NotRequired[Optional[str]]
    path: Literal["fast", "retrieval"]
    query_terms: List[str]
    common_terms: List[str]
    semantic: Dict[str, Any]
    candidate_pool_size: int
    candidate_pool_max: int
    neighbours: Dict[str, int]
    retrieved: int
    filters: Dict[str, Any]
    retrieval_filters: NotRequired[RetrievalFilters]
    scoring: Dict[str, Any]
    dedupe: Dict[str, Any]
    history: bool
    handoff_id: NotRequired[Optional[str]]
    head_seq: int
    projected_seq: int
    lag_events: int
    consistency: Dict[str, Any]
    cache: str
    recent_window: RecentReport
    encoding: str
    elapsed_ms: float
    stages_ms: Dict[str, float]
    diagnostics: Dict[str, Any]
    policy_version: int
    read: Dict[str, Any]


class Acb(TypedDict):
    """An Active Context Bundle."""

    acb_id: str
    budget_tokens: int
    token_used_est: int
    sections: List[Section]
    omissions: List[Omission]
    provenance: Provenance
    prompt: NotRequired[Optional[str]]


class SearchOptions(TypedDict, total=False):
    """Everything a search may say but its question."""

    tenant_id: Optional[str]
    k: Optional[int]
    channel: Channel
    agent_id: Optional[str]
    filters: RetrievalFilters
    include_history: Optional[bool]
    after: Optional[int]
    consistency: Literal["eventual", "strong"]


class SearchRequest(SearchOptions, total=False):
    """`POST /api/v1/search`: a question, and up to `k` (1-100) results."""

    query: Required[str]


class SearchResult(TypedDict):
    """One memory a search found, with what it was ranked by."""

    chunk_id: str
    event_id: str
    kind: str
    text: str
    session_id: NotRequired[Optional[str]]
    ts: str
    score: float
    relevance: float
    lexical: float
    semantic: NotRequired[Optional[float]]
    recency: float
    importance: float
    refs: List[str]
    artifact_id: NotRequired[Optional[str]]


class SearchResults(TypedDict):
    """What a search found, best first, what it left out and why."""

    results: List[SearchResult]
    omissions: List[Omission]
    provenance: Provenance


class StoredEvent(TypedDict):
    """An event as the log holds it, with its place in the hash chain."""

    event_id: str
    seq: int
    created_at: str
    ts: str
    session_id: str
    channel: Channel
    actor_type: ActorType
    actor_id: str
    agent_id: Optional[str]
    subject_id: Optional[str]
    kind: Kind
    sensitivity: Sensitivity
    tags: List[str]
    refs: List[str]
    content: Any
    sealed: bool
    erased: bool
    idempotency_key: Optional[str]
    artifact_id: Optional[str]
    retracted_by: Optional[str]
    hash: str
    prev_hash: str


class EventPage(TypedDict):
    events: List[StoredEvent]
    next_after_seq: Optional[int]
    next_before_seq: Optional[int]


class Decision(TypedDict):
    """A decision in the ledger."""

    decision_id: str
    seq: int
    ts: str
    status: Literal["active", "superseded", "rejected", "retracted"]
    scope: str
    decision: str
    rationale: List[str]
    constraints: List[str]
    alternatives: List[str]
    consequences: List[str]
    refs: List[str]
    session_id: str
    channel: Channel
    sensitivity: Sensitivity
    actor_id: str
    tags: List[str]
    key: NotRequired[Optional[str]]
    value: NotRequired[Any]
    confidence: NotRequired[Optional[float]]
    supersedes: NotRequired[Optional[str]]
    superseded_by: NotRequired[Optional[str]]
    rejected_reason: NotRequired[Optional[str]]
    retracted_by: NotRequired[Optional[str]]


class DecisionList(TypedDict):
    decisions: List[Decision]


class View(TypedDict):
    """A view (a memory block: identity, rules, notes, ...) as its newest
    `view_update` left it (`GET /api/v1/views`)."""

    view: str
    text: str
    event_id: str
    ts: str
    actor_id: str
    channel: Channel
    sensitivity: Sensitivity
    owner: NotRequired[Optional[str]]


class ViewList(TypedDict):
    views: List[View]


class Session(TypedDict):
    """A session as the caller may see it (`GET /api/v1/sessions`)."""

    session_id: str
    first_seq: int
    last_seq: int
    first_ts: str
    last_ts: str
    events: int
    agents: List[str]
    kinds: List[str]


class SessionPage(TypedDict):
    sessions: List[Session]
    next_before_seq: Optional[int]


class Agent(TypedDict):
    """An agent's activity and tokens (`GET /api/v1/agents`)."""

    agent_id: str
    first_seq: Optional[int]
    last_seq: Optional[int]
    first_ts: Optional[str]
    last_ts: Optional[str]
    events: int
    tokens_issued: int
    tokens_active: int


class AgentPage(TypedDict):
    agents: List[Agent]
    next_after: Optional[str]


class CorrectionRequest(TypedDict, total=False):
    """`POST /api/v1/events/{id}/correct`: the corrected content and why."""

    content: Required[Dict[str, Any]]
    reason: Required[str]
    actor: Required[ActorRequest]
    idempotency_key: Optional[str]
    ts: Optional[str]


class Corrected(TypedDict):
    """What a correction appended: the retraction and the new event."""

    retraction: Appended
    event: Appended


class HandoffRequest(TypedDict, total=False):
    """`POST /api/v1/handoffs`: a packet for another agent."""

    from_agent: Required[str]
    to_agent: Required[str]
    tenant_id: Optional[str]
    session_id: Optional[str]
    task: Optional[str]
    task_id: Optional[str]
    channel: Channel
    sensitivity: Sensitivity
    decision_ids: Optional[List[str]]
    refs: List[str]
    constraints: List[str]
    open_questions: List[str]
    required_files: List[str]


class HandoffCreated(TypedDict):
    handoff_id: str
    event_id: str
    seq: int
    created_at: str
    session_id: str
    packet: Dict[str, Any]


class Artifact(TypedDict):
    """A tool output, whole (`GET /api/v1/artifacts/{id}`)."""

    artifact_id: str
    text: str
    event_id: str
    sha256: str
    sealed: bool


# Which OpenAPI schema each shape stands for (checked by the tests).
SCHEMAS: Dict[str, Any] = {
    "ActorRequest": ActorRequest,
    "EventRequest": EventRequest,
    "Appended": Appended,
    "AppendedBatch": AppendedBatch,
    "RetrievalFilters": RetrievalFilters,
    "AcbRequest": AcbRequest,
    "Section": Section,
    "Omission": Omission,
    "RecentReport": RecentReport,
    "Provenance": Provenance,
    "Acb": Acb,
    "SearchRequest": SearchRequest,
    "SearchResult": SearchResult,
    "SearchResults": SearchResults,
    "StoredEvent": StoredEvent,
    "EventPage": EventPage,
    "Decision": Decision,
    "DecisionList": DecisionList,
    "HandoffRequest": HandoffRequest,
    "HandoffCreated": HandoffCreated,
    "CorrectionRequest": CorrectionRequest,
    "Corrected": Corrected,
    "View": View,
    "ViewList": ViewList,
    "Session": Session,
    "SessionPage": SessionPage,
    "Agent": Agent,
    "AgentPage": AgentPage,
}

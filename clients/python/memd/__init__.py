"""memd: persistent, curated memory for AI agents.

    from memd import Client, message
    memd = Client("http://127.0.0.1:7070", token)
    memd.record(message("s1", "we ship on Friday"))
    bundle = memd.build_acb("when do we ship?", session_id="s1")
    print(bundle["prompt"])
"""

from ._client import AsyncClient, Client, Retries, message
from ._errors import (
    AuthError,
    IdempotencyConflict,
    InvalidRequest,
    MemdError,
    NotFound,
    RateLimited,
    Unavailable,
)
from ._types import (
    Acb,
    AcbRequest,
    Agent,
    AgentPage,
    Appended,
    Artifact,
    Corrected,
    CorrectionRequest,
    Decision,
    EventPage,
    EventRequest,
    HandoffCreated,
    HandoffRequest,
    RetrievalFilters,
    SearchRequest,
    SearchResult,
    SearchResults,
    Session,
    SessionPage,
    StoredEvent,
    View,
)
from .chat import bundle_to_messages

__all__ = [
    "Acb",
    "AcbRequest",
    "Agent",
    "AgentPage",
    "Appended",
    "Artifact",
    "AsyncClient",
    "AuthError",
    "Client",
    "Corrected",
    "CorrectionRequest",
    "Decision",
    "EventPage",
    "EventRequest",
    "HandoffCreated",
    "HandoffRequest",
    "IdempotencyConflict",
    "InvalidRequest",
    "MemdError",
    "NotFound",
    "RateLimited",
    "Retries",
    "RetrievalFilters",
    "SearchRequest",
    "SearchResult",
    "SearchResults",
    "Session",
    "SessionPage",
    "StoredEvent",
    "View",
    "Unavailable",
    "bundle_to_messages",
    "message",
]

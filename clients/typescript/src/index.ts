// @memd/client: the TypeScript client for memd. See README.md.

export {
  DEFAULT_RETRIES,
  DEFAULT_URL,
  MemdClient,
  message,
  type Acb,
  type AcbRequest,
  type ActorRequest,
  type AgentPage,
  type Appended,
  type Artifact,
  type Channel,
  type ClientOptions,
  type Corrected,
  type CorrectionRequest,
  type Decision,
  type EventPage,
  type EventRequest,
  type HandoffCreated,
  type HandoffRequest,
  type Retries,
  type SearchRequest,
  type SearchResults,
  type SessionPage,
  type StoredEvent,
  type View,
} from "./client.js";
export {
  AuthError,
  IdempotencyConflict,
  InvalidRequest,
  MemdError,
  NotFound,
  RateLimited,
  Unavailable,
} from "./errors.js";
export type { components, paths } from "./openapi.js";

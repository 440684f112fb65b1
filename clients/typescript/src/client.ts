// The client: `MemdClient`, on the platform's `fetch`.
//
// Each call is described once (`Call`: method, path, body, whether a
// resend is safe, how to read the answer) and sent with retries, as the
// Python client does:
// - 429 and 503 are retried after the `Retry-After` memd sends (or a
//   backoff when it sends none): memd did nothing, so a retry is safe.
// - A request that never reached memd (connection refused) is retried.
// - A request that may have reached memd but whose answer was lost is
//   retried only where a second copy cannot be stored: appends and
//   corrections carry an idempotency key, made here once per call unless
//   the caller gives one, so memd answers a resend with the original
//   (`replayed: true`); reads are safe anyway. A handoff has no key and is
//   not resent.

import { randomUUID } from "node:crypto";

import { MemdError, Unavailable, errorFor } from "./errors.js";
import type { components } from "./openapi.js";

type Schemas = components["schemas"];
export type EventRequest = Schemas["EventRequest"];
export type Appended = Schemas["Appended"];
export type AcbRequest = Schemas["AcbRequest"];
export type Acb = Schemas["Acb"];
export type SearchRequest = Schemas["SearchRequest"];
export type SearchResults = Schemas["SearchResults"];
export type StoredEvent = Schemas["StoredEvent"];
export type EventPage = Schemas["EventPage"];
export type Decision = Schemas["Decision"];
export type HandoffRequest = Schemas["HandoffRequest"];
export type HandoffCreated = Schemas["HandoffCreated"];
export type CorrectionRequest = Schemas["CorrectionRequest"];
export type Corrected = Schemas["Corrected"];
export type SessionPage = Schemas["SessionPage"];
export type AgentPage = Schemas["AgentPage"];
export type View = Schemas["View"];
export type ActorRequest = Schemas["ActorRequest"];
export type Channel = Schemas["Channel"];

/** A truncated tool output, whole. */
export interface Artifact {
  artifactId: string;
  text: string;
  eventId: string;
  sha256: string;
  sealed: boolean;
}

export const DEFAULT_URL = "http://127.0.0.1:7070";
const USER_AGENT = "memd-typescript/0.1.0";

/** How often and how long to retry. `attempts` counts the first try. */
export interface Retries {
  attempts: number;
  /** Seconds before the second try; doubles each time, with jitter. */
  backoff: number;
  /** Seconds waited at most between tries. */
  maxWait: number;
}

export const DEFAULT_RETRIES: Retries = { attempts: 5, backoff: 0.25, maxWait: 30 };

export interface ClientOptions {
  url?: string;
  /** A tenant's token (`memd tenant create NAME`). */
  token: string;
  retries?: Partial<Retries>;
  /** Milliseconds a request may take. Default 30,000. */
  timeoutMs?: number;
  /** For tests and proxies: the `fetch` to send with. */
  fetch?: typeof fetch;
}

interface Call<T> {
  method: "GET" | "POST";
  path: string;
  body?: unknown;
  params?: Record<string, string | number | undefined>;
  read: (response: Response) => Promise<T>;
  /** Whether sending it again after an answer was lost stores nothing twice. */
  resendSafe: boolean;
}

const json = <T>(response: Response): Promise<T> => response.json() as Promise<T>;

function call<T>(method: "GET" | "POST", path: string, extra: Partial<Call<T>> = {}): Call<T> {
  return { method, path, read: json<T>, resendSafe: true, ...extra };
}

/** An id as one path segment. */
const segment = (id: string) => encodeURIComponent(id);

/** `event` with an idempotency key: the caller's, or a new one every retry reuses. */
function withKey(event: EventRequest): EventRequest {
  return event.idempotency_key ? event : { ...event, idempotency_key: `ts-${randomUUID()}` };
}

/** A chat message as an event, the most common thing an agent records. */
export function message(
  sessionId: string,
  text: string,
  options: {
    actor?: ActorRequest;
    channel?: Channel;
    agentId?: string;
    tags?: string[];
  } = {},
): EventRequest {
  const event: EventRequest = {
    session_id: sessionId,
    channel: options.channel ?? "private",
    actor: options.actor ?? { type: "human", id: "user" },
    kind: "message",
    content: { text },
  };
  if (options.agentId) event.agent_id = options.agentId;
  if (options.tags) event.tags = options.tags;
  return event;
}

export class MemdClient {
  readonly url: string;
  readonly retries: Retries;
  readonly #headers: Record<string, string>;
  readonly #timeoutMs: number;
  readonly #fetch: typeof fetch;

  constructor(options: ClientOptions) {
    this.url = (options.url ?? DEFAULT_URL).replace(/\/+$/, "");
    this.retries = { ...DEFAULT_RETRIES, ...options.retries };
    this.#headers = { authorization: `Bearer ${options.token}`, "user-agent": USER_AGENT };
    this.#timeoutMs = options.timeoutMs ?? 30_000;
    this.#fetch = options.fetch ?? fetch;
  }

  /** Appends one event; its `event_id` and `seq`. */
  record(event: EventRequest): Promise<Appended> {
    return this.#send(call("POST", "/api/v1/events", { body: withKey(event) }));
  }

  /** Appends up to 1,000 events in one transaction, in order. */
  async recordBatch(events: EventRequest[]): Promise<Appended[]> {
    const body = { events: events.map(withKey) };
    const answer = await this.#send(call<{ events: Appended[] }>("POST", "/api/v1/events", { body }));
    return answer.events;
  }

  /** The Active Context Bundle for the next model call (rendered as `prompt` unless `render: false`). */
  buildAcb(queryText?: string, request: Partial<AcbRequest> = {}): Promise<Acb> {
    const body: Record<string, unknown> = { render: true, ...request };
    if (queryText !== undefined) body.query_text = queryText;
    return this.#send(call("POST", "/api/v1/acb/build", { body }));
  }

  /** Up to `k` (default 10) memories that best answer `query`, best first, with scores. */
  search(query: string, request: Partial<SearchRequest> = {}): Promise<SearchResults> {
    return this.#send(call("POST", "/api/v1/search", { body: { ...request, query } }));
  }

  /**
   * Withdraws `eventId` and records `content` in its place (same kind,
   * session, channel and agent), both at once.
   */
  correct(
    eventId: string,
    content: Record<string, unknown>,
    reason: string,
    options: { actor: ActorRequest; idempotencyKey?: string },
  ): Promise<Corrected> {
    const body: CorrectionRequest = {
      content,
      reason,
      actor: options.actor,
      idempotency_key: options.idempotencyKey ?? `ts-${randomUUID()}`,
    };
    return this.#send(call("POST", `/api/v1/events/${segment(eventId)}/correct`, { body }));
  }

  /** Withdraws `eventIds` (a `retraction` event): no bundle, search or view shows them since. */
  retract(
    eventIds: string[],
    reason: string,
    options: { sessionId: string; actor: ActorRequest; channel?: Channel; agentId?: string },
  ): Promise<Appended> {
    const event: EventRequest = {
      session_id: options.sessionId,
      channel: options.channel ?? "private",
      actor: options.actor,
      kind: "retraction",
      content: { reason },
      refs: eventIds,
    };
    if (options.agentId) event.agent_id = options.agentId;
    return this.record(event);
  }

  /** A truncated tool output, whole. */
  getArtifact(artifactId: string): Promise<Artifact> {
    return this.#send(
      call("GET", `/api/v1/artifacts/${segment(artifactId)}`, {
        read: async (response) => ({
          artifactId,
          text: await response.text(),
          eventId: response.headers.get("x-memd-event-id") ?? "",
          sha256: response.headers.get("x-memd-sha256") ?? "",
          sealed: response.headers.get("x-memd-sealed") === "true",
        }),
      }),
    );
  }

  /** The decision ledger, newest first. */
  async decisions(
    params: { status?: string; scope?: string; key?: string; channel?: Channel; limit?: number } = {},
  ): Promise<Decision[]> {
    const answer = await this.#send(call<{ decisions: Decision[] }>("GET", "/api/v1/decisions", { params }));
    return answer.decisions;
  }

  /** Records a handoff packet for another agent (never resent: it has no key). */
  handoff(request: HandoffRequest): Promise<HandoffCreated> {
    return this.#send(call("POST", "/api/v1/handoffs", { body: request, resendSafe: false }));
  }

  /** One page of the log as stored; page on with `next_after_seq`. */
  events(
    params: {
      session_id?: string;
      kind?: string;
      after_seq?: number;
      before_seq?: number;
      order?: "asc" | "desc";
      text?: string;
      limit?: number;
    } = {},
  ): Promise<EventPage> {
    return this.#send(call("GET", "/api/v1/events", { params }));
  }

  /** One event as stored, with its chain hashes (and `retracted_by`). */
  event(eventId: string): Promise<StoredEvent> {
    return this.#send(call("GET", `/api/v1/events/${segment(eventId)}`));
  }

  /**
   * The views (memory blocks), by name: the caller's own version of each
   * where it has one, else the shared one. Set one by recording a
   * `view_update` event.
   */
  async views(): Promise<View[]> {
    return (await this.#send(call<{ views: View[] }>("GET", "/api/v1/views"))).views;
  }

  /** One page of the sessions, most recently active first; page on with `next_before_seq`. */
  sessions(
    params: { agent_id?: string; since?: string; until?: string; before_seq?: number; limit?: number } = {},
  ): Promise<SessionPage> {
    return this.#send(call("GET", "/api/v1/sessions", { params }));
  }

  /** One page of the agents, by id; page on with `next_after`. */
  agents(params: { after?: string; limit?: number } = {}): Promise<AgentPage> {
    return this.#send(call("GET", "/api/v1/agents", { params }));
  }

  async #send<T>(request: Call<T>): Promise<T> {
    const url = new URL(`${this.url}${request.path}`);
    for (const [name, value] of Object.entries(request.params ?? {})) {
      if (value !== undefined) url.searchParams.set(name, String(value));
    }
    const headers: Record<string, string> = { ...this.#headers };
    if (request.body !== undefined) headers["content-type"] = "application/json";
    for (let attempt = 1; ; attempt++) {
      let outcome: Response | Error;
      try {
        outcome = await this.#fetch(url, {
          method: request.method,
          headers,
          body: request.body === undefined ? undefined : JSON.stringify(request.body),
          signal: AbortSignal.timeout(this.#timeoutMs),
        });
      } catch (error) {
        outcome = error instanceof Error ? error : new Error(String(error));
      }
      if (attempt >= this.retries.attempts || !retryable(request, outcome)) {
        return finish(request, outcome);
      }
      const wait = waitBefore(this.retries, attempt, outcome instanceof Response ? retryAfter(outcome) : null);
      await new Promise((wake) => setTimeout(wake, wait * 1000));
    }
  }
}

/** Seconds before try `attempt + 1`: memd's `Retry-After` when it sent one, else backoff with jitter. */
function waitBefore(retries: Retries, attempt: number, after: number | null): number {
  if (after !== null) return Math.min(after, retries.maxWait);
  return Math.min(retries.backoff * 2 ** (attempt - 1) * (0.5 + Math.random()), retries.maxWait);
}

function retryAfter(response: Response): number | null {
  const value = Number(response.headers.get("retry-after") ?? "");
  return response.headers.has("retry-after") && Number.isFinite(value) ? value : null;
}

/** Whether `error` is one of a request that never reached memd. */
function neverSent(error: Error): boolean {
  const cause = (error as { cause?: { code?: string } }).cause;
  return cause?.code === "ECONNREFUSED" || cause?.code === "ENOTFOUND";
}

function retryable(request: Call<unknown>, outcome: Response | Error): boolean {
  if (outcome instanceof Response) return outcome.status === 429 || outcome.status === 503;
  return neverSent(outcome) || request.resendSafe;
}

async function finish<T>(request: Call<T>, outcome: Response | Error): Promise<T> {
  if (!(outcome instanceof Response)) {
    throw new Unavailable(0, "unreachable", `${outcome.name}: ${outcome.message}`);
  }
  if (outcome.ok) return request.read(outcome);
  throw await failure(outcome);
}

async function failure(response: Response): Promise<MemdError> {
  const text = await response.text();
  try {
    const { error } = JSON.parse(text) as { error: { code?: string; message?: string; field?: string | null } };
    return errorFor(
      response.status,
      String(error.code ?? "unknown"),
      String(error.message ?? text),
      error.field ?? null,
      retryAfter(response),
    );
  } catch {
    return errorFor(response.status, "unknown", text.slice(0, 500), null, retryAfter(response));
  }
}

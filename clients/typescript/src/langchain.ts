// memd as a LangChain.js chat message history.
//
// `MemdChatMessageHistory` extends `@langchain/core`'s
// `BaseListChatMessageHistory`, the interface LangChain.js's
// `RunnableWithMessageHistory` (and most LangChain chat apps) keep
// conversations in: each message it is given is recorded as a memd event
// in the session, and `getMessages` reads the session back from memd's
// log, leaving out what a retraction withdrew. The conversation is then
// part of the tenant's memory, retrieved into bundles, auditable and
// rebuildable like everything else memd holds. The Python client offers
// the same class for LangChain (`memd.langchain`).
//
// Needs `npm install @langchain/core`.

import { BaseListChatMessageHistory } from "@langchain/core/chat_history";
import { AIMessage, HumanMessage, SystemMessage, type BaseMessage } from "@langchain/core/messages";

import { message, type Channel, type EventRequest, type MemdClient, type StoredEvent } from "./client.js";

/** Log pages read per request (memd's maximum). */
const PAGE = 1000;

export interface HistoryOptions {
  /** Who the model's messages are recorded as (`agent:<agentId>`). Default `assistant`. */
  agentId?: string;
  /** Who the human's messages are recorded as (`human:<userId>`). Default `user`. */
  userId?: string;
  channel?: Channel;
}

/**
 * The messages of one memd session. Human messages are recorded with actor
 * `human:<userId>`, the model's with `agent:<agentId>`, system messages
 * with `system:<agentId>`.
 */
export class MemdChatMessageHistory extends BaseListChatMessageHistory {
  lc_namespace = ["memd", "langchain"];
  readonly agentId: string;
  readonly userId: string;
  readonly channel: Channel;

  constructor(
    readonly client: MemdClient,
    readonly sessionId: string,
    options: HistoryOptions = {},
  ) {
    super();
    this.agentId = options.agentId ?? "assistant";
    this.userId = options.userId ?? "user";
    this.channel = options.channel ?? "private";
  }

  /** The session's messages, oldest first, read from memd's log; withdrawn ones left out. */
  async getMessages(): Promise<BaseMessage[]> {
    const found: BaseMessage[] = [];
    let after: number | undefined;
    for (;;) {
      const page = await this.client.events({
        session_id: this.sessionId,
        kind: "message",
        after_seq: after,
        limit: PAGE,
      });
      found.push(...page.events.filter((event) => !event.retracted_by).map(asMessage));
      if (page.next_after_seq === null || page.next_after_seq === undefined) return found;
      after = page.next_after_seq;
    }
  }

  async addMessage(chat: BaseMessage): Promise<void> {
    await this.addMessages([chat]);
  }

  /** Records the messages as one batch (one transaction). */
  async addMessages(messages: BaseMessage[]): Promise<void> {
    if (messages.length) await this.client.recordBatch(messages.map((m) => this.#event(m)));
  }

  /**
   * memd's log is append-only: a conversation is never deleted from it
   * (retention and erasure are the tenant's policy, and a retraction
   * withdraws one memory, not a conversation). Start a new session instead.
   */
  async clear(): Promise<void> {
    throw new Error("memd's log is append-only; use a new sessionId for a fresh conversation");
  }

  #event(chat: BaseMessage): EventRequest {
    const text = typeof chat.content === "string" ? chat.content : JSON.stringify(chat.content);
    const type = chat.getType();
    const actor =
      type === "human" ? { type: "human" as const, id: this.userId }
      : type === "system" ? { type: "system" as const, id: this.agentId }
      : { type: "agent" as const, id: this.agentId };
    return message(this.sessionId, text, { actor, channel: this.channel });
  }
}

function asMessage(event: StoredEvent): BaseMessage {
  const content = event.content as { text?: unknown } | null;
  const text = typeof content?.text === "string" ? content.text : JSON.stringify(event.content);
  if (event.actor_type === "human") return new HumanMessage(text);
  if (event.actor_type === "system") return new SystemMessage(text);
  return new AIMessage(text);
}

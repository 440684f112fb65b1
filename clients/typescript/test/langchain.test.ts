// The LangChain.js chat history against a real daemon.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { AIMessage, HumanMessage, SystemMessage } from "@langchain/core/messages";

import { MemdClient } from "../src/index.js";
import { MemdChatMessageHistory } from "../src/langchain.js";
import { startDaemon, type Daemon } from "./daemon.js";

let daemon: Daemon;
let client: MemdClient;
before(async () => {
  daemon = await startDaemon();
  client = new MemdClient({ url: daemon.url, token: daemon.token });
});
after(async () => {
  await daemon?.stop();
});

test("a LangChain conversation is recorded in memd and read back, withdrawn messages left out", async () => {
  const history = new MemdChatMessageHistory(client, "lc-1", { agentId: "helper", userId: "ann" });
  await history.addMessages([
    new SystemMessage("Be brief."),
    new HumanMessage("Which port does staging use?"),
    new AIMessage("8080."),
  ]);
  await history.addMessage(new AIMessage("Sorry: 9090."));
  const messages = await history.getMessages();
  assert.deepEqual(
    messages.map((m) => [m.getType(), m.content]),
    [
      ["system", "Be brief."],
      ["human", "Which port does staging use?"],
      ["ai", "8080."],
      ["ai", "Sorry: 9090."],
    ],
  );
  const page = await client.events({ session_id: "lc-1" });
  assert.deepEqual(
    page.events.map((e) => `${e.actor_type}:${e.actor_id}`),
    ["system:helper", "human:ann", "agent:helper", "agent:helper"],
  );
  await client.retract([page.events[2]!.event_id], "wrong answer", {
    sessionId: "lc-1",
    actor: { type: "human", id: "ann" },
  });
  const kept = await history.getMessages();
  assert.deepEqual(kept.map((m) => m.content), ["Be brief.", "Which port does staging use?", "Sorry: 9090."]);
  await assert.rejects(history.clear(), /append-only/);
});

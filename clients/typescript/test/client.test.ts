// The client against a real daemon: every call, retries and idempotency
// keys as the Python client has them, errors by field.

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, test } from "node:test";

import {
  IdempotencyConflict,
  InvalidRequest,
  MemdClient,
  NotFound,
  RateLimited,
  message,
} from "../src/index.js";
import { startDaemon, type Daemon } from "./daemon.js";

let daemon: Daemon;
let client: MemdClient;
const session = () => `s-${Math.random().toString(36).slice(2, 12)}`;

before(async () => {
  daemon = await startDaemon();
  client = new MemdClient({ url: daemon.url, token: daemon.token });
});
after(async () => {
  await daemon?.stop();
});

test("the quick start gives a bundle", async () => {
  const s = session();
  const said = await client.record(message(s, "Exports time out above 500 rows per page."));
  assert.match(said.event_id, /^evt_/);
  const acb = await client.buildAcb("why do exports time out?", {
    session_id: s,
    consistency: "strong",
  });
  assert.ok(acb.prompt?.includes("500 rows"), acb.prompt ?? "");
  assert.ok(acb.token_used_est <= acb.budget_tokens);
});

test("an append carries an idempotency key, and a resend is answered with the original", async () => {
  const s = session();
  const event = { ...message(s, "once"), idempotency_key: "ts-once" };
  const first = await client.record(event);
  const again = await client.record(event);
  assert.equal(again.event_id, first.event_id);
  assert.equal(again.replayed, true);
  await assert.rejects(
    client.record({ ...message(s, "another text"), idempotency_key: "ts-once" }),
    (error: unknown) => error instanceof IdempotencyConflict && error.field === "idempotency_key",
  );
  const batch = await client.recordBatch([message(s, "a"), message(s, "b")]);
  assert.equal(batch.length, 2);
  assert.equal(batch[1]!.seq, batch[0]!.seq + 1);
  const page = await client.events({ session_id: s });
  assert.ok(page.events.every((e) => e.idempotency_key?.length), "every append was keyed");
});

test("an answer lost on the way is resent with the same key and stored once", async () => {
  const s = session();
  let dropped = false;
  // A fetch that loses the first append's answer after memd stored it.
  const losing: typeof fetch = async (input, init) => {
    const response = await fetch(input, init);
    if (!dropped && init?.method === "POST") {
      dropped = true;
      throw new TypeError("fetch failed: the connection dropped");
    }
    return response;
  };
  const flaky = new MemdClient({ url: daemon.url, token: daemon.token, fetch: losing, retries: { backoff: 0.01 } });
  const said = await flaky.record(message(s, "stored once"));
  assert.equal(said.replayed, true);
  const page = await client.events({ session_id: s });
  assert.equal(page.events.length, 1);
  // A handoff has no key: it is not resent, the loss is the caller's to see.
  dropped = false;
  await assert.rejects(
    flaky.handoff({ from_agent: "planner", to_agent: "coder", task: "once" }),
    (error: unknown) => error instanceof Error && /unreachable/.test(error.message),
  );
});

test("a 429 is retried after Retry-After, and past the retries raised", async () => {
  let calls = 0;
  const server = createServer((request, response) => {
    calls++;
    if (calls < 3) {
      response.writeHead(429, { "retry-after": "0", "content-type": "application/json" });
      response.end(JSON.stringify({ error: { code: "rate_limited", message: "slow down", field: null } }));
      return;
    }
    response.writeHead(201, { "content-type": "application/json" });
    response.end(JSON.stringify({ event_id: "evt_1", seq: 1, created_at: "2026-01-01T00:00:00Z" }));
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const address = server.address();
  const url = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`;
  try {
    const patient = new MemdClient({ url, token: "t" });
    assert.equal((await patient.record(message("s", "x"))).event_id, "evt_1");
    assert.equal(calls, 3);
    calls = -10;
    const impatient = new MemdClient({ url, token: "t", retries: { attempts: 2 } });
    await assert.rejects(
      impatient.record(message("s", "x")),
      (error: unknown) => error instanceof RateLimited && error.retryAfter === 0,
    );
  } finally {
    server.close();
  }
});

test("errors carry memd's code and field", async () => {
  await assert.rejects(
    client.search("exports", { k: 0 }),
    (error: unknown) => error instanceof InvalidRequest && error.field === "k" && error.status === 400,
  );
  await assert.rejects(
    client.event("evt_01J00000000000000000000000"),
    (error: unknown) => error instanceof NotFound && error.code === "not_found",
  );
});

test("search, decisions, artifacts, handoffs and the log", async () => {
  const s = session();
  const output = Array.from({ length: 600 }, (_, n) => `line ${n}: ${"x".repeat(200)}`).join("\n");
  const big = await client.record({
    session_id: s,
    channel: "private",
    actor: { type: "tool", id: "fs" },
    kind: "tool_result",
    content: { tool: "fs.read_file", path: "big.log", output },
  });
  assert.ok(big.artifact_id);
  const artifact = await client.getArtifact(big.artifact_id!);
  assert.equal(artifact.text, output);
  assert.equal(artifact.eventId, big.event_id);
  assert.equal(artifact.sha256.length, 64);

  const said = await client.record(message(s, "The exporter writes CSV."));
  await client.record({
    session_id: s,
    channel: "private",
    actor: { type: "agent", id: "planner" },
    kind: "decision",
    content: { decision: "Exports are CSV", key: `${s}.format`, scope: "project" },
    refs: [said.event_id],
  });
  const found = await client.search("what format do exports use?", { k: 5, consistency: "strong" });
  assert.ok(found.results.some((r) => r.text === "Exports are CSV"), JSON.stringify(found.results));
  const decisions = await client.decisions({ key: `${s}.format` });
  assert.deepEqual(decisions.map((d) => d.status), ["active"]);

  const packet = await client.handoff({
    from_agent: "planner",
    to_agent: "coder",
    task: "write the CSV exporter",
    refs: [said.event_id],
  });
  const received = await client.buildAcb(undefined, {
    session_id: packet.session_id,
    agent_id: "coder",
    consistency: "strong",
  });
  assert.ok(received.sections.some((section) => section.name === "handoff_packet"));

  const page = await client.events({ session_id: s, limit: 2 });
  assert.equal(page.events.length, 2);
  const rest = await client.events({ session_id: s, after_seq: page.next_after_seq! });
  assert.ok(rest.events[0]!.seq > page.events[1]!.seq);
});

test("a memory is corrected, then retracted", async () => {
  const s = session();
  const alice = { type: "human" as const, id: "alice" };
  const wrong = await client.record(message(s, "The staging port is 8080."));
  const fixed = await client.correct(wrong.event_id, { text: "The staging port is 9090." }, "misread the config", {
    actor: alice,
  });
  assert.equal(fixed.event.seq, fixed.retraction.seq + 1);
  assert.equal((await client.event(wrong.event_id)).retracted_by, fixed.retraction.event_id);
  await client.buildAcb("wait", { consistency: "strong", intent: "continue" });
  const only = { consistency: "strong" as const, filters: { sessions: [s] } };
  const found = await client.search("staging port", only);
  assert.deepEqual(found.results.map((r) => r.text), ["The staging port is 9090."]);
  assert.ok(found.omissions.some((o) => o.reason === "retracted"));

  await client.retract([fixed.event.event_id], "the service moved", { sessionId: s, actor: alice });
  await client.buildAcb("wait", { consistency: "strong", intent: "continue" });
  assert.deepEqual((await client.search("staging port", only)).results, []);
  await assert.rejects(
    client.correct("evt_01J00000000000000000000000", { text: "x" }, "r", { actor: alice }),
    NotFound,
  );
});

test("a memory block is set and read back", async () => {
  const s = session();
  await client.record({
    session_id: s,
    channel: "team",
    actor: { type: "agent", id: "helper" },
    kind: "view_update",
    content: { view: `notes-${s}`, text: "Exports are CSV." },
  });
  await client.buildAcb("wait", { consistency: "strong", intent: "continue" });
  const views = await client.views();
  assert.equal(views.find((v) => v.view === `notes-${s}`)?.text, "Exports are CSV.");
});

test("sessions and agents are listed", async () => {
  const s = session();
  await client.record(message(s, "hello", { agentId: "lister" }));
  await client.buildAcb("wait", { consistency: "strong", intent: "continue" });
  const page = await client.sessions({ agent_id: "lister" });
  assert.deepEqual(page.sessions.map((x) => x.session_id), [s]);
  assert.deepEqual(page.sessions[0]!.agents, ["lister"]);
  const lister = (await client.agents()).agents.find((a) => a.agent_id === "lister");
  assert.equal(lister?.events, 1);
});

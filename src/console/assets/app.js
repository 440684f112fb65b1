// memd console: plain JavaScript over the daemon's own JSON API.
// Every value from the log is shown with textContent, never as HTML: the
// log holds what agents and tools wrote, and the console must not run it.
"use strict";

const TOKEN_KEY = "memd-console-token";
const PAGE_SIZE = 50;

const $ = (id) => document.getElementById(id);

function token() { return sessionStorage.getItem(TOKEN_KEY); }

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `HTTP ${status}`);
    this.status = status;
    this.field = body && body.error && body.error.field;
  }
}

async function request(path, method, body) {
  const headers = { Authorization: `Bearer ${token()}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.ok) return response;
  const answer = await response.json().catch(() => null);
  if (response.status === 401) {
    signOut("The daemon refused the token (unknown, revoked or malformed). Sign in again.");
  }
  throw new ApiError(response.status, answer);
}

async function api(path, method = "GET", body = undefined) {
  return (await request(path, method, body)).json();
}

// An event id as a link that opens it on the Log page.
function eventLink(eventId) {
  const a = document.createElement("a");
  a.href = `#/event/${encodeURIComponent(eventId)}`;
  a.textContent = eventId;
  return a;
}

// The event a cited id belongs to: chunks are `chk_<event ulid>_<part>`.
function citedEvent(id) {
  const chunk = /^chk_([0-9A-Z]+)_\d+$/.exec(id);
  if (chunk) return `evt_${chunk[1]}`;
  return id.startsWith("evt_") ? id : null;
}

// A list of cited ids, each a link to its event where it has one.
function citations(ids) {
  const span = document.createElement("span");
  ids.forEach((id, index) => {
    if (index) span.append(", ");
    const event = citedEvent(id);
    if (event) {
      const link = eventLink(event);
      link.textContent = id;
      span.appendChild(link);
    } else {
      span.append(id);
    }
  });
  return span;
}

function show(id) {
  for (const section of document.querySelectorAll("main > section")) section.hidden = section.id !== id;
  for (const link of document.querySelectorAll("#nav a")) link.classList.toggle("current", link.dataset.page === id);
}

// What one token was shown is not left for the next one to see.
function forgetPages() {
  for (const body of document.querySelectorAll("main tbody")) body.replaceChildren();
  for (const form of document.querySelectorAll("main form")) form.reset();
  for (const id of ["event", "bundle-result", "verify-result", "verify-status", "verify-checkpoint-results", "job-status", "job-report"]) {
    $(id).hidden = true;
  }
  $("decision-chains").replaceChildren();
  log.filters = {};
  log.before = null;
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  forgetPages();
  $("nav").hidden = true;
  const error = $("sign-in-error");
  error.textContent = message || "";
  error.hidden = !message;
  show("sign-in");
  $("token").focus();
}

async function signIn(candidate) {
  sessionStorage.setItem(TOKEN_KEY, candidate);
  try {
    // Any scope may read the log: the cheapest question that proves the token.
    await api("/api/v1/events?limit=1");
  } catch (err) {
    if (err.status !== 401) signOut(`Could not check the token: ${err.message}`);
    return false;
  }
  $("nav").hidden = false;
  // Pages a token's scope does not allow are not shown: ask once.
  let admin = false;
  try {
    await api("/api/v1/admin/projections");
    admin = true;
  } catch (err) {
    if (err.status === 401) return false;
  }
  for (const link of document.querySelectorAll("#nav [data-admin]")) link.hidden = !admin;
  $("who").textContent = admin ? "signed in (admin)" : "signed in";
  return true;
}

// ---- Log ---------------------------------------------------------------

const log = { filters: {}, before: null, history: [] };

function logQuery() {
  const params = new URLSearchParams({ order: "desc", limit: String(PAGE_SIZE) });
  for (const [key, value] of Object.entries(log.filters)) if (value) params.set(key, value);
  if (log.before !== null) params.set("before_seq", String(log.before));
  return `/api/v1/events?${params}`;
}

function preview(content) {
  if (content && typeof content.text === "string") return content.text;
  return JSON.stringify(content);
}

// An RFC 3339 time as the console shows it: UTC, to the second.
function utc(ts) { return ts.replace("T", " ").replace(/(\.\d+)?Z$/, ""); }

function cell(row, text, className) {
  const td = document.createElement("td");
  if (text instanceof Node) td.appendChild(text); else td.textContent = text;
  if (className) td.className = className;
  row.appendChild(td);
}

async function loadLog() {
  const error = $("log-error");
  error.hidden = true;
  let page;
  try {
    page = await api(logQuery());
  } catch (err) {
    if (err.status === 401) return;
    error.textContent = err.field ? `${err.field}: ${err.message}` : err.message;
    error.hidden = false;
    return;
  }
  const body = $("log-table").tBodies[0];
  body.replaceChildren();
  for (const event of page.events) {
    const row = document.createElement("tr");
    row.dataset.eventId = event.event_id;
    cell(row, String(event.seq), "num");
    cell(row, utc(event.ts));
    cell(row, event.session_id);
    cell(row, event.retracted_by ? `${event.kind} (retracted)` : event.kind);
    if (event.retracted_by) row.classList.add("retracted");
    cell(row, `${event.actor_type}:${event.actor_id}`);
    cell(row, event.channel);
    cell(row, event.sensitivity);
    cell(row, preview(event.content), "content");
    row.addEventListener("click", () => openEvent(event, row));
    body.appendChild(row);
  }
  $("log-empty").hidden = page.events.length > 0;
  $("log-older").disabled = page.next_before_seq === null || page.next_before_seq === undefined;
  log.next = page.next_before_seq;
  $("log-newest").disabled = log.before === null;
}

function field(list, name, value) {
  const dt = document.createElement("dt");
  dt.textContent = name;
  const dd = document.createElement("dd");
  if (value instanceof Node) dd.appendChild(value); else dd.textContent = value;
  list.append(dt, dd);
}

function openEvent(event, row) {
  for (const selected of document.querySelectorAll("#log-table tr.selected")) selected.classList.remove("selected");
  if (row) row.classList.add("selected");
  $("event-id").textContent = event.event_id;
  const list = $("event-fields");
  list.replaceChildren();
  field(list, "seq", String(event.seq));
  field(list, "time", event.ts);
  field(list, "recorded", event.created_at);
  field(list, "session", event.session_id);
  field(list, "kind", event.kind);
  field(list, "actor", `${event.actor_type}:${event.actor_id}`);
  if (event.agent_id) field(list, "agent", event.agent_id);
  field(list, "channel", event.channel);
  field(list, "sensitivity", event.sensitivity + (event.sealed ? " (sealed at rest)" : ""));
  if (event.tags.length) field(list, "tags", event.tags.join(", "));
  if (event.refs.length) field(list, "refs", citations(event.refs));
  if (event.idempotency_key) field(list, "idempotency key", event.idempotency_key);
  if (event.artifact_id) field(list, "artifact", event.artifact_id);
  if (event.retracted_by) {
    field(list, "retracted by", citations([event.retracted_by]));
  }
  field(list, "hash", event.hash);
  field(list, "previous hash", event.prev_hash);
  $("event-content").textContent = JSON.stringify(event.content, null, 2);
  showArtifact(event);
  $("event").hidden = false;
  loadChunks(event.event_id);
}

function showArtifact(event) {
  $("event-artifact").hidden = !event.artifact_id;
  $("event-artifact-text").hidden = true;
  if (!event.artifact_id) return;
  const c = event.content || {};
  $("event-artifact-meta").textContent =
    `${event.artifact_id}` + (c.artifact_sha256 ? `, SHA-256 ${c.artifact_sha256}` : "") +
    (c.output_bytes ? `, ${c.output_bytes} bytes` : "") + ": the whole output, kept apart from the event.";
  $("load-artifact").dataset.artifactId = event.artifact_id;
}

async function loadArtifact() {
  const box = $("event-artifact-text");
  try {
    const response = await request(`/api/v1/artifacts/${encodeURIComponent($("load-artifact").dataset.artifactId)}`, "GET");
    box.textContent = await response.text();
  } catch (err) {
    box.textContent = `Could not read the artifact: ${err.message}`;
  }
  box.hidden = false;
}

async function loadChunks(eventId) {
  const body = $("event-chunks").tBodies[0];
  const note = $("event-chunks-note");
  body.replaceChildren();
  note.textContent = "Loading…";
  let answer;
  try {
    answer = await api(`/api/v1/events/${encodeURIComponent(eventId)}/chunks`);
  } catch (err) {
    note.textContent = `Could not read its chunks: ${err.message}`;
    return;
  }
  if ($("event-id").textContent !== eventId) return; // another event was opened meanwhile
  for (const c of answer.chunks) {
    const row = document.createElement("tr");
    cell(row, c.chunk_id);
    cell(row, String(c.part), "num");
    cell(row, c.line_start === null ? "" : `${c.line_start}–${c.line_end}`, "num");
    cell(row, String(c.token_est), "num");
    cell(row, c.importance.toFixed(2), "num");
    cell(row, c.text, "content");
    body.appendChild(row);
  }
  note.textContent = answer.chunks.length
    ? `${answer.chunks.length} retrieval unit(s): what a bundle can cite of this event.`
    : "None: nothing of this event is retrieved (no text to search, or not projected yet).";
}

// Opens an event by id (a link from a bundle, a ref): on the Log page,
// whatever page of the log is shown.
async function openEventById(eventId) {
  try {
    const event = await api(`/api/v1/events/${encodeURIComponent(eventId)}`);
    const row = document.querySelector(`#log-table tr[data-event-id="${CSS.escape(eventId)}"]`);
    openEvent(event, row);
    $("event").scrollIntoView();
  } catch (err) {
    if (err.status === 401) return;
    const error = $("log-error");
    error.textContent = err.status === 404 ? `No event ${eventId} that this token may read.` : err.message;
    error.hidden = false;
  }
}

function readFilters() {
  const form = $("log-filters");
  const data = new FormData(form);
  const filters = {};
  for (const key of ["session_id", "kind", "actor_id", "text"]) filters[key] = (data.get(key) || "").trim();
  for (const key of ["since", "until"]) {
    const value = data.get(key);
    // datetime-local has no zone: the console speaks UTC, as the table does.
    filters[key] = value ? new Date(`${value}Z`).toISOString() : "";
  }
  return filters;
}

async function loadKinds() {
  // The event kinds as the API document lists them, not a second copy here.
  const doc = await fetch("/api/v1/openapi.json").then((r) => r.json());
  const kinds = $("log-filters").elements.kind;
  for (const kind of doc.components.schemas.Kind.enum) kinds.add(new Option(kind, kind));
}

function setUpLog() {
  loadKinds();
  $("log-filters").addEventListener("submit", (e) => {
    e.preventDefault();
    log.filters = readFilters();
    log.before = null;
    log.history = [];
    $("event").hidden = true;
    loadLog();
  });
  $("log-filters").addEventListener("reset", () => {
    log.filters = {};
    log.before = null;
    $("event").hidden = true;
    // Signing out resets the form too: then there is nothing to load.
    if (token()) setTimeout(loadLog);
  });
  $("log-older").addEventListener("click", () => {
    log.before = log.next;
    loadLog();
  });
  $("log-newest").addEventListener("click", () => {
    log.before = null;
    loadLog();
  });
  $("load-artifact").addEventListener("click", loadArtifact);
}

// ---- Decisions ---------------------------------------------------------

// Chains drawn at once ("Show more" draws the next ones), and the newest
// steps of a long chain drawn (the earlier ones on demand): a browser lays
// out a few thousand ledger entries in seconds, and nobody reads them all.
const CHAINS_SHOWN = 50;
const STEPS_SHOWN = 5;

// Chains of supersession, each from its first decision (in this page) to
// the newest. A decision's successor is named on either side: the later
// one's `supersedes`, or, when a later decision on the same key replaced
// it, only its own `superseded_by`. Most recently changed chains first.
function chains(decisions) {
  const byId = new Map(decisions.map((d) => [d.decision_id, d]));
  const next = new Map();
  for (const d of decisions) {
    if (d.superseded_by && byId.has(d.superseded_by)) next.set(d.decision_id, byId.get(d.superseded_by));
  }
  // A rejected decision superseded nothing, whatever it named.
  for (const d of decisions) {
    if (d.status !== "rejected" && d.supersedes && byId.has(d.supersedes) && !next.has(d.supersedes)) {
      next.set(d.supersedes, d);
    }
  }
  const followed = new Set([...next.values()].map((d) => d.decision_id));
  return decisions
    .filter((d) => !followed.has(d.decision_id))
    .map((start) => {
      const chain = [start];
      const seen = new Set([start.decision_id]);
      for (let n = next.get(start.decision_id); n && !seen.has(n.decision_id); n = next.get(n.decision_id)) {
        chain.push(n);
        seen.add(n.decision_id);
      }
      return chain;
    })
    .sort((a, b) => b[b.length - 1].seq - a[a.length - 1].seq);
}

function decisionStep(d) {
  const step = document.createElement("li");
  step.className = `decision ${d.status}`;
  const head = document.createElement("p");
  const badge = document.createElement("span");
  badge.className = `badge ${d.status}`;
  badge.textContent = d.status;
  head.append(badge, ` seq ${d.seq} · ${utc(d.ts)} UTC · ${d.actor_id}`);
  const text = document.createElement("p");
  text.className = "decision-text";
  text.textContent = d.decision;
  step.append(head, text);
  const notes = [];
  if (d.rationale.length) notes.push(`why: ${d.rationale.join("; ")}`);
  if (d.rejected_reason) notes.push(`rejected: ${d.rejected_reason}`);
  for (const note of notes) {
    const p = document.createElement("p");
    p.className = "refs";
    p.textContent = note;
    step.appendChild(p);
  }
  if (d.refs.length) {
    const p = document.createElement("p");
    p.className = "refs";
    p.append("cites ", citations(d.refs));
    step.appendChild(p);
  }
  return step;
}

function chainArticle(chain) {
  const article = document.createElement("article");
  article.className = "chain";
  const title = document.createElement("h3");
  const last = chain[chain.length - 1];
  title.textContent = `${last.key || "(no key)"} — ${last.scope}`;
  const list = document.createElement("ol");
  const hidden = chain.length - STEPS_SHOWN;
  if (hidden > 0) {
    const earlier = document.createElement("li");
    earlier.className = "earlier";
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = `Show the ${hidden} earlier decision${hidden === 1 ? "" : "s"} of this chain`;
    button.addEventListener("click", () => earlier.replaceWith(...chain.slice(0, hidden).map(decisionStep)));
    earlier.appendChild(button);
    list.appendChild(earlier);
  }
  list.append(...chain.slice(Math.max(hidden, 0)).map(decisionStep));
  article.append(title, list);
  return article;
}

// Draws chains `from` on, CHAINS_SHOWN of them, and a button for the rest.
function drawChains(box, all, from) {
  for (const chain of all.slice(from, from + CHAINS_SHOWN)) box.appendChild(chainArticle(chain));
  const rest = all.length - from - CHAINS_SHOWN;
  if (rest > 0) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "more-chains";
    button.textContent = `Show ${Math.min(rest, CHAINS_SHOWN)} more of the ${rest} other chains`;
    button.addEventListener("click", () => {
      button.remove();
      drawChains(box, all, from + CHAINS_SHOWN);
    });
    box.appendChild(button);
  }
}

async function loadDecisions() {
  const error = $("decisions-error");
  error.hidden = true;
  let ledger;
  let tasks;
  let summaries;
  try {
    [ledger, tasks, summaries] = await Promise.all([
      api("/api/v1/decisions?limit=1000"),
      api("/api/v1/tasks?limit=1000"),
      api("/api/v1/summaries?limit=200"),
    ]);
  } catch (err) {
    if (err.status === 401) return;
    error.textContent = err.message;
    error.hidden = false;
    return;
  }
  const box = $("decision-chains");
  box.replaceChildren();
  drawChains(box, chains(ledger.decisions), 0);
  if (!ledger.decisions.length) {
    const none = document.createElement("p");
    none.textContent = "No decisions recorded.";
    box.appendChild(none);
  }
  showSummaries(summaries.summaries);
  const body = $("tasks-table").tBodies[0];
  body.replaceChildren();
  for (const t of tasks.tasks) {
    const row = document.createElement("tr");
    cell(row, t.task_id);
    cell(row, t.status);
    cell(row, t.title);
    cell(row, t.session_id);
    cell(row, String(t.event_ids.length), "num");
    body.appendChild(row);
  }
  $("tasks-empty").hidden = tasks.tasks.length > 0;
}

function showSummaries(summaries) {
  const body = $("summaries-table").tBodies[0];
  body.replaceChildren();
  for (const s of summaries) {
    const row = document.createElement("tr");
    row.className = s.conflicted ? "conflicted" : "";
    cell(row, String(s.seq), "num");
    cell(row, utc(s.ts));
    const standing = document.createElement("div");
    const badge = document.createElement("span");
    badge.className = `badge ${s.conflicted ? "rejected" : "active"}`;
    badge.textContent = s.conflicted ? "conflict" : "consistent";
    standing.appendChild(badge);
    for (const c of s.conflicts) {
      const p = document.createElement("p");
      p.className = "refs";
      p.textContent = c.message + (c.decision ? ` (decision in force: “${c.decision}”)` : "");
      if (c.decision_id) p.append(" ", eventLink(c.decision_id));
      standing.appendChild(p);
    }
    cell(row, standing);
    cell(row, s.text);
    cell(row, citations(s.refs));
    body.appendChild(row);
  }
  $("summaries-empty").hidden = summaries.length > 0;
}

// ---- Bundle explainer --------------------------------------------------

const SCORES = ["score", "relevance", "lexical", "semantic", "recency", "importance"];

function scoreLine(fields) {
  const parts = [];
  for (const name of SCORES) {
    if (fields[name] !== undefined && fields[name] !== null) parts.push(`${name} ${fields[name]}`);
  }
  return parts.join(" · ");
}

async function buildBundle(e) {
  e.preventDefault();
  const data = new FormData($("bundle-form"));
  const request = { render: true, channel: data.get("channel") };
  for (const key of ["session_id", "agent_id", "intent", "query_text"]) {
    const value = (data.get(key) || "").trim();
    if (value) request[key] = value;
  }
  const budget = parseInt(data.get("max_tokens"), 10);
  if (budget > 0) request.max_tokens = budget;
  const error = $("bundle-error");
  error.hidden = true;
  let acb;
  try {
    acb = await api("/api/v1/acb/build", "POST", request);
  } catch (err) {
    if (err.status === 401) return;
    error.textContent = err.field ? `${err.field}: ${err.message}` : err.message;
    error.hidden = false;
    return;
  }
  $("bundle-summary").textContent =
    `Bundle ${acb.acb_id}: ${acb.token_used_est} of ${acb.budget_tokens} tokens, ` +
    `retrieval path ${acb.provenance.path}` +
    (acb.provenance.query_terms && acb.provenance.query_terms.length
      ? `, query terms: ${acb.provenance.query_terms.join(" ")}` : "") + ".";
  const sections = $("bundle-sections");
  sections.replaceChildren();
  for (const section of acb.sections) {
    const box = document.createElement("details");
    box.open = true;
    box.className = "bundle-section";
    box.dataset.section = section.name;
    const summary = document.createElement("summary");
    summary.textContent = `${section.name} — ${section.items.length} items, ${section.token_est} tokens`;
    box.appendChild(summary);
    for (const item of section.items) {
      const article = document.createElement("article");
      article.className = "bundle-item";
      const head = document.createElement("p");
      head.className = "item-head";
      // Kind-specific fields come flattened into the item (see the API reference).
      head.textContent = `[${item.handle}] ${item.type}${item.kind ? ` (${item.kind})` : ""} `;
      // The event an item stands for: a decision's and a summary's id is its event's.
      const cited = item.event_id || item.decision_id || item.summary_id;
      if (cited && cited.startsWith("evt_")) head.appendChild(eventLink(cited));
      else head.append(item.task_id || item.handoff_id || "");
      const scores = document.createElement("p");
      scores.className = "scores";
      scores.textContent = scoreLine(item);
      const text = document.createElement("pre");
      text.textContent = item.text;
      article.append(head, scores, text);
      if (item.refs && item.refs.length) {
        const refs = document.createElement("p");
        refs.className = "refs";
        refs.append("cites ", citations(item.refs));
        article.appendChild(refs);
      }
      box.appendChild(article);
    }
    sections.appendChild(box);
  }
  const omissions = $("bundle-omissions").tBodies[0];
  omissions.replaceChildren();
  for (const o of acb.omissions) {
    const row = document.createElement("tr");
    cell(row, o.reason);
    cell(row, o.section || "");
    cell(row, String(o.count), "num");
    cell(row, citations(o.candidates || []));
    omissions.appendChild(row);
  }
  $("bundle-prompt").textContent = acb.prompt || "";
  $("bundle-result").hidden = false;
}

// ---- Projections -------------------------------------------------------

async function loadProjections() {
  const error = $("projections-error");
  error.hidden = true;
  let status;
  try {
    status = await api("/api/v1/admin/projections");
  } catch (err) {
    if (err.status === 401) return;
    error.textContent = err.message;
    error.hidden = false;
    return;
  }
  $("projections-head").textContent = `The tenant's log ends at seq ${status.head_seq}.`;
  const body = $("projections-table").tBodies[0];
  body.replaceChildren();
  for (const p of status.projections) {
    const row = document.createElement("tr");
    cell(row, p.name);
    cell(row, String(p.cursor_seq), "num");
    cell(row, p.version === null ? "—" : String(p.version), "num");
    cell(row, String(p.lag), p.lag > 0 ? "num lagging" : "num");
    cell(row, p.last_error
      ? `${utc(p.last_error_at)} UTC: ${p.last_error}` +
        (p.lag === 0 ? " (caught up since)" : "")
      : "none", p.last_error ? (p.lag > 0 ? "failing" : "recovered") : "");
    body.appendChild(row);
  }
}

// The drift report as a diff: rows missing in live (-), extra in live (+),
// changed (~) each in its colour.
function showDiff(box, text) {
  box.replaceChildren();
  for (const line of text.split("\n")) {
    const span = document.createElement("span");
    span.className = { "-": "diff-missing", "+": "diff-extra", "~": "diff-changed" }[line[0]] || "";
    span.textContent = `${line}\n`;
    box.appendChild(span);
  }
}

// Queues an admin job and follows it; returns the finished job.
async function followJob(path, what, status, body = undefined) {
  const queued = await api(path, "POST", body);
  status.textContent = `${what}: queued (job ${queued.job_id})`;
  let job;
  do {
    await new Promise((resolve) => setTimeout(resolve, 300));
    job = await api(queued.status_url);
    status.textContent = `${what}: ${job.status} (job ${queued.job_id})`;
  } while (job.status === "pending" || job.status === "running");
  return job;
}

// The Verify page's request: the chain alone, or with the pasted
// checkpoints under the pasted key. Throws an Error naming what is wrong.
function verifyRequest() {
  const pasted = $("verify-checkpoints").value.trim();
  const key = $("verify-public-key").value.trim();
  if (!pasted) return key ? { public_key: key } : undefined;
  let parsed;
  try {
    parsed = JSON.parse(pasted);
  } catch (err) {
    throw new Error(`The checkpoints are not JSON: ${err.message}`);
  }
  return { checkpoints: Array.isArray(parsed) ? parsed : [parsed], public_key: key || undefined };
}

// What the verification found, in one line: the chain first, then the
// first checkpoint that does not hold.
function verifySummary(r) {
  if (r.broken) return `BROKEN: the chain no longer matches at seq ${r.broken.seq}.`;
  const failing = r.checkpoints.find((c) => c.finding !== "holds");
  if (!failing) {
    const held = r.checkpoints.length ? `; ${r.checkpoints.length} signed checkpoint(s) hold` : "";
    return `The chain verifies: ${r.events_ok} events${held}.`;
  }
  if (failing.finding === "bad_signature") {
    return `UNSIGNED: the checkpoint at seq ${failing.seq} is not signed by the key you trust.`;
  }
  const after = failing.last_holding_seq === null
    ? "no earlier checkpoint holds"
    : `the first rewritten event is after seq ${failing.last_holding_seq}`;
  const chain = r.events_ok ? " The chain alone verifies: its hashes were recomputed to match." : "";
  // Why (a rewrite, a cut) is in its line below.
  return `BROKEN: the checkpoint at seq ${failing.seq} no longer holds; ${after}.${chain}`;
}

async function runVerify(submitted) {
  submitted.preventDefault();
  const error = $("verify-error");
  const status = $("verify-status");
  const result = $("verify-result");
  const checkpoints = $("verify-checkpoint-results");
  const button = $("start-verify");
  error.hidden = true;
  result.hidden = true;
  checkpoints.hidden = true;
  let body;
  try {
    body = verifyRequest();
  } catch (err) {
    error.textContent = err.message;
    error.hidden = false;
    return;
  }
  status.hidden = false;
  status.className = "";
  button.disabled = true;
  try {
    const job = await followJob("/api/v1/admin/verify", "Verification", status, body);
    if (job.status === "failed") {
      status.textContent = `Verification failed to run: ${job.error}`;
      return;
    }
    const r = job.result;
    status.textContent = verifySummary(r);
    status.className = r.ok ? "good" : "error";
    result.replaceChildren();
    field(result, "events verified", String(r.events_ok));
    if (r.head_hash) field(result, r.broken ? "hash of the last good event" : "head hash", r.head_hash);
    if (r.broken) {
      field(result, "first broken seq", String(r.broken.seq));
      if (r.broken.event_id) field(result, "event", eventLink(r.broken.event_id));
      field(result, "why", r.broken.reason);
    }
    if (r.checkpoints.length) field(result, "trusted key", r.public_key);
    result.hidden = false;
    checkpoints.replaceChildren();
    for (const c of r.checkpoints) {
      const li = document.createElement("li");
      li.textContent = c.line;
      li.className = c.finding === "holds" ? "good" : "error";
      checkpoints.appendChild(li);
    }
    checkpoints.hidden = r.checkpoints.length === 0;
  } catch (err) {
    if (err.field) {
      error.textContent = `${err.field}: ${err.message}`;
      error.hidden = false;
      status.hidden = true;
    } else {
      status.textContent = `Verification: ${err.message}`;
    }
  } finally {
    button.disabled = false;
  }
}

async function runJob(path, what) {
  const status = $("job-status");
  const report = $("job-report");
  report.hidden = true;
  status.hidden = false;
  for (const button of document.querySelectorAll("#projections button")) button.disabled = true;
  try {
    const job = await followJob(path, what, status);
    if (job.status === "failed") {
      status.textContent = `${what} failed: ${job.error}`;
    } else if (job.result && job.result.text !== undefined) {
      status.textContent = `${what}: done — ${job.result.drifted ? "DRIFT FOUND" : "no drift"}`;
      showDiff(report, job.result.text);
      report.hidden = false;
    } else if (job.result) {
      status.textContent = `${what}: done — ${job.result.events} events replayed`;
    }
  } catch (err) {
    status.textContent = `${what}: ${err.message}`;
  } finally {
    for (const button of document.querySelectorAll("#projections button")) button.disabled = false;
    loadProjections();
  }
}

// ---- Readiness ---------------------------------------------------------

// Marks on <body data-ready> which page has shown what it loaded, once it
// has (or has shown why it could not): what the browser tests and `memd
// bench console` wait for, instead of guessing at the DOM.
function readyWhenDone(name, load) {
  return async (...args) => {
    document.body.dataset.ready = "";
    try {
      await load(...args);
    } finally {
      document.body.dataset.ready = name;
    }
  };
}

loadLog = readyWhenDone("log", loadLog);
loadChunks = readyWhenDone("event", loadChunks);
loadDecisions = readyWhenDone("decisions", loadDecisions);
buildBundle = readyWhenDone("bundle", buildBundle);
loadProjections = readyWhenDone("projections", loadProjections);

// ---- Routing -----------------------------------------------------------

const PAGES = { log: loadLog, decisions: loadDecisions, bundle: () => {}, verify: () => {}, projections: loadProjections };

function route() {
  if (!token()) return signOut();
  const wanted = location.hash.replace(/^#\//, "") || "log";
  const event = /^event\/(.+)$/.exec(wanted);
  if (event) {
    show("log");
    if (!$("log-table").tBodies[0].rows.length) loadLog();
    openEventById(decodeURIComponent(event[1]));
    return;
  }
  // A page this token may not open (its link is hidden) falls back to the log.
  const link = document.querySelector(`#nav a[data-page="${wanted}"]`);
  const page = PAGES[wanted] && link && !link.hidden ? wanted : "log";
  show(page);
  PAGES[page]();
}

document.addEventListener("DOMContentLoaded", async () => {
  setUpLog();
  $("verify-form").addEventListener("submit", runVerify);
  $("bundle-form").addEventListener("submit", buildBundle);
  $("start-rebuild").addEventListener("click", () => runJob("/api/v1/admin/rebuild", "Rebuild"));
  $("start-drift-check").addEventListener("click", () => runJob("/api/v1/admin/drift-check", "Drift check"));
  $("sign-out").addEventListener("click", () => {
    // The next token starts on the log, not on a page the last one opened.
    history.replaceState(null, "", location.pathname);
    signOut();
  });
  $("sign-in-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const input = $("token");
    if (await signIn(input.value.trim())) {
      input.value = "";
      route();
    }
  });
  window.addEventListener("hashchange", route);
  if (token() && !(await signIn(token()))) return;
  route();
});

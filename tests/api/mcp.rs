//! MCP on `/mcp`, driven by rmcp's own client over Streamable HTTP: the five
//! tools, their schemas, and the same tenant isolation, scopes and
//! validation as the HTTP API.

use memd::domain::tenant::Scope;
use reqwest::StatusCode;
use rmcp::{
    ServiceExt,
    model::{CallToolRequestParams, CallToolResult, ClientConfig},
    service::{RoleClient, RunningService},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{TestApp, spawn_daemon, wait_projected};

type Client = RunningService<RoleClient, ClientConfig>;

async fn connect(app: &TestApp, token: &str) -> Result<Client, String> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", app.base_url))
            .auth_header(token),
    );
    ClientConfig::default()
        .serve(transport)
        .await
        .map_err(|err| err.to_string())
}

async fn call(client: &Client, tool: &str, arguments: Value) -> CallToolResult {
    let arguments = arguments.as_object().expect("arguments object").clone();
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
        .unwrap_or_else(|err| panic!("{tool} call failed: {err}"))
}

/// A call that must succeed; its structured result.
async fn ok(client: &Client, tool: &str, arguments: Value) -> Value {
    let result = call(client, tool, arguments).await;
    assert_ne!(result.is_error, Some(true), "{tool} failed: {result:?}");
    result.structured_content.expect("structured content")
}

/// A call that must fail as a tool error; the error body.
async fn refused(client: &Client, tool: &str, arguments: Value) -> Value {
    let result = call(client, tool, arguments).await;
    assert_eq!(
        result.is_error,
        Some(true),
        "{tool} should fail: {result:?}"
    );
    result.structured_content.expect("error body")["error"].clone()
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect()
}

#[sqlx::test]
async fn the_tools_are_listed_with_schemas_a_model_can_act_on(
    _: PgPoolOptions,
    connect_options: PgConnectOptions,
) {
    let app = spawn_daemon(connect_options).await;
    let token = app.tenant("acme").await;
    let client = connect(&app, &token).await.expect("connect");
    let info = client.peer_info().expect("server info");
    assert_eq!(info.server_info.as_ref().unwrap().name, "memd");
    assert!(
        info.instructions
            .as_deref()
            .is_some_and(|i| i.contains("memory_build_acb"))
    );

    let mut tools = client.list_all_tools().await.expect("list tools");
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "memory_build_acb",
            "memory_correct",
            "memory_create_handoff",
            "memory_get_artifact",
            "memory_handoff_inbox",
            "memory_list_tasks",
            "memory_list_views",
            "memory_query_decisions",
            "memory_record_event",
            "memory_retract",
            "memory_search",
            "memory_view_append",
            "memory_view_replace",
        ]
    );
    for tool in &tools {
        assert!(
            tool.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{} must be a name every LLM API accepts",
            tool.name
        );
        assert!(
            tool.description.as_deref().is_some_and(|d| d.len() > 60),
            "{} needs a description",
            tool.name
        );
        let schema = Value::Object((*tool.input_schema).clone());
        assert_eq!(schema["type"], "object", "{}", tool.name);
        let properties = schema["properties"].as_object().expect("properties");
        for (name, property) in properties {
            assert!(
                property.get("description").is_some() || property.get("$ref").is_some(),
                "{}.{name} has no description",
                tool.name
            );
        }
    }
    let schema = |name: &str| {
        Value::Object((*tools.iter().find(|t| t.name == name).unwrap().input_schema).clone())
    };
    // A model can build a bundle with just a query: nothing is required.
    let acb = schema("memory_build_acb");
    assert!(acb["properties"].get("query_text").is_some());
    assert!(
        acb.get("required")
            .is_none_or(|r| r.as_array().unwrap().is_empty())
    );
    let record = schema("memory_record_event");
    assert_eq!(record["required"], json!(["session_id"]));
    // The kinds offered are the ones an append accepts: not `erasure`.
    let offered = record.to_string();
    assert!(offered.contains("\"view_update\""), "{offered}");
    assert!(!offered.contains("\"erasure\""), "{offered}");
    assert_eq!(
        schema("memory_get_artifact")["required"],
        json!(["artifact_id"])
    );
    client.cancel().await.unwrap();
}

#[sqlx::test]
async fn an_agent_records_recalls_decides_hands_off_and_reads_artifacts_over_mcp(
    _: PgPoolOptions,
    connect_options: PgConnectOptions,
) {
    let app = spawn_daemon(connect_options).await;
    let token = app.tenant("acme").await;
    let client = connect(&app, &token).await.expect("connect");

    let said = ok(
        &client,
        "memory_record_event",
        json!({"session_id": "s1", "text": "exports time out above 500 rows per page",
               "actor": {"type": "human", "id": "alice"}}),
    )
    .await;
    let said_id = said["event_id"].as_str().unwrap().to_owned();
    assert_eq!(said["seq"], 1);
    let decided = ok(
        &client,
        "memory_record_event",
        json!({"session_id": "s1", "kind": "decision", "refs": [said_id],
               "content": {"decision": "export pages hold 250 rows", "key": "export.page_size",
                           "scope": "project", "rationale": ["timeouts above 500 rows"]}}),
    )
    .await;
    let decision_id = decided["event_id"].as_str().unwrap().to_owned();
    for (kind, content) in [
        (
            "task_update",
            json!({"task_id": "export-fix", "status": "done", "title": "Fix the export"}),
        ),
        (
            "view_update",
            json!({"view": "rules", "text": "Answer in English."}),
        ),
    ] {
        ok(
            &client,
            "memory_record_event",
            json!({"session_id": "s1", "kind": kind, "content": content}),
        )
        .await;
    }
    let output: String = (0..5000)
        .map(|i| format!("export row {i}: ok é€\n"))
        .collect();
    let recorded = ok(
        &client,
        "memory_record_event",
        json!({"session_id": "s1", "kind": "tool_result", "actor": {"type": "tool", "id": "fs"},
               "content": {"tool": "fs.read_file", "path": "logs/export.log", "output": output}}),
    )
    .await;
    wait_projected(&app.pool, "acme").await;

    // Recall with just a query.
    let result = call(
        &client,
        "memory_build_acb",
        json!({"query_text": "what page size did we choose for exports?"}),
    )
    .await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let prompt = text(&result);
    assert!(prompt.contains("export pages hold 250 rows"), "{prompt}");
    let acb = result.structured_content.expect("bundle");
    assert!(
        acb.get("prompt").is_none(),
        "the prompt is the text content"
    );
    assert!(acb["token_used_est"].as_u64().unwrap() <= 4000);
    assert_eq!(acb["budget_tokens"], 4000);

    // A plain search: scored memories, the decision in force among them.
    let found = call(
        &client,
        "memory_search",
        json!({"query": "what page size did we choose for exports?", "k": 3}),
    )
    .await;
    assert_ne!(found.is_error, Some(true), "{found:?}");
    assert!(text(&found).contains("export pages hold 250 rows"));
    let found = found.structured_content.expect("results");
    let results = found["results"].as_array().unwrap();
    assert!(!results.is_empty() && results.len() <= 3, "{found:#}");
    let decision = results
        .iter()
        .find(|r| r["event_id"] == decision_id.as_str())
        .unwrap_or_else(|| panic!("the decision is found: {found:#}"));
    assert_eq!(decision["kind"], "decision");
    assert!(decision["relevance"].as_f64().unwrap() > 0.0);
    let refused = call(&client, "memory_search", json!({"query": "x", "k": 101})).await;
    assert_eq!(refused.is_error, Some(true));
    assert_eq!(refused.structured_content.unwrap()["error"]["field"], "k");

    // Filters narrow what is retrieved: only tool output, here.
    let decisions_only = call(
        &client,
        "memory_build_acb",
        json!({"query_text": "what page size did we choose for exports?",
               "filters": {"kinds": ["tool_result"]}}),
    )
    .await;
    let narrowed = decisions_only.structured_content.expect("bundle");
    assert_eq!(
        narrowed["provenance"]["retrieval_filters"],
        json!({"kinds": ["tool_result"]})
    );
    let retrieved = narrowed["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "retrieved_evidence")
        .map_or(Vec::new(), |s| s["items"].as_array().unwrap().clone());
    assert!(!retrieved.is_empty());
    assert!(
        retrieved.iter().all(|item| item["kind"] == "tool_result"),
        "{retrieved:#?}"
    );
    let ledger = acb["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "decision_ledger")
        .expect("decision ledger");
    assert_eq!(ledger["items"][0]["decision_id"], decision_id.as_str());

    let decisions = ok(
        &client,
        "memory_query_decisions",
        json!({"key": "export.page_size"}),
    )
    .await;
    assert_eq!(
        decisions["decisions"][0]["decision_id"],
        decision_id.as_str()
    );
    assert_eq!(decisions["decisions"][0]["status"], "active");
    assert_eq!(decisions["decisions"][0]["refs"], json!([said_id]));

    // Every task's state, done ones too (bundles show open and doing only),
    // and the views.
    let tasks = ok(&client, "memory_list_tasks", json!({"status": "done"})).await;
    assert_eq!(tasks["tasks"][0]["task_id"], "export-fix");
    assert_eq!(tasks["tasks"][0]["title"], "Fix the export");
    let open = ok(&client, "memory_list_tasks", json!({"status": "open"})).await;
    assert_eq!(open["tasks"], json!([]));
    let views = ok(&client, "memory_list_views", json!({})).await;
    assert_eq!(views["views"][0]["view"], "rules");
    assert_eq!(views["views"][0]["text"], "Answer in English.");

    // The large output, read back whole in pages that never split a character.
    let artifact = recorded["artifact_id"].as_str().expect("artifact id");
    let mut read = String::new();
    let mut offset = 0;
    loop {
        let result = call(
            &client,
            "memory_get_artifact",
            json!({"artifact_id": artifact, "offset": offset, "max_bytes": 40001}),
        )
        .await;
        assert_ne!(result.is_error, Some(true), "{result:?}");
        read.push_str(&text(&result));
        let page = result.structured_content.unwrap();
        assert_eq!(page["total_bytes"], output.len());
        match page["next_offset"].as_u64() {
            Some(next) => offset = next,
            None => break,
        }
    }
    assert_eq!(read, output);

    // Handoff: the receiver gets the packet, not the transcript.
    let handoff = ok(
        &client,
        "memory_create_handoff",
        json!({"from_agent": "planner", "to_agent": "coder", "task": "cap export pages at 250 rows",
               "constraints": ["no schema changes"], "decision_ids": [decision_id]}),
    )
    .await;
    let session = handoff["session_id"].as_str().unwrap().to_owned();
    wait_projected(&app.pool, "acme").await;
    let received = ok(
        &client,
        "memory_build_acb",
        json!({"agent_id": "coder", "session_id": session}),
    )
    .await;
    let names: Vec<&str> = received["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"handoff_packet"), "{names:?}");
    assert!(
        !received
            .to_string()
            .contains("time out above 500 rows per page")
    );
    client.cancel().await.unwrap();
}

#[sqlx::test]
async fn tools_refuse_bad_input_by_field_lesser_scopes_and_other_tenants_ids(
    _: PgPoolOptions,
    connect_options: PgConnectOptions,
) {
    let app = spawn_daemon(connect_options).await;
    let token_a = app.tenant("tenant-a").await;
    let token_b = app.tenant("tenant-b").await;
    let reader_a = app.tenant_with_scope("tenant-a-reader", Scope::Read).await;
    let a = connect(&app, &token_a).await.expect("connect a");
    let b = connect(&app, &token_b).await.expect("connect b");

    let error = refused(
        &a,
        "memory_record_event",
        json!({"session_id": "s1", "kind": "task_update",
               "content": {"task_id": "T1", "status": "maybe"}}),
    )
    .await;
    assert_eq!(error["code"], "invalid_field");
    assert_eq!(error["field"], "content.status");
    let error = refused(
        &a,
        "memory_build_acb",
        json!({"query_text": "x", "max_tokens": 70000}),
    )
    .await;
    assert_eq!(error["field"], "max_tokens");
    let error = refused(&a, "memory_query_decisions", json!({"status": "pending"})).await;
    assert_eq!(error["field"], "status");
    let error = refused(&a, "memory_list_tasks", json!({"status": "stuck"})).await;
    assert_eq!(error["field"], "status");

    // Tenant A's memory: a secret-looking vault note and a large output.
    ok(
        &a,
        "memory_record_event",
        json!({"session_id": "s1", "text": "the walrus ledger lives in vault seven"}),
    )
    .await;
    let output: String = (0..5000).map(|i| format!("walrus line {i}\n")).collect();
    ok(
        &a,
        "memory_record_event",
        json!({"session_id": "s1", "kind": "tool_result",
               "content": {"tool": "cat", "output": output}}),
    )
    .await;
    wait_projected(&app.pool, "tenant-a").await;
    let artifact: String =
        sqlx::query_scalar("SELECT artifact_id FROM events WHERE artifact_id IS NOT NULL")
            .fetch_one(&app.pool)
            .await
            .unwrap();

    // Tenant B sees none of it, and A's artifact id looks like a made-up one.
    let theirs = refused(&b, "memory_get_artifact", json!({"artifact_id": artifact})).await;
    let made_up = refused(
        &b,
        "memory_get_artifact",
        json!({"artifact_id": "art_01M8ZZZZZZZZZZZZZZZZZZZZZZ"}),
    )
    .await;
    assert_eq!(theirs["code"], "not_found");
    assert_eq!(
        theirs["message"].as_str().unwrap().replace(&artifact, "ID"),
        made_up["message"]
            .as_str()
            .unwrap()
            .replace("art_01M8ZZZZZZZZZZZZZZZZZZZZZZ", "ID")
    );
    let bundle = ok(
        &b,
        "memory_build_acb",
        json!({"query_text": "walrus ledger vault"}),
    )
    .await;
    assert_eq!(bundle["sections"], json!([]), "{bundle}");
    assert_eq!(bundle["provenance"]["candidate_pool_size"], 0);
    let decisions = ok(&b, "memory_query_decisions", json!({})).await;
    assert_eq!(decisions["decisions"], json!([]));

    // A read-scoped token may recall but not record.
    let reader = connect(&app, &reader_a).await.expect("connect reader");
    let error = refused(
        &reader,
        "memory_record_event",
        json!({"session_id": "s1", "text": "should not be stored"}),
    )
    .await;
    assert_eq!(error["code"], "insufficient_scope");
    let error = refused(
        &reader,
        "memory_create_handoff",
        json!({"from_agent": "a", "to_agent": "b", "task": "t"}),
    )
    .await;
    assert_eq!(error["code"], "insufficient_scope");
    assert_eq!(
        app.count("SELECT count(*) FROM events WHERE content::text LIKE '%should not be stored%'")
            .await,
        0
    );
    for client in [a, b, reader] {
        client.cancel().await.unwrap();
    }
}

#[sqlx::test]
async fn mcp_without_a_valid_token_is_refused_before_any_tool(
    _: PgPoolOptions,
    connect_options: PgConnectOptions,
) {
    let app = spawn_daemon(connect_options).await;
    let token = app.tenant("acme").await;
    assert!(connect(&app, "mk_not-a-real-token").await.is_err());

    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "curl", "version": "1"}}});
    for auth in [None, Some("Bearer nope"), Some("Basic abc")] {
        let mut request = app
            .client
            .post(format!("{}/mcp", app.base_url))
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{auth:?}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "unauthorized");
    }
    // With the token, a plain JSON-RPC POST works without any session.
    let response = app
        .client
        .post(format!("{}/mcp", app.base_url))
        .bearer_auth(&token)
        .header("accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["result"]["serverInfo"]["name"], "memd");
}

#[sqlx::test]
async fn any_daemon_on_the_database_answers_any_mcp_call(
    _: PgPoolOptions,
    connect_options: PgConnectOptions,
) {
    // Two daemons share only the database: no MCP session lives in either.
    let a = spawn_daemon(connect_options.clone()).await;
    let b = spawn_daemon(connect_options).await;
    let token = a.tenant("acme").await;
    let via_a = connect(&a, &token).await.expect("connect to a");
    let via_b = connect(&b, &token).await.expect("connect to b");
    let recorded = ok(
        &via_a,
        "memory_record_event",
        json!({"session_id": "s1", "text": "the walrus migration runs on sundays"}),
    )
    .await;
    let bundle = call(
        &via_b,
        "memory_build_acb",
        json!({"session_id": "s1", "query_text": "when does the walrus migration run?",
               "consistency": "strong"}),
    )
    .await;
    assert!(text(&bundle).contains("walrus migration runs on sundays"));
    let bundle = bundle.structured_content.unwrap();
    assert_eq!(bundle["provenance"]["head_seq"], recorded["seq"]);
    // A bare JSON-RPC call to b, with no initialize on b at all.
    let response = b
        .client
        .post(format!("{}/mcp", b.base_url))
        .bearer_auth(&token)
        .header("accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "memory_query_decisions", "arguments": {}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["result"]["structuredContent"]["decisions"], json!([]));
    for client in [via_a, via_b] {
        client.cancel().await.unwrap();
    }
}

/// Memory blocks: an agent replaces and appends to its views, as events,
/// within the policy's limit for each view.
#[sqlx::test]
async fn an_agent_edits_its_memory_blocks_within_their_limits(
    _: PgPoolOptions,
    connect_options: PgConnectOptions,
) {
    let app = spawn_daemon(connect_options).await;
    let operator = app.tenant("acme").await;
    app.put_policy(&operator, &json!({"view_limits": {"persona": 30}}))
        .await;
    let agent = crate::agents::agent_token(&app, "acme", "helper").await;
    let client = connect(&app, &agent).await.expect("connect");

    ok(
        &client,
        "memory_view_replace",
        json!({"view": "persona", "text": "I am a careful release assistant."}),
    )
    .await;
    ok(
        &client,
        "memory_view_append",
        json!({"view": "persona", "text": "I answer in short sentences."}),
    )
    .await;
    ok(
        &client,
        "memory_view_append",
        json!({"view": "notes", "text": "Friday deploys need two approvals."}),
    )
    .await;
    wait_projected(&app.pool, "acme").await;
    let views = ok(&client, "memory_list_views", json!({})).await;
    let text_of = |name: &str| {
        views["views"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["view"] == name)
            .unwrap_or_else(|| panic!("no view {name}: {views:#}"))["text"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        text_of("persona"),
        "I am a careful release assistant.\nI answer in short sentences."
    );
    assert_eq!(text_of("notes"), "Friday deploys need two approvals.");
    // Its own blocks: private updates of an agent's token are its version.
    assert_eq!(views["views"][0]["owner"], "helper", "{views:#}");

    // Over the limit: refused, naming the view and its limit; the block
    // keeps its text, and the log holds only the three edits.
    let long = "and one more sentence about releases ".repeat(10);
    let error = refused(
        &client,
        "memory_view_append",
        json!({"view": "persona", "text": long}),
    )
    .await;
    assert_eq!(error["field"], "content.text", "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("\"persona\"") && message.contains("30 tokens"),
        "{message}"
    );
    let error = refused(
        &client,
        "memory_view_replace",
        json!({"view": "persona", "text": long}),
    )
    .await;
    assert_eq!(error["field"], "content.text");
    assert_eq!(
        app.count("SELECT count(*) FROM events WHERE kind = 'view_update'")
            .await,
        3
    );
}

#[sqlx::test]
async fn an_agent_corrects_and_retracts_its_memory_over_mcp(
    _: PgPoolOptions,
    connect_options: PgConnectOptions,
) {
    let app = spawn_daemon(connect_options).await;
    app.tenant("acme").await;
    let agent = crate::agents::agent_token(&app, "acme", "helper").await;
    let other = crate::agents::agent_token(&app, "acme", "other").await;
    let client = connect(&app, &agent).await.expect("connect");
    let said = ok(
        &client,
        "memory_record_event",
        json!({"session_id": "s1", "text": "the staging port is 8080"}),
    )
    .await;
    let corrected = ok(
        &client,
        "memory_correct",
        json!({"event_id": said["event_id"], "content": {"text": "the staging port is 9090"},
               "reason": "misread the config"}),
    )
    .await;
    let replacement = corrected["event"]["event_id"].clone();
    wait_projected(&app.pool, "acme").await;
    let found = ok(&client, "memory_search", json!({"query": "staging port"})).await;
    let texts: Vec<&str> = found["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["the staging port is 9090"], "{found:#}");

    // Another agent may not withdraw it; its owner may.
    let stranger = connect(&app, &other).await.expect("connect");
    let error = refused(
        &stranger,
        "memory_retract",
        json!({"event_ids": [replacement], "reason": "not mine"}),
    )
    .await;
    assert_eq!(error["field"], "event_ids[0]", "{error}");
    let error = refused(
        &client,
        "memory_retract",
        json!({"event_ids": [replacement, "evt_01J00000000000000000000000"], "reason": "r"}),
    )
    .await;
    assert_eq!(error["field"], "event_ids[1]", "{error}");
    ok(
        &client,
        "memory_retract",
        json!({"event_ids": [replacement], "reason": "the service moved"}),
    )
    .await;
    wait_projected(&app.pool, "acme").await;
    let found = ok(&client, "memory_search", json!({"query": "staging port"})).await;
    assert_eq!(found["results"], json!([]), "{found:#}");
}

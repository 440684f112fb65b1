//! The OpenAPI document the daemon serves: it lists exactly the routes the
//! router serves (`memd::api::ROUTES`, from which the router is built), with
//! their auth; its schemas name the wire fields; and real requests and the
//! daemon's real answers validate against it. The docs page loads it.

use std::collections::{BTreeSet, HashSet};

use memd::api::ROUTES;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::helpers::{TestApp, event, message, spawn_daemon, tool_result, wait_projected};

/// The document, fetched without a token (it is public).
async fn document(app: &TestApp) -> Value {
    let response = app
        .client
        .get(format!("{}/api/v1/openapi.json", app.base_url))
        .send()
        .await
        .expect("request sent");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "served as JSON"
    );
    response.json().await.expect("the document is JSON")
}

#[sqlx::test]
async fn the_document_lists_every_route_the_router_serves(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let app = spawn_daemon(connect).await;
    let doc = document(&app).await;
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3."),
        "OpenAPI 3.x: {}",
        doc["openapi"]
    );
    assert_eq!(doc["info"]["title"], "memd");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"],
        json!({"type": "http", "scheme": "bearer",
               "description": "A tenant token from `memd tenant create` or `memd tenant token`"})
    );

    // The routes as the router has them, and a few that must be among them.
    let served: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|r| (r.method.as_str().to_lowercase(), r.path.to_owned()))
        .collect();
    for expected in [
        ("post", "/api/v1/events"),
        ("get", "/api/v1/events"),
        ("get", "/api/v1/events/{id}"),
        ("get", "/api/v1/chunks/{id}"),
        ("post", "/api/v1/acb/build"),
        ("post", "/api/v1/handoffs"),
        ("get", "/api/v1/decisions"),
        ("get", "/api/v1/policy"),
        ("put", "/api/v1/policy"),
        ("get", "/api/v1/artifacts/{id}"),
        ("post", "/api/v1/admin/rebuild"),
        ("post", "/api/v1/admin/drift-check"),
        ("get", "/api/v1/admin/jobs/{id}"),
        ("get", "/api/v1/openapi.json"),
        ("get", "/api/v1/docs"),
        ("get", "/healthz"),
        ("get", "/readyz"),
    ] {
        assert!(
            served.contains(&(expected.0.to_owned(), expected.1.to_owned())),
            "the router serves {expected:?}"
        );
    }

    // The operations as the document has them: exactly the routes served.
    let methods = ["get", "put", "post", "delete", "patch", "head", "options"];
    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .filter(|key| methods.contains(&key.as_str()))
                .map(move |method| (method.clone(), path.clone()))
        })
        .collect();
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty() && unserved.is_empty(),
        "served but not in the document (add #[utoipa::path] and list it in \
         api/openapi.rs): {undocumented:?}; in the document but not served: {unserved:?}"
    );

    for route in ROUTES {
        let operation = &doc["paths"][route.path][route.method.as_str().to_lowercase()];
        let name = format!("{} {}", route.method, route.path);
        assert!(
            operation["summary"].as_str().is_some_and(|s| !s.is_empty()),
            "{name} has a summary"
        );
        assert!(
            operation["tags"].as_array().is_some_and(|t| !t.is_empty()),
            "{name} has a tag"
        );
        let responses = operation["responses"].as_object().unwrap();
        assert!(
            responses.keys().any(|status| status.starts_with('2')),
            "{name} documents its success"
        );
        if route.bearer {
            assert!(route.path.starts_with("/api/v1/"), "{name}");
            assert_eq!(
                operation["security"],
                json!([{"bearer": []}]),
                "{name} needs the bearer token"
            );
            for status in ["401", "429", "503"] {
                assert!(responses.contains_key(status), "{name} documents {status}");
            }
        } else {
            assert!(operation.get("security").is_none(), "{name} needs no token");
            // Public routes are public indeed.
            let response = app
                .client
                .get(format!("{}{}", app.base_url, route.path))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{name} without a token");
        }
        for (status, response) in responses {
            let error_status = status.starts_with('4') || status == "503";
            if route.bearer && error_status {
                let schema = response
                    .get("$ref")
                    .map(|r| {
                        resolve(&doc, r.as_str().unwrap())["content"]["application/json"]["schema"]
                            .clone()
                    })
                    .unwrap_or_else(|| response["content"]["application/json"]["schema"].clone());
                assert_eq!(
                    schema,
                    json!({"$ref": "#/components/schemas/ErrorBody"}),
                    "{name} {status} answers the error shape"
                );
            }
        }
    }
}

#[sqlx::test]
async fn the_schemas_name_the_wire_fields(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    let doc = document(&app).await;
    let schema = |name: &str| resolve(&doc, &format!("#/components/schemas/{name}")).clone();

    // The one error shape.
    let error = schema("ErrorBody");
    assert_eq!(error["required"], json!(["error"]));
    let detail = &error["properties"]["error"];
    assert_eq!(detail["required"], json!(["code", "message", "field"]));
    assert_eq!(detail["properties"]["code"]["type"], "string");
    assert_eq!(detail["properties"]["message"]["type"], "string");
    assert_eq!(
        detail["properties"]["field"]["type"],
        json!(["string", "null"]),
        "field is nullable"
    );

    // The event envelope.
    let request = schema("EventRequest");
    let required = names(&request["required"]);
    for field in ["session_id", "channel", "actor", "kind", "content"] {
        assert!(required.contains(field), "{field} is required");
    }
    for field in [
        "tenant_id",
        "sensitivity",
        "tags",
        "refs",
        "idempotency_key",
        "ts",
    ] {
        assert!(!required.contains(field), "{field} is optional");
        assert!(request["properties"][field].is_object(), "{field}");
    }
    assert_eq!(
        request["additionalProperties"], false,
        "unknown envelope fields are refused"
    );
    let enum_of = |property: &Value| resolve_value(&doc, property)["enum"].clone();
    assert_eq!(
        enum_of(&request["properties"]["channel"]),
        json!(["private", "public", "team", "agent"])
    );
    assert_eq!(
        enum_of(&request["properties"]["sensitivity"]),
        json!(["none", "low", "high", "secret"])
    );
    assert_eq!(
        enum_of(&request["properties"]["kind"]),
        json!([
            "message",
            "tool_call",
            "tool_result",
            "decision",
            "task_update",
            "summary",
            "view_update",
            "handoff",
            // Not `erasure`: in the log only, an append of one is refused
            // (`memd erase` records them).
            "artifact",
            "retraction"
        ])
    );
    assert_eq!(
        enum_of(&schema("ActorRequest")["properties"]["type"]),
        json!(["human", "agent", "tool", "system"])
    );
    // `content` is one of the kinds' shapes.
    let content = resolve_value(&doc, &request["properties"]["content"]);
    let shapes: Vec<&str> = content["anyOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["$ref"].as_str().unwrap())
        .collect();
    assert_eq!(shapes.len(), 10, "{shapes:?}");
    assert_eq!(
        names(&schema("DecisionContent")["required"]),
        HashSet::from(["decision", "scope"])
    );
    assert_eq!(
        names(&schema("ToolResultContent")["required"]),
        HashSet::from(["tool", "output"])
    );
    // A batch is the other shape of the body.
    let body = schema("AppendRequest");
    assert_eq!(
        body["oneOf"],
        json!([{"$ref": "#/components/schemas/EventRequest"},
               {"$ref": "#/components/schemas/EventBatch"}])
    );
    assert_eq!(
        schema("EventBatch")["properties"]["events"]["maxItems"],
        1000
    );

    // The bundle request.
    let acb = schema("AcbRequest");
    for field in [
        "query_text",
        "max_tokens",
        "session_id",
        "agent_id",
        "channel",
        "render",
    ] {
        assert!(acb["properties"][field].is_object(), "AcbRequest.{field}");
    }
    assert!(acb.get("required").is_none(), "every field is optional");
    assert_eq!(
        enum_of(&acb["properties"]["consistency"]),
        json!(["eventual", "strong"])
    );

    // The decisions query and the policy's defaults.
    let parameters = &doc["paths"]["/api/v1/decisions"]["get"]["parameters"];
    let params: HashSet<&str> = parameters
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        params,
        HashSet::from(["status", "scope", "key", "channel", "limit", "before_seq"])
    );
    assert_eq!(
        schema("Policy")["properties"]["max_tokens"]["default"],
        65_000
    );
}

#[sqlx::test]
async fn real_requests_and_answers_match_the_schemas(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    let doc = document(&app).await;
    let token = app.tenant("acme").await;
    let check = |label: &str, schema: &str, value: &Value, strict: bool| {
        let errors = Validator { doc: &doc }.check(
            &json!({"$ref": format!("#/components/schemas/{schema}")}),
            value,
            "$",
            strict,
        );
        assert!(
            errors.is_empty(),
            "{label} does not match {schema}: {errors:#?}\n{value:#}"
        );
    };
    // The schema of an operation's answer, by status.
    let answer_schema = |path: &str, method: &str, status: StatusCode| -> String {
        let response = &doc["paths"][path][method]["responses"][status.as_str()];
        let response = match response.get("$ref") {
            Some(r) => resolve(&doc, r.as_str().unwrap()),
            None => response,
        };
        let schema = response["content"]["application/json"]["schema"]["$ref"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path} documents {status} as JSON"));
        schema.rsplit('/').next().unwrap().to_owned()
    };
    let call = async |method: Method, path: &str, body: Option<&Value>| -> (StatusCode, Value) {
        let mut request = app
            .client
            .request(method, format!("{}{path}", app.base_url))
            .bearer_auth(&token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        (response.status(), response.json().await.unwrap())
    };
    // Sends a request, checking an accepted one against the document (not
    // strictly: extra content fields are kept as sent), and checks the
    // answer strictly: no field the document does not show.
    let exchange = async |method: Method,
                          path: &str,
                          template: &str,
                          body: Option<Value>,
                          expect: StatusCode|
           -> Value {
        let lower = method.as_str().to_lowercase();
        if expect.is_success()
            && let Some(body) = &body
            && let Some(schema) = doc["paths"][template][&lower]["requestBody"]["content"]
                ["application/json"]["schema"]["$ref"]
                .as_str()
        {
            check(
                &format!("the body of {method} {path}"),
                schema.rsplit('/').next().unwrap(),
                body,
                false,
            );
        }
        let (status, answer) = call(method.clone(), path, body.as_ref()).await;
        assert_eq!(status, expect, "{method} {path}: {answer}");
        check(
            &format!("the {status} answer of {method} {path}"),
            &answer_schema(template, &lower, status),
            &answer,
            true,
        );
        answer
    };

    let first = exchange(
        Method::POST,
        "/api/v1/events",
        "/api/v1/events",
        Some(with(
            message("s1", "we export pages of 250 rows"),
            json!({"idempotency_key": "k1", "tags": ["pinned"]}),
        )),
        StatusCode::CREATED,
    )
    .await;
    let output: String = (0..5000).map(|i| format!("export line {i}\n")).collect();
    exchange(
        Method::POST,
        "/api/v1/events",
        "/api/v1/events",
        Some(json!({"events": [
            event("decision", json!({"decision": "Export pages of 250 rows", "scope": "project",
                "key": "export.page_size", "rationale": ["timeouts above 500"], "confidence": 0.9}),
                &[first["event_id"].as_str().unwrap()]),
            event("task_update", json!({"task_id": "T-1", "status": "doing", "title": "exports"}), &[]),
            event("view_update", json!({"view": "identity", "text": "You are the billing agent."}), &[]),
            tool_result("logs/export.log", &output),
        ]})),
        StatusCode::CREATED,
    )
    .await;
    let replay = exchange(
        Method::POST,
        "/api/v1/events",
        "/api/v1/events",
        Some(with(
            message("s1", "we export pages of 250 rows"),
            json!({"idempotency_key": "k1", "tags": ["pinned"]}),
        )),
        StatusCode::OK,
    )
    .await;
    assert_eq!(replay["replayed"], true);
    crate::helpers::wait_projected(&app.pool, "acme").await;

    let bundle = exchange(
        Method::POST,
        "/api/v1/acb/build",
        "/api/v1/acb/build",
        Some(
            json!({"session_id": "s1", "agent_id": "coder", "intent": "question",
                    "query_text": "which page size do exports use? export line 7",
                    "max_tokens": 3000, "render": true, "consistency": "strong"}),
        ),
        StatusCode::OK,
    )
    .await;
    let items: usize = bundle["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["items"].as_array().unwrap().len())
        .sum();
    assert!(items >= 3, "a bundle with items to check: {bundle:#}");
    exchange(
        Method::POST,
        "/api/v1/handoffs",
        "/api/v1/handoffs",
        Some(
            json!({"from_agent": "planner", "to_agent": "coder", "session_id": "coder-1",
                    "task": "page the export", "constraints": ["no schema changes"],
                    "refs": [first["event_id"]]}),
        ),
        StatusCode::CREATED,
    )
    .await;
    let decisions = exchange(
        Method::GET,
        "/api/v1/decisions?status=active&limit=10",
        "/api/v1/decisions",
        None,
        StatusCode::OK,
    )
    .await;
    assert_eq!(decisions["decisions"].as_array().unwrap().len(), 1);
    exchange(
        Method::GET,
        "/api/v1/policy",
        "/api/v1/policy",
        None,
        StatusCode::OK,
    )
    .await;
    exchange(
        Method::PUT,
        "/api/v1/policy",
        "/api/v1/policy",
        Some(json!({"max_tokens": 8000, "scoring": {"alpha": 0.7}})),
        StatusCode::OK,
    )
    .await;
    let queued = exchange(
        Method::POST,
        "/api/v1/admin/rebuild",
        "/api/v1/admin/rebuild",
        Some(json!({"projectors": ["chunks"]})),
        StatusCode::ACCEPTED,
    )
    .await;
    exchange(
        Method::POST,
        "/api/v1/admin/drift-check",
        "/api/v1/admin/drift-check",
        None,
        StatusCode::ACCEPTED,
    )
    .await;
    exchange(
        Method::GET,
        queued["status_url"].as_str().unwrap(),
        "/api/v1/admin/jobs/{id}",
        None,
        StatusCode::OK,
    )
    .await;

    // The log read back, and what bundles cite.
    let page = exchange(
        Method::GET,
        "/api/v1/events?limit=2",
        "/api/v1/events",
        None,
        StatusCode::OK,
    )
    .await;
    let event_id = page["events"][0]["event_id"].as_str().unwrap().to_owned();
    exchange(
        Method::GET,
        &format!("/api/v1/events/{event_id}"),
        "/api/v1/events/{id}",
        None,
        StatusCode::OK,
    )
    .await;
    wait_projected(&app.pool, "acme").await;
    let chunk_id: String =
        sqlx::query_scalar("SELECT chunk_id FROM projections.chunks ORDER BY seq LIMIT 1")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    exchange(
        Method::GET,
        &format!("/api/v1/chunks/{chunk_id}"),
        "/api/v1/chunks/{id}",
        None,
        StatusCode::OK,
    )
    .await;

    // Refusals answer the error shape.
    exchange(
        Method::POST,
        "/api/v1/events",
        "/api/v1/events",
        Some(json!({"events": [
            message("s1", "ok"),
            with(message("s1", "x"), json!({"channel": "radio"})),
        ]})),
        StatusCode::BAD_REQUEST,
    )
    .await;
    exchange(
        Method::GET,
        "/api/v1/artifacts/art_missing",
        "/api/v1/artifacts/{id}",
        None,
        StatusCode::NOT_FOUND,
    )
    .await;
    for (path, status) in [("/healthz", StatusCode::OK), ("/readyz", StatusCode::OK)] {
        exchange(Method::GET, path, path, None, status).await;
    }

    // And the validator does refuse what does not match.
    let errors = Validator { doc: &doc }.check(
        &json!({"$ref": "#/components/schemas/AppendRequest"}),
        &json!({"session_id": "s1", "channel": "radio", "actor": {"type": "human", "id": "u"},
                "kind": "message", "content": {"text": "hi"}}),
        "$",
        false,
    );
    assert!(!errors.is_empty(), "a bad channel is caught");
    let errors = Validator { doc: &doc }.check(
        &json!({"$ref": "#/components/schemas/Appended"}),
        &json!({"event_id": "evt_1", "seq": 1, "created_at": "2026-01-01T00:00:00Z", "extra": 1}),
        "$",
        true,
    );
    assert!(!errors.is_empty(), "an undocumented answer field is caught");
}

#[sqlx::test]
async fn the_docs_page_renders_the_document(_: PgPoolOptions, connect: PgConnectOptions) {
    let app = spawn_daemon(connect).await;
    let response = app
        .client
        .get(format!("{}/api/v1/docs", app.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html"),
    );
    let policy = response.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(policy.contains("script-src 'self'"), "{policy}");
    let page = response.text().await.unwrap();
    assert!(
        !page.contains("https://"),
        "nothing from another host: {page}"
    );
    assert!(page.contains(r#"<script src="/console/docs.js""#), "{page}");
    assert!(
        page.contains(r#"<a href="/api/v1/openapi.json">"#),
        "a link to the JSON when the script cannot run"
    );
}

/// `base` with the fields of `extra` set.
fn with(mut base: Value, extra: Value) -> Value {
    for (key, value) in extra.as_object().unwrap() {
        base[key] = value.clone();
    }
    base
}

fn names(list: &Value) -> HashSet<&str> {
    list.as_array()
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// `#/components/...` in the document.
fn resolve<'a>(doc: &'a Value, reference: &str) -> &'a Value {
    let pointer = reference
        .strip_prefix('#')
        .unwrap_or_else(|| panic!("a local reference: {reference}"));
    doc.pointer(pointer)
        .unwrap_or_else(|| panic!("{reference} is in the document"))
}

fn resolve_value<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(reference) => resolve(doc, reference),
        None => schema,
    }
}

/// The part of JSON Schema the document uses: `$ref`, `allOf`, `oneOf`,
/// `anyOf`, `type`, `enum`, `properties`, `required`,
/// `additionalProperties`, `items`, `minItems`, `maxItems`, `minimum`,
/// `maximum`. `strict` also refuses object fields the schema does not
/// declare (unless it allows additional ones): an answer must not carry
/// fields the document does not show.
struct Validator<'a> {
    doc: &'a Value,
}

impl Validator<'_> {
    fn check(&self, schema: &Value, value: &Value, at: &str, strict: bool) -> Vec<String> {
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            return self.check(resolve(self.doc, reference), value, at, strict);
        }
        let mut errors = Vec::new();
        if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
            for member in all {
                errors.extend(self.check(member, value, at, false));
            }
        }
        if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
            let matching = one
                .iter()
                .filter(|member| self.check(member, value, at, strict).is_empty())
                .count();
            if matching != 1 {
                errors.push(format!("{at}: matches {matching} of oneOf"));
            }
        }
        if let Some(any) = schema.get("anyOf").and_then(Value::as_array)
            && !any
                .iter()
                .any(|member| self.check(member, value, at, strict).is_empty())
        {
            errors.push(format!("{at}: matches none of anyOf"));
        }
        if let Some(types) = schema.get("type") {
            let types: Vec<&str> = match types {
                Value::String(one) => vec![one.as_str()],
                Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
                _ => vec![],
            };
            let fits = types.iter().any(|t| match *t {
                "null" => value.is_null(),
                "boolean" => value.is_boolean(),
                "string" => value.is_string(),
                "integer" => value.is_i64() || value.is_u64(),
                "number" => value.is_number(),
                "array" => value.is_array(),
                "object" => value.is_object(),
                _ => false,
            });
            if !fits {
                errors.push(format!("{at}: {value} is not of type {types:?}"));
                return errors;
            }
        }
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
            && !allowed.contains(value)
        {
            errors.push(format!("{at}: {value} is not one of {allowed:?}"));
        }
        if let Some(number) = value.as_f64() {
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
                && number < min
            {
                errors.push(format!("{at}: {number} < minimum {min}"));
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
                && number > max
            {
                errors.push(format!("{at}: {number} > maximum {max}"));
            }
        }
        if let Some(items) = value.as_array() {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    errors.extend(self.check(item_schema, item, &format!("{at}[{index}]"), strict));
                }
            }
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && (items.len() as u64) < min
            {
                errors.push(format!("{at}: fewer than {min} items"));
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                errors.push(format!("{at}: more than {max} items"));
            }
        }
        if let Some(object) = value.as_object() {
            let properties = schema.get("properties").and_then(Value::as_object);
            for required in names(&schema["required"]) {
                if !object.contains_key(required) {
                    errors.push(format!("{at}: lacks required {required}"));
                }
            }
            for (key, field) in object {
                let here = format!("{at}.{key}");
                match properties.and_then(|p| p.get(key)) {
                    Some(property) => errors.extend(self.check(property, field, &here, strict)),
                    None => match schema.get("additionalProperties") {
                        Some(Value::Bool(false)) => {
                            errors.push(format!("{here}: not allowed"));
                        }
                        Some(extra) if extra.is_object() => {
                            errors.extend(self.check(extra, field, &here, strict));
                        }
                        _ => {}
                    },
                }
            }
            if strict && let Some(known) = self.declared(schema) {
                for key in object.keys() {
                    if !known.contains(key) {
                        errors.push(format!("{at}.{key}: not in the document"));
                    }
                }
            }
        }
        errors
    }

    /// The fields an object schema declares, through `$ref` and `allOf`;
    /// `None` when it takes others too or declares none.
    fn declared(&self, schema: &Value) -> Option<HashSet<String>> {
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            return self.declared(resolve(self.doc, reference));
        }
        if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
            let mut known = HashSet::new();
            for member in all {
                known.extend(self.declared(member)?);
            }
            return Some(known);
        }
        if schema
            .get("additionalProperties")
            .is_some_and(|extra| extra != &Value::Bool(false))
        {
            return None;
        }
        let properties = schema.get("properties")?.as_object()?;
        Some(properties.keys().cloned().collect())
    }
}

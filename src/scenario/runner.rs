//! Running one scenario: a tenant of its own, its steps in order over HTTP
//! (as agents call memd), then what its assertions need read back (over
//! HTTP too, but for the database scan and the chain walk, which read the
//! database itself), then the checks.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, anyhow, bail};
use chrono::{DateTime, Utc};
use reqwest::Method;
use serde::Serialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use sqlx::PgPool;

use super::{
    assertions::{self, ArtifactCheck, BuiltAcb, Facts, Outcome},
    spec::{
        self, AcbStep, AppendStep, Assertion, GenerateStep, HandoffStep, Scenario, Step, ToolStep,
    },
    target::Target,
};
use crate::{
    audit,
    domain::tenant::{Scope, TenantId},
    scenario::histories::History,
    tenants,
};

/// Events per append request when generating a history.
const GENERATE_BATCH: u64 = 1_000;
/// How long a step may wait for projections or an admin job.
const WAIT_LIMIT: Duration = Duration::from_secs(120);

/// What a step did.
#[derive(Debug, Clone, Serialize)]
pub struct StepReport {
    pub step: usize,
    pub verb: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub ms: f64,
    /// Events recorded, bundle size, ... by verb.
    #[serde(skip_serializing_if = "Value::is_null")]
    pub detail: Value,
}

/// How an assertion came out, with the assertion as written.
#[derive(Debug, Clone, Serialize)]
pub struct AssertionReport {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub passed: bool,
    pub expected: String,
    pub actual: String,
    pub assertion: Value,
}

/// A bundle the scenario built: its size, bounds and timings.
#[derive(Debug, Clone, Serialize)]
pub struct BundleReport {
    pub id: String,
    pub builds: usize,
    pub path: Value,
    pub token_used_est: Value,
    pub budget_tokens: Value,
    pub candidate_pool_size: Value,
    pub retrieved: Value,
    pub cache: Value,
    pub lag_events: Value,
    /// `provenance.elapsed_ms` of the first build: time spent in memd.
    pub server_ms: Value,
    /// Client round trips over all builds.
    pub round_trip_ms: Timings,
    /// The whole first answer, when the scenario failed (to see why).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Timings {
    pub p50: f64,
    pub p95: f64,
    pub max: f64,
}

impl Timings {
    fn of(samples: &[f64]) -> Self {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let at = |q: f64| {
            if sorted.is_empty() {
                0.0
            } else {
                sorted[((sorted.len() - 1) as f64 * q).round() as usize]
            }
        };
        Self {
            p50: at(0.5),
            p95: at(0.95),
            max: at(1.0),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Passed,
    Failed,
    Skipped,
}

#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    pub file: String,
    pub id: String,
    pub name: String,
    pub principles: Vec<String>,
    pub tenant: String,
    pub status: Status,
    /// Why it was skipped, or the step (or file) that failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub steps: Vec<StepReport>,
    pub assertions: Vec<AssertionReport>,
    pub bundles: Vec<BundleReport>,
    pub total_ms: f64,
}

impl ScenarioReport {
    /// A file that could not be read or parsed.
    pub fn unreadable(file: &Path, error: String) -> Self {
        Self {
            file: file.display().to_string(),
            id: file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            name: String::new(),
            principles: Vec::new(),
            tenant: String::new(),
            status: Status::Failed,
            error: Some(error),
            steps: Vec::new(),
            assertions: Vec::new(),
            bundles: Vec::new(),
            total_ms: 0.0,
        }
    }

    pub fn passed_assertions(&self) -> usize {
        self.assertions.iter().filter(|a| a.passed).count()
    }
}

/// One scenario's run.
pub struct Run<'a> {
    target: &'a mut Target,
    db: &'a PgPool,
    http: &'a reqwest::Client,
    /// The scenario file's folder: `output_file` paths are relative to it.
    dir: PathBuf,
    tenant: String,
    token: String,
    now: DateTime<Utc>,
    facts: Facts,
    generated: u64,
    steps: Vec<StepReport>,
}

/// Runs `scenario` (read from `file`) on a tenant of its own.
pub async fn run(
    target: &mut Target,
    db: &PgPool,
    http: &reqwest::Client,
    file: &Path,
    scenario: &Scenario,
) -> ScenarioReport {
    let started = Instant::now();
    let tenant = tenant_of(scenario);
    let mut report = ScenarioReport {
        file: file.display().to_string(),
        id: scenario.id.clone(),
        name: scenario.name.clone(),
        principles: scenario.principles.clone(),
        tenant: tenant.clone(),
        status: Status::Failed,
        error: None,
        steps: Vec::new(),
        assertions: Vec::new(),
        bundles: Vec::new(),
        total_ms: 0.0,
    };
    if let Some(reason) = scenario
        .steps
        .iter()
        .any(|s| matches!(s, Step::Restart(_)))
        .then(|| target.cannot_restart())
        .flatten()
    {
        report.status = Status::Skipped;
        report.error = Some(reason.to_owned());
        return report;
    }
    let token = match create_tenant(db, &tenant).await {
        Ok(token) => token,
        Err(err) => {
            report.error = Some(format!("creating tenant {tenant}: {err:#}"));
            return report;
        }
    };
    let mut run = Run {
        target,
        db,
        http,
        dir: file.parent().map(Path::to_path_buf).unwrap_or_default(),
        tenant,
        token,
        now: Utc::now(),
        facts: Facts::default(),
        generated: 0,
        steps: Vec::new(),
    };
    let outcome = run.steps(scenario).await;
    let outcome = match outcome {
        Ok(()) => run.gather(&scenario.assertions).await,
        Err(err) => Err(err),
    };
    match outcome {
        Ok(()) => {
            report.assertions = checked(&scenario.assertions, &run.facts);
            report.status = if report.assertions.iter().all(|a| a.passed) {
                Status::Passed
            } else {
                Status::Failed
            };
        }
        Err(err) => report.error = Some(format!("{err:#}")),
    }
    if let Err(err) = run.target.reset().await {
        report.status = Status::Failed;
        report.error = Some(format!("restarting the daemon after the scenario: {err:#}"));
    }
    // The tenant stays (its memory is the evidence of the run); its admin
    // token does not outlive the scenario.
    if let Ok(tenant) = TenantId::parse(&run.tenant)
        && let Err(err) = tenants::revoke_all_tokens(db, &tenant).await
    {
        tracing::warn!(error = %err, tenant = %run.tenant, "revoking the scenario's token");
    }
    report.bundles = bundle_reports(&run.facts);
    if report.status == Status::Failed {
        for bundle in &mut report.bundles {
            bundle.answer = Some(run.facts.acbs[&bundle.id].first().clone());
        }
    }
    report.steps = run.steps;
    report.total_ms = started.elapsed().as_secs_f64() * 1000.0;
    report
}

/// A new tenant's name for a run of `scenario`: its id and a random part.
fn tenant_of(scenario: &Scenario) -> String {
    format!(
        "scn-{}-{}",
        scenario
            .id
            .to_lowercase()
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<String>(),
        &ulid::Ulid::generate().to_string().to_lowercase()[16..]
    )
}

/// Each assertion checked against what the run gathered.
fn checked(assertions: &[Assertion], facts: &Facts) -> Vec<AssertionReport> {
    assertions
        .iter()
        .map(|assertion| {
            let Outcome {
                passed,
                expected,
                actual,
            } = assertions::check(assertion, facts);
            AssertionReport {
                kind: assertion.kind(),
                passed,
                expected,
                actual,
                assertion: serde_json::to_value(assertion).unwrap_or_default(),
            }
        })
        .collect()
}

async fn create_tenant(db: &PgPool, tenant: &str) -> anyhow::Result<String> {
    let id = TenantId::parse(tenant).map_err(|err| anyhow!("tenant {tenant}: {err}"))?;
    let token = tenants::create_tenant(db, &id, Scope::Admin).await?;
    Ok(token.expose().to_string())
}

fn bundle_reports(facts: &Facts) -> Vec<BundleReport> {
    let mut names: Vec<&String> = facts.acbs.keys().collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let built = &facts.acbs[name];
            let first = built.first();
            let provenance = &first["provenance"];
            BundleReport {
                id: name.clone(),
                builds: built.answers.len(),
                path: provenance["path"].clone(),
                token_used_est: first["token_used_est"].clone(),
                budget_tokens: first["budget_tokens"].clone(),
                candidate_pool_size: provenance["candidate_pool_size"].clone(),
                retrieved: provenance["retrieved"].clone(),
                cache: provenance["cache"].clone(),
                lag_events: provenance["lag_events"].clone(),
                server_ms: provenance["elapsed_ms"].clone(),
                round_trip_ms: Timings::of(&built.round_trips_ms),
                answer: None,
            }
        })
        .collect()
}

/// `type:id` as an event's actor.
fn actor(text: &str) -> anyhow::Result<Value> {
    let (kind, id) = text
        .split_once(':')
        .ok_or_else(|| anyhow!("actor {text:?}: write it as type:id, e.g. human:alice"))?;
    Ok(json!({"type": kind, "id": id}))
}

impl Run<'_> {
    async fn steps(&mut self, scenario: &Scenario) -> anyhow::Result<()> {
        for (index, step) in scenario.steps.iter().enumerate() {
            let started = Instant::now();
            let detail = self
                .step(step)
                .await
                .with_context(|| format!("step {} ({})", index + 1, step.verb()))?;
            self.steps.push(StepReport {
                step: index + 1,
                verb: step.verb(),
                name: step_name(step),
                ms: started.elapsed().as_secs_f64() * 1000.0,
                detail,
            });
        }
        Ok(())
    }

    async fn step(&mut self, step: &Step) -> anyhow::Result<Value> {
        match step {
            Step::Append(append) => self.append(append).await,
            Step::Tool(tool) => self.tool(tool).await,
            Step::Generate(generate) => self.generate(generate).await,
            Step::Policy(policy) => {
                let mut policy = policy.clone();
                self.substitute(&mut policy)?;
                self.expect(Method::PUT, "/api/v1/policy", Some(&policy))
                    .await?;
                Ok(Value::Null)
            }
            Step::Handoff(handoff) => self.handoff(handoff).await,
            Step::Acb(acb) => self.acb(acb).await,
            Step::Restart(restart) => {
                self.target.restart(restart).await?;
                Ok(json!({"projectors": restart.projectors, "warm_up": restart.warm_up}))
            }
            Step::Rebuild(rebuild) => {
                let job = self
                    .expect(
                        Method::POST,
                        "/api/v1/admin/rebuild",
                        Some(&json!({"projectors": rebuild.projectors})),
                    )
                    .await?;
                self.job(&job).await
            }
            Step::Erase(erase) => {
                let mut body = json!({"subject_id": erase.subject});
                if let Some(by) = &erase.by {
                    body["by"] = json!(by);
                }
                let erased = self
                    .expect(Method::POST, "/api/v1/admin/erase", Some(&body))
                    .await?;
                self.job(&erased["rebuild"]).await?;
                Ok(erased["erasure"].clone())
            }
            Step::WaitProjected(_) => {
                let seq = self.wait_projected().await?;
                Ok(json!({"projected_seq": seq}))
            }
        }
    }

    // ---- HTTP ----

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.target.url()))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.context("sending the request")?;
        let status = response.status().as_u16();
        let text = response.text().await.context("reading the answer")?;
        Ok((
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    /// A call that must succeed (2xx): its answer.
    async fn expect(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let (status, answer) = self.call(method.clone(), path, body).await?;
        if !(200..300).contains(&status) {
            bail!("{method} {path} answered {status}: {answer}");
        }
        Ok(answer)
    }

    // ---- names ----

    /// Replaces `${name}` and `${name.field}` in every string of `value`.
    fn substitute(&self, value: &mut Value) -> anyhow::Result<()> {
        match value {
            Value::String(text) if text.contains("${") => {
                let mut out = String::with_capacity(text.len());
                let mut rest = text.as_str();
                while let Some(start) = rest.find("${") {
                    out.push_str(&rest[..start]);
                    let end = rest[start..]
                        .find('}')
                        .ok_or_else(|| anyhow!("unclosed ${{ in {text:?}"))?;
                    let reference = &rest[start + 2..start + end];
                    out.push_str(&self.lookup(reference)?);
                    rest = &rest[start + end + 1..];
                }
                out.push_str(rest);
                *text = out;
            }
            Value::Array(items) => {
                for item in items {
                    self.substitute(item)?;
                }
            }
            Value::Object(fields) => {
                for item in fields.values_mut() {
                    self.substitute(item)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn lookup(&self, reference: &str) -> anyhow::Result<String> {
        let (name, field) = match reference.split_once('.') {
            Some((name, field)) => (name, Some(field)),
            None => (reference, None),
        };
        let answer = self
            .facts
            .names
            .get(name)
            .ok_or_else(|| anyhow!("${{{reference}}}: no step is named {name}"))?;
        match field {
            None => Ok(self.facts.id(name)),
            Some(field) => match answer.get(field) {
                Some(Value::String(text)) => Ok(text.clone()),
                Some(value @ (Value::Number(_) | Value::Bool(_))) => Ok(value.to_string()),
                _ => Err(anyhow!(
                    "${{{reference}}}: the answer that recorded {name} has no text or number {field}"
                )),
            },
        }
    }

    /// Bare names in a list of ids become the ids they stand for.
    fn resolve_names(&self, list: &mut Value) {
        if let Value::Array(items) = list {
            for item in items {
                if let Some(name) = item.as_str()
                    && self.facts.names.contains_key(name)
                {
                    *item = Value::String(self.facts.id(name));
                }
            }
        }
    }

    fn name(&mut self, name: &Option<String>, answer: Value) {
        if let Some(name) = name {
            self.facts.names.insert(name.clone(), answer);
        }
    }

    fn at(&self, ago: &Option<String>) -> anyhow::Result<Option<String>> {
        ago.as_ref()
            .map(|ago| self.before_now(ago).map(|t| t.to_rfc3339()))
            .transpose()
    }

    /// The run's start minus `ago` (`14d`, ...).
    fn before_now(&self, ago: &str) -> anyhow::Result<DateTime<Utc>> {
        let duration = spec::parse_ago(ago).map_err(|e| anyhow!(e))?;
        self.now
            .checked_sub_signed(duration)
            .ok_or_else(|| anyhow!("{ago:?}: too long ago"))
    }

    // ---- steps ----

    async fn append(&mut self, step: &AppendStep) -> anyhow::Result<Value> {
        let mut content = step.content.clone().unwrap_or_else(|| json!({}));
        if let Some(text) = &step.text {
            content["text"] = Value::String(text.clone());
        }
        let mut body = json!({
            "session_id": step.session,
            "channel": step.channel.as_deref().unwrap_or("private"),
            "actor": actor(&step.actor)?,
            "kind": step.kind.as_deref().unwrap_or("message"),
            "content": content,
            "refs": step.refs,
            "tags": step.tags,
        });
        if let Some(sensitivity) = &step.sensitivity {
            body["sensitivity"] = json!(sensitivity);
        }
        if let Some(subject) = &step.subject {
            body["subject_id"] = json!(subject);
        }
        if let Some(ts) = self.at(&step.ago)? {
            body["ts"] = json!(ts);
        }
        self.resolve_names(&mut body["refs"]);
        self.substitute(&mut body)?;
        let answer = self
            .expect(Method::POST, "/api/v1/events", Some(&body))
            .await?;
        self.name(&step.id, answer.clone());
        Ok(json!({"events": 1, "seq": answer["seq"]}))
    }

    async fn tool(&mut self, step: &ToolStep) -> anyhow::Result<Value> {
        let output = match (&step.output, &step.output_file) {
            (Some(output), None) => output.clone(),
            (None, Some(file)) => {
                let path = self.dir.join(file);
                std::fs::read_to_string(&path)
                    .with_context(|| format!("reading output_file {}", path.display()))?
            }
            _ => bail!("a tool step gives exactly one of output and output_file"),
        };
        let channel = step.channel.as_deref().unwrap_or("private");
        let ts = self.at(&step.ago)?;
        let mut call = json!({
            "session_id": step.session, "channel": channel, "actor": actor(&step.actor)?,
            "kind": "tool_call", "content": {"tool": step.tool, "args": step.args},
        });
        let mut result = json!({
            "session_id": step.session, "channel": channel,
            "actor": {"type": "tool", "id": step.tool},
            "kind": "tool_result", "content": {"tool": step.tool, "output": output},
        });
        if let Some(path) = &step.path {
            result["content"]["path"] = json!(path);
        }
        if let Some(ts) = ts {
            call["ts"] = json!(ts);
            result["ts"] = json!(ts);
        }
        // The result is left as written: tool outputs hold `${...}` of their
        // own (shell, JavaScript templates).
        self.substitute(&mut call)?;
        let answer = self
            .expect(
                Method::POST,
                "/api/v1/events",
                Some(&json!({"events": [call, result]})),
            )
            .await?;
        let bytes = answer.to_string().len();
        if let Some(id) = &step.id {
            self.name(&Some(format!("{id}_call")), answer["events"][0].clone());
            self.name(&Some(id.clone()), answer["events"][1].clone());
        }
        Ok(json!({"events": 2, "answer_bytes": bytes,
                  "artifact_id": answer["events"][1]["artifact_id"]}))
    }

    async fn generate(&mut self, step: &GenerateStep) -> anyhow::Result<Value> {
        let history = match step.history.as_str() {
            "chat" => History::Chat,
            "tool-heavy" => History::ToolHeavy,
            other => bail!("history {other:?}: chat or tool-heavy"),
        };
        let times = match (&step.from_ago, &step.to_ago) {
            (Some(from), Some(to)) => Some((self.before_now(from)?, self.before_now(to)?)),
            (None, None) => None,
            _ => bail!("give both from_ago and to_ago, or neither"),
        };
        let first = self.generated;
        let end = first + step.events;
        let mut evidence: Option<String> = None;
        let mut at = first;
        while at < end {
            let batch_end = (at + GENERATE_BATCH).min(end);
            let events: Vec<Value> = (at..batch_end)
                .map(|i| {
                    let mut event = history.event(i, evidence.as_deref());
                    if let Some(session) = &step.session {
                        event["session_id"] = json!(session);
                    }
                    if let Some((from, to)) = times {
                        let fraction = (i - first) as f64 / step.events.max(1) as f64;
                        let span = (to - from).num_milliseconds() as f64;
                        let ts = from + chrono::Duration::milliseconds((span * fraction) as i64);
                        event["ts"] = json!(ts.to_rfc3339());
                    }
                    event
                })
                .collect();
            let answer = self
                .expect(
                    Method::POST,
                    "/api/v1/events",
                    Some(&json!({ "events": events })),
                )
                .await?;
            evidence = answer["events"]
                .as_array()
                .and_then(|a| a.last())
                .and_then(|e| e["event_id"].as_str())
                .map(str::to_owned);
            at = batch_end;
        }
        self.generated = end;
        Ok(json!({"events": step.events, "history": history.name()}))
    }

    async fn handoff(&mut self, step: &HandoffStep) -> anyhow::Result<Value> {
        let mut body = Value::Object(step.body.clone().into_iter().collect::<Map<_, _>>());
        for list in ["decision_ids", "refs"] {
            if let Some(value) = body.get_mut(list) {
                let mut value = value.take();
                self.resolve_names(&mut value);
                body[list] = value;
            }
        }
        self.substitute(&mut body)?;
        let answer = self
            .expect(Method::POST, "/api/v1/handoffs", Some(&body))
            .await?;
        let detail =
            json!({"handoff_id": answer["handoff_id"], "session_id": answer["session_id"]});
        self.name(&step.id, answer);
        Ok(detail)
    }

    async fn acb(&mut self, step: &AcbStep) -> anyhow::Result<Value> {
        let mut body = Value::Object(step.request.clone().into_iter().collect::<Map<_, _>>());
        if let Some(value) = body.get_mut("handoff_id") {
            let mut list = Value::Array(vec![value.take()]);
            self.resolve_names(&mut list);
            *value = list[0].take();
        }
        self.substitute(&mut body)?;
        let mut built = BuiltAcb::default();
        for _ in 0..step.repeat.max(1) {
            let started = Instant::now();
            let answer = self
                .expect(Method::POST, "/api/v1/acb/build", Some(&body))
                .await?;
            built
                .round_trips_ms
                .push(started.elapsed().as_secs_f64() * 1000.0);
            built.answers.push(answer);
        }
        let first = built.first();
        let detail = json!({
            "tokens": first["token_used_est"], "path": first["provenance"]["path"],
            "candidate_pool_size": first["provenance"]["candidate_pool_size"],
            "builds": built.answers.len(),
        });
        self.facts.acbs.insert(step.id.clone(), built);
        Ok(detail)
    }

    /// Polls a queued admin job until it is done; its result.
    async fn job(&self, queued: &Value) -> anyhow::Result<Value> {
        let path = queued["status_url"]
            .as_str()
            .ok_or_else(|| anyhow!("no status_url in {queued}"))?;
        let deadline = Instant::now() + WAIT_LIMIT;
        loop {
            let status = self.expect(Method::GET, path, None).await?;
            match status["status"].as_str() {
                Some("done") => return Ok(status["result"].clone()),
                Some("failed") => bail!("job failed: {}", status["error"]),
                _ if Instant::now() > deadline => bail!("job not done after {WAIT_LIMIT:?}"),
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Waits until projections reach the log's head, as bundles report it.
    async fn wait_projected(&self) -> anyhow::Result<i64> {
        let deadline = Instant::now() + WAIT_LIMIT;
        loop {
            let probe = self
                .expect(
                    Method::POST,
                    "/api/v1/acb/build",
                    Some(&json!({"intent": "continue", "max_tokens": 1})),
                )
                .await?;
            let provenance = &probe["provenance"];
            if provenance["lag_events"] == 0 {
                return Ok(provenance["projected_seq"].as_i64().unwrap_or(0));
            }
            if Instant::now() > deadline {
                bail!(
                    "projections still {} events behind",
                    provenance["lag_events"]
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // ---- what assertions need ----

    async fn gather(&mut self, assertions: &[Assertion]) -> anyhow::Result<()> {
        let needs = |pred: fn(&Assertion) -> bool| assertions.iter().any(pred);
        let secrets: Vec<String> = assertions
            .iter()
            .flat_map(|a| match a {
                Assertion::NoSecretAnywhere { secrets } => secrets.clone(),
                _ => Vec::new(),
            })
            .collect();
        let traced: BTreeSet<String> = assertions
            .iter()
            .filter_map(|a| match a {
                Assertion::Traceability { acb } => Some(acb.clone()),
                _ => None,
            })
            .collect();
        if needs(|a| matches!(a, Assertion::EventExists { .. }))
            || !secrets.is_empty()
            || !traced.is_empty()
        {
            self.facts.events = self.all_events().await?;
        }
        if needs(|a| matches!(a, Assertion::DecisionStatus { .. })) {
            self.facts.decisions = self.all_decisions().await?;
        }
        for acb in &traced {
            self.resolve_refs(acb).await?;
        }
        for assertion in assertions {
            if let Assertion::ArtifactExists { event } = assertion {
                self.check_artifact(event).await?;
            }
        }
        if !secrets.is_empty() {
            self.scan_for_secrets(&secrets).await?;
        }
        if needs(|a| matches!(a, Assertion::NoDrift {})) {
            let job = self
                .expect(Method::POST, "/api/v1/admin/drift-check", None)
                .await?;
            self.facts.drift = Some(self.job(&job).await?);
        }
        if needs(|a| matches!(a, Assertion::LogVerified {})) {
            let tenant = TenantId::parse(&self.tenant).map_err(|err| anyhow!("tenant: {err}"))?;
            let report = audit::verify_chains(self.db, Some(&tenant))
                .await?
                .pop()
                .ok_or_else(|| anyhow!("no chain report"))?;
            self.facts.verified = Some(match report.broken {
                None => Ok(report.events_ok as u64),
                Some(broken) => Err(format!("seq {}: {}", broken.seq, broken.reason)),
            });
        }
        Ok(())
    }

    async fn all_events(&self) -> anyhow::Result<Vec<Value>> {
        let mut events = Vec::new();
        let mut path = "/api/v1/events?limit=1000".to_owned();
        loop {
            let mut page = self.expect(Method::GET, &path, None).await?;
            if let Value::Array(items) = page["events"].take() {
                events.extend(items);
            }
            match page["next_after_seq"].as_i64() {
                Some(after) => path = format!("/api/v1/events?limit=1000&after_seq={after}"),
                None => return Ok(events),
            }
        }
    }

    async fn all_decisions(&self) -> anyhow::Result<Vec<Value>> {
        let mut decisions = Vec::new();
        let mut path = "/api/v1/decisions?limit=1000".to_owned();
        loop {
            let mut page = self.expect(Method::GET, &path, None).await?;
            let Value::Array(items) = page["decisions"].take() else {
                bail!("no decisions in {page}");
            };
            let last = items.last().and_then(|d| d["seq"].as_i64());
            let full = items.len() == 1000;
            decisions.extend(items);
            match (full, last) {
                (true, Some(seq)) => {
                    path = format!("/api/v1/decisions?limit=1000&before_seq={seq}")
                }
                _ => return Ok(decisions),
            }
        }
    }

    /// Looks up every ref the bundle's items cite, as a user would.
    async fn resolve_refs(&mut self, acb: &str) -> anyhow::Result<()> {
        let Some(built) = self.facts.acbs.get(acb) else {
            return Ok(());
        };
        let refs: BTreeSet<String> = built.first()["sections"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["items"].as_array().into_iter().flatten())
            .flat_map(|item| item["refs"].as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        let views: BTreeSet<String> = self
            .facts
            .events
            .iter()
            .filter(|e| e["kind"] == "view_update")
            .filter_map(|e| e["content"]["view"].as_str().map(|v| format!("view:{v}")))
            .collect();
        for reference in refs {
            if self.facts.resolved.contains_key(&reference) {
                continue;
            }
            let resolved = if reference.starts_with("view:") {
                views.contains(&reference)
            } else {
                let path = if reference.starts_with("chk_") {
                    format!("/api/v1/chunks/{reference}")
                } else if reference.starts_with("art_") {
                    format!("/api/v1/artifacts/{reference}")
                } else {
                    format!("/api/v1/events/{reference}")
                };
                self.call(Method::GET, &path, None).await?.0 == 200
            };
            self.facts.resolved.insert(reference, resolved);
        }
        Ok(())
    }

    async fn check_artifact(&mut self, name: &str) -> anyhow::Result<()> {
        let id = self.facts.id(name);
        let event = self
            .expect(Method::GET, &format!("/api/v1/events/{id}"), None)
            .await?;
        let content = &event["content"];
        let Some(artifact) = content["artifact_id"].as_str() else {
            return Ok(());
        };
        let response = self
            .http
            .get(format!("{}/api/v1/artifacts/{artifact}", self.target.url()))
            .bearer_auth(&self.token)
            .send()
            .await?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await?;
        let hash = hex::encode(Sha256::digest(&bytes));
        self.facts.artifacts.insert(
            name.to_owned(),
            ArtifactCheck {
                status,
                bytes: bytes.len(),
                hash_matches: content["artifact_sha256"].as_str() == Some(hash.as_str()),
                excerpt_bytes: content["excerpt_text"].as_str().map_or(0, str::len),
            },
        );
        Ok(())
    }

    /// Every table of every schema of the database, each row as text,
    /// searched for each secret in clear and hex-encoded (bytea renders as
    /// hex); then every bundle and the log as read back.
    async fn scan_for_secrets(&mut self, secrets: &[String]) -> anyhow::Result<()> {
        let tables: Vec<(String, String)> = sqlx::query!(
            r#"SELECT table_schema::text AS "schema!", table_name::text AS "table!"
                 FROM information_schema.tables
                WHERE table_type = 'BASE TABLE'
                  AND table_schema NOT IN ('pg_catalog', 'information_schema')
                ORDER BY 1, 2"#
        )
        .fetch_all(self.db)
        .await?
        .into_iter()
        .map(|row| (row.schema, row.table))
        .collect();
        for secret in secrets {
            let mut places = Vec::new();
            let hex_form = hex::encode(secret.as_bytes());
            for (schema, table) in &tables {
                let sql = format!(
                    "SELECT count(*) FROM \"{}\".\"{}\" t
                      WHERE strpos(t::text, $1) > 0 OR strpos(lower(t::text), $2) > 0",
                    schema.replace('"', "\"\""),
                    table.replace('"', "\"\"")
                );
                let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                    .bind(secret)
                    .bind(&hex_form)
                    .fetch_one(self.db)
                    .await
                    .with_context(|| format!("scanning {schema}.{table}"))?;
                if count > 0 {
                    places.push(format!("{schema}.{table} ({count} rows)"));
                }
            }
            for (name, built) in &self.facts.acbs {
                if built.answers.iter().any(|a| a.to_string().contains(secret)) {
                    places.push(format!("bundle {name}"));
                }
            }
            if self
                .facts
                .events
                .iter()
                .any(|e| e.to_string().contains(secret))
            {
                places.push("the log as read back".into());
            }
            self.facts.secret_hits.insert(secret.clone(), places);
        }
        Ok(())
    }
}

fn step_name(step: &Step) -> Option<String> {
    match step {
        Step::Append(s) => s.id.clone(),
        Step::Tool(s) => s.id.clone(),
        Step::Handoff(s) => s.id.clone(),
        Step::Acb(s) => Some(s.id.clone()),
        _ => None,
    }
}

//! Building a bundle for a caller: its scope and agent checked, on the
//! standby while it keeps up, counted in the metrics. A search is built the
//! same way.

use serde_json::Value;

use super::{ApiState, error::CallError, require_scope};
use crate::{
    domain::{parse_json, tenant::Scope},
    metrics::{BundleSeen, Outcome},
    read::{
        AcbRequest,
        acb::{Acb, AcbError, Consistency},
        build_acb,
        replica::{Needs, ReadReport, STANDBY_READ_TIMEOUT},
        search::{SearchRequest, SearchResults},
    },
    tenants::Caller,
};

/// Builds a bundle for `caller` from a request body: the one read path of
/// HTTP and MCP.
pub(crate) async fn build(
    state: &ApiState,
    caller: &Caller,
    body: Value,
) -> Result<Acb, CallError> {
    let started = std::time::Instant::now();
    let built = build_unmeasured(state, caller, body).await;
    let tenant = caller.tenant.as_str();
    match &built {
        Ok(acb) => state.metrics.bundle(
            tenant,
            Outcome::Ok,
            started.elapsed(),
            Some(BundleSeen {
                path: acb.provenance.path,
                cache_hit: acb.provenance.cache == "hit",
                tokens_used: acb.token_used_est,
                budget: acb.budget_tokens,
                candidate_pool: (acb.provenance.path == "retrieval")
                    .then_some(acb.provenance.candidate_pool_size),
                read_from: acb.provenance.read.from,
            }),
        ),
        Err(err) => {
            let outcome = Outcome::of_failure(err.failure());
            state
                .metrics
                .bundle(tenant, outcome, started.elapsed(), None);
        }
    }
    built
}

async fn build_unmeasured(
    state: &ApiState,
    caller: &Caller,
    body: Value,
) -> Result<Acb, CallError> {
    require_scope(caller, Scope::Read)?;
    let request: AcbRequest = parse_json("", body).map_err(CallError::invalid)?;
    build_for(state, caller, request).await
}

/// Searches for `caller` from a request body ([`crate::read::search`]):
/// the retrieval of a bundle, on the same path (standby included).
pub(crate) async fn search(
    state: &ApiState,
    caller: &Caller,
    body: Value,
) -> Result<SearchResults, CallError> {
    require_scope(caller, Scope::Read)?;
    let request: SearchRequest = parse_json("", body).map_err(CallError::invalid)?;
    let request = request.into_bundle_request().map_err(CallError::invalid)?;
    Ok(SearchResults::of(build_for(state, caller, request).await?))
}

async fn build_for(
    state: &ApiState,
    caller: &Caller,
    mut request: AcbRequest,
) -> Result<Acb, CallError> {
    if let Some(claimed) = &request.tenant_id
        && claimed != caller.tenant.as_str()
    {
        return Err(CallError::tenant_mismatch("tenant_id"));
    }
    // An agent's token builds that agent's bundles only.
    if let Some(agent) = &caller.agent {
        match &request.agent_id {
            Some(named) if named != agent => return Err(CallError::agent_mismatch("agent_id")),
            _ => request.agent_id = Some(agent.clone()),
        }
    }
    let tenant = caller.tenant.as_str();
    let Some(replica) = &state.replica else {
        return build_acb(&state.reader, tenant, request)
            .await
            .map_err(acb_error);
    };
    // What the bundle must find: the caller's own append (`after`), or for
    // strong consistency every projection up to the head as of now.
    let needs = if request.consistency == Consistency::Strong {
        let (head, _) = state.reader.positions(tenant).await?;
        Needs::Projected(head.max(request.after.unwrap_or(0)))
    } else {
        request.after.map_or(Needs::Nothing, Needs::Log)
    };
    let (standby, report) = replica.route(tenant, needs).await;
    if standby {
        let failure = match tokio::time::timeout(
            STANDBY_READ_TIMEOUT,
            build_acb(&replica.reader, tenant, request.clone()),
        )
        .await
        {
            Ok(Ok(mut acb)) => {
                acb.provenance.read = report;
                return Ok(acb);
            }
            Ok(Err(AcbError::Database(error))) => error.to_string(),
            Ok(Err(invalid)) => return Err(acb_error(invalid)),
            Err(_) => format!("no answer within {} ms", STANDBY_READ_TIMEOUT.as_millis()),
        };
        replica.failed_because(&failure);
        let mut acb = build_acb(&state.reader, tenant, request)
            .await
            .map_err(acb_error)?;
        acb.provenance.read = ReadReport {
            from: "primary",
            reason: Some(format!("the standby failed the bundle: {failure}")),
            ..report
        };
        return Ok(acb);
    }
    let mut acb = build_acb(&state.reader, tenant, request)
        .await
        .map_err(acb_error)?;
    acb.provenance.read = report;
    Ok(acb)
}

fn acb_error(err: AcbError) -> CallError {
    match err {
        AcbError::Invalid(field) => CallError::invalid(field),
        AcbError::Database(db) => CallError::from(db),
    }
}

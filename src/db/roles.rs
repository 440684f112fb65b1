//! The role the daemon logs in as: `memd_app`, least privilege.
//!
//! `memd migrate` runs as the database's owner (a superuser by default) and,
//! after the migrations, creates the role if needed and grants it exactly
//! what the daemon does: read everything; append to the log and the
//! checkpoints (INSERT only: no UPDATE, DELETE or TRUNCATE, and as a
//! non-owner it cannot alter a table or disable its append-only trigger);
//! keep the small mutable tables (tenant heads, tokens, policies, the
//! embedder choice); read and write the projections and the job queue. It is
//! no superuser, cannot create roles or databases, and is a member of no
//! other role, so it cannot switch to one. `CREATE` on the database lets it
//! make the drift check's shadow schemas (which it then owns and drops).
//!
//! The grants are statements, not a migration, so that they also cover the
//! job queue's tables (created after memd's migrations) and every table a
//! later migration adds; each `migrate` run applies them again.

use sqlx::PgPool;

/// The daemon's role.
pub const DAEMON_ROLE: &str = "memd_app";

/// Tables of `public` the daemon appends to and never changes.
const APPEND_ONLY: &[&str] = &["events", "checkpoints", "tenants", "artifacts"];
/// Tables of `public` the daemon also updates in place.
const MUTABLE: &[&str] = &[
    "tenant_heads",
    "api_tokens",
    "policies",
    "embedder_choice",
    "subject_keys",
];

/// Creates [`DAEMON_ROLE`] if it does not exist and grants it what the
/// daemon needs in this database.
pub async fn grant(pool: &PgPool) -> Result<(), sqlx::Error> {
    // Roles belong to the server, not the database: two migrations at once
    // (tests create many databases in parallel) may both try to create it.
    sqlx::query(
        "DO $$ BEGIN
             IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'memd_app') THEN
                 CREATE ROLE memd_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
             END IF;
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
         END $$",
    )
    .execute(pool)
    .await?;
    let statements = [
        "DO $$ BEGIN
             EXECUTE format('GRANT CONNECT, TEMPORARY, CREATE ON DATABASE %I TO memd_app', current_database());
         END $$"
            .to_owned(),
        "GRANT USAGE ON SCHEMA public, projections, apalis TO memd_app".to_owned(),
        "GRANT SELECT ON ALL TABLES IN SCHEMA public TO memd_app".to_owned(),
        format!("GRANT INSERT ON {} TO memd_app", APPEND_ONLY.join(", ")),
        format!("GRANT INSERT, UPDATE ON {} TO memd_app", MUTABLE.join(", ")),
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA projections, apalis TO memd_app"
            .to_owned(),
        "GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public, projections, apalis TO memd_app"
            .to_owned(),
    ];
    let mut tx = memd_projectors::transaction::begin(pool).await?;
    for statement in statements {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await
}

/// Whether this connection may change the schema (the database's owner, or
/// a superuser): who applies migrations and grants.
pub async fn owns_schema(pool: &PgPool) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT has_schema_privilege('public', 'CREATE')")
        .fetch_one(pool)
        .await
}

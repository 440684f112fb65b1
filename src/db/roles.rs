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
//! It owns the projection tables, so that a rebuild can vacuum them
//! ([`OWN_PROJECTIONS`]).
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
    sqlx::query!("DO $$ BEGIN
             IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'memd_app') THEN
                 CREATE ROLE memd_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
             END IF;
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
         END $$")
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
        OWN_PROJECTIONS.to_owned(),
    ];
    let mut tx = memd_projectors::transaction::begin(pool).await?;
    for statement in statements {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await
}

/// The daemon owns the projection tables (not the log, the checkpoints or
/// any other table of `public`): they are disposable, rebuilt from the log,
/// and only a table's owner may `VACUUM` it, which every rebuild does. To
/// hand a table over, a role that is no superuser must be a member of the
/// new owner: the migrating role joins `memd_app` (which gives `memd_app`
/// nothing: it stays a member of no role). Tables already the daemon's are
/// left alone, so a `migrate` beside running daemons takes no lock on them.
const OWN_PROJECTIONS: &str = "DO $$
DECLARE
    t record;
BEGIN
    IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
       AND NOT pg_has_role(current_user, 'memd_app', 'MEMBER') THEN
        EXECUTE format('GRANT memd_app TO %I', current_user);
    END IF;
    FOR t IN SELECT c.oid::regclass AS name
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = 'projections' AND c.relkind IN ('r', 'p')
                AND c.relowner <> 'memd_app'::regrole
    LOOP
        EXECUTE format('ALTER TABLE %s OWNER TO memd_app', t.name);
    END LOOP;
END $$";

/// Whether this connection may change the schema (the database's owner, or
/// a superuser): who applies migrations and grants.
pub async fn owns_schema(pool: &PgPool) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT has_schema_privilege('public', 'CREATE') AS "may!""#)
        .fetch_one(pool)
        .await
}

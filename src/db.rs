//! The PostgreSQL connection pool and the embedded migrations.

use std::time::Duration;

use anyhow::Context;

use sqlx::{
    Postgres,
    migrate::{MigrateDatabase, Migrator},
    postgres::{PgConnectOptions, PgPool, PgPoolOptions},
};

/// The schema in `migrations/`, compiled into the binary.
pub static MIGRATOR: Migrator = sqlx::migrate!();

/// Applies memd's migrations, then creates the background-job tables of
/// apalis (in the `apalis` schema, with their own migration history).
pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    MIGRATOR.run(pool).await.context("applying migrations")?;
    crate::admin::jobs::setup(pool)
        .await
        .context("creating the job queue tables")?;
    Ok(())
}

/// Connects a pool to an existing database.
pub async fn connect(
    options: PgConnectOptions,
    max_connections: u32,
) -> Result<PgPool, sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options)
        .await
}

/// Creates the database named in `url` when it does not exist yet, so a first
/// `memd serve` works on a bare PostgreSQL server.
pub async fn create_database_if_missing(url: &str) -> Result<(), sqlx::Error> {
    if !Postgres::database_exists(url).await? {
        tracing::info!("creating the database");
        Postgres::create_database(url).await?;
    }
    Ok(())
}

//! The schema invariants a tenant-sharded deployment relies on (README,
//! "Sharding by tenant"): with `tenant_id` as the distribution column, a
//! distributed PostgreSQL such as Citus needs every primary key and unique
//! index of a tenant's table to include it, and no foreign key to join two
//! tenants' rows. Checked on the migrated catalog, so a migration that
//! breaks them fails here. A unique key counts its key columns only: an
//! `INCLUDE (tenant_id)` payload does not make it a tenant's key.

use sqlx::PgPool;

/// Tables read before the tenant is known, copied to every node: the
/// tenants themselves and the tokens that name them.
const REFERENCE_TABLES: [&str; 2] = ["public.tenants", "public.api_tokens"];
/// Kept on the coordinator alone.
const LOCAL_TABLES: [&str; 1] = ["public._sqlx_migrations"];

#[sqlx::test]
async fn every_other_table_is_a_tenant_table(pool: PgPool) {
    let without_tenant: Vec<String> = sqlx::query_scalar(
        "SELECT format('%s.%s', n.nspname, c.relname)
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname IN ('public', 'projections') AND c.relkind IN ('r', 'p')
            AND NOT EXISTS (SELECT 1 FROM pg_attribute a
                             WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped)
          ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let known: Vec<&str> = REFERENCE_TABLES
        .iter()
        .chain(&LOCAL_TABLES)
        .copied()
        .collect();
    let unplaced: Vec<&String> = without_tenant
        .iter()
        .filter(|t| !known.contains(&t.as_str()))
        .collect();
    assert!(
        unplaced.is_empty(),
        "tables without tenant_id that are neither reference nor local tables: {unplaced:?}"
    );
}

#[sqlx::test]
async fn every_unique_key_of_a_tenant_table_includes_tenant_id(pool: PgPool) {
    let offending: Vec<String> = sqlx::query_scalar(
        "SELECT i.indexrelid::regclass::text
           FROM pg_index i
           JOIN pg_class c ON c.oid = i.indrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname IN ('public', 'projections') AND i.indisunique
            AND NOT (format('%s.%s', n.nspname, c.relname) = ANY ($1))
            AND NOT EXISTS (SELECT 1 FROM pg_attribute a
                             WHERE a.attrelid = c.oid AND a.attname = 'tenant_id'
                               AND a.attnum IN (SELECT k FROM unnest(i.indkey) WITH ORDINALITY AS u (k, n)
                                                  WHERE n <= i.indnkeyatts))
          ORDER BY 1",
    )
    .bind(
        REFERENCE_TABLES
            .iter()
            .chain(&LOCAL_TABLES)
            .map(|t| t.to_string())
            .collect::<Vec<_>>(),
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        offending.is_empty(),
        "unique keys without tenant_id: {offending:?}"
    );
}

#[sqlx::test]
async fn no_foreign_key_joins_two_tenants_rows(pool: PgPool) {
    // A foreign key may point at a reference table, or carry tenant_id on
    // both sides (then both rows are the same tenant's).
    let crossing: Vec<String> = sqlx::query_scalar(
        "SELECT f.conname::text
           FROM pg_constraint f
           JOIN pg_class t ON t.oid = f.confrelid
           JOIN pg_namespace n ON n.oid = t.relnamespace
          WHERE f.contype = 'f'
            AND NOT (format('%s.%s', n.nspname, t.relname) = ANY ($1))
            AND NOT EXISTS (
                  SELECT 1 FROM unnest(f.conkey, f.confkey) AS k (own, other)
                    JOIN pg_attribute a ON a.attrelid = f.conrelid AND a.attnum = k.own
                    JOIN pg_attribute b ON b.attrelid = f.confrelid AND b.attnum = k.other
                   WHERE a.attname = 'tenant_id' AND b.attname = 'tenant_id')
          ORDER BY 1",
    )
    .bind(REFERENCE_TABLES.map(str::to_owned).to_vec())
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        crossing.is_empty(),
        "foreign keys across tenants: {crossing:?}"
    );
}

#[sqlx::test]
async fn the_same_event_id_in_two_tenants_is_two_events(pool: PgPool) {
    // The uniqueness that remains is the tenant's own: what an event id
    // names is looked up within a tenant, never across them.
    let unique_keys: Vec<String> = sqlx::query_scalar(
        "SELECT pg_get_indexdef(indexrelid) FROM pg_index
          WHERE indrelid IN ('public.events'::regclass, 'public.artifacts'::regclass)
            AND indisunique ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        unique_keys.iter().any(
            |k| k.contains("events_tenant_event_id_key") && k.contains("(tenant_id, event_id)")
        ),
        "{unique_keys:?}"
    );
    assert!(
        unique_keys
            .iter()
            .any(|k| k.contains("artifacts_pkey") && k.contains("(tenant_id, artifact_id)")),
        "{unique_keys:?}"
    );
}

#[sqlx::test]
async fn a_tenants_search_reads_one_partition_of_the_chunks(pool: PgPool) {
    // The chunks are partitioned by hash(tenant_id) (migration 23): one
    // full-text index over every tenant's chunks made a rare term's matches
    // in all tenants a cost of each tenant's bundles (README, "10 million
    // events").
    let (strategy, column): (String, String) = sqlx::query_as(
        "SELECT p.partstrat::text, a.attname::text
           FROM pg_partitioned_table p
           JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]
          WHERE p.partrelid = 'projections.chunks'::regclass AND p.partnatts = 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((strategy.as_str(), column.as_str()), ("h", "tenant_id"));
    let partitions: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_partition_tree('projections.chunks') t
           JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(partitions.len() >= 8, "{partitions:?}");
    let search = "SELECT chunk_id FROM projections.chunks c
                   WHERE c.tenant_id = $1 AND c.tsv @@ 'invoice'::tsquery
                   ORDER BY c.seq DESC, c.part DESC LIMIT 50";
    let mut conn = pool.acquire().await.unwrap();
    let mut plans = Vec::new();
    // Planned for its tenant, and as a prepared statement's generic plan
    // (what PostgreSQL may keep after five runs), which prunes when it starts.
    for mode in ["force_custom_plan", "force_generic_plan"] {
        for statement in [
            format!("SET plan_cache_mode = {mode}"),
            format!("PREPARE search_{mode} (text) AS {search}"),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(statement))
                .execute(&mut *conn)
                .await
                .unwrap();
        }
        let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE search_{mode} ('acme')"
        )))
        .fetch_all(&mut *conn)
        .await
        .unwrap();
        plans.push(plan.join("\n"));
    }
    for plan in &plans {
        let read = partitions
            .iter()
            .filter(|partition| plan.contains(&format!("on {partition}")))
            .count();
        assert_eq!(read, 1, "{plan}");
    }
}

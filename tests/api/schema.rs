//! The schema invariants a tenant-sharded deployment relies on (docs/scaling.md,
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
    // in all tenants a cost of each tenant's bundles (docs/scaling.md, "10 million
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

/// The log refuses, by itself, values outside its rules (whatever wrote
/// them: a bug, a hand-written INSERT): since 20261204000026 the rules are
/// domains' constraints rather than the table's CHECKs, and must still
/// refuse every one of these, and accept a row that keeps them.
#[sqlx::test]
async fn the_log_refuses_values_outside_its_rules(pool: PgPool) {
    sqlx::query("INSERT INTO tenants (tenant_id) VALUES ('t')")
        .execute(&pool)
        .await
        .unwrap();
    let insert = |seq: i64, column: &str, value: &str| {
        let mut values = std::collections::BTreeMap::from([
            ("seq", seq.to_string()),
            ("channel", "'private'".to_owned()),
            ("actor_type", "'agent'".to_owned()),
            ("kind", "'message'".to_owned()),
            ("sensitivity", "'none'".to_owned()),
            ("prev_hash", "decode(repeat('ab', 32), 'hex')".to_owned()),
            ("hash", "decode(repeat('cd', 32), 'hex')".to_owned()),
            ("agent_id", "NULL".to_owned()),
            ("subject_id", "NULL".to_owned()),
        ]);
        values.insert(column, value.to_owned());
        let v = |c: &str| values[c].clone();
        format!(
            "INSERT INTO events (tenant_id, seq, event_id, created_at, ts, session_id, channel,
                 actor_type, actor_id, kind, sensitivity, tags, content, refs, prev_hash, hash,
                 agent_id, subject_id)
             VALUES ('t', {}, 'e{seq}', now(), now(), 's', {}, {}, 'a', {}, {}, '{{}}', '{{}}', '{{}}',
                 {}, {}, {}, {})",
            v("seq"),
            v("channel"),
            v("actor_type"),
            v("kind"),
            v("sensitivity"),
            v("prev_hash"),
            v("hash"),
            v("agent_id"),
            v("subject_id"),
        )
    };
    let refused = [
        ("seq", "0"),
        ("channel", "'broadcast'"),
        ("actor_type", "'robot'"),
        ("kind", "'gossip'"),
        ("sensitivity", "'medium'"),
        ("prev_hash", "decode(repeat('ab', 31), 'hex')"),
        ("hash", "decode(repeat('cd', 33), 'hex')"),
        ("agent_id", "''"),
        ("subject_id", "repeat('x', 257)"),
    ];
    for (column, value) in refused {
        let err = sqlx::raw_sql(sqlx::AssertSqlSafe(insert(1, column, value)))
            .execute(&pool)
            .await
            .expect_err(column);
        let code = err.as_database_error().and_then(|e| e.code());
        assert_eq!(code.as_deref(), Some("23514"), "{column} = {value}: {err}");
    }
    sqlx::raw_sql(sqlx::AssertSqlSafe(insert(1, "agent_id", "'agent-1'")))
        .execute(&pool)
        .await
        .expect("a row within the rules");
}

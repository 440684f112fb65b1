//! Drift check: rebuild into a shadow schema and diff it, row by row,
//! against the live projections.
//!
//! All of it runs in one REPEATABLE READ transaction that is rolled back at
//! the end: the live cursors, the log and the live rows are read from one
//! snapshot, so the shadow is rebuilt to exactly the seq each live cursor
//! stood at and live workers never need to pause.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use sqlx::{PgConnection, PgPool, Row};

use crate::{
    engine::{Engine, ProjectError, Wait},
    projector::Table,
    rebuild::{Progress, replay},
    schema::Schema,
};

/// Rows listed per table and side; the counts cover all of them.
const ROWS_SHOWN: i64 = 1000;

#[derive(Debug, Clone, Serialize)]
pub struct DriftReport {
    pub tenants: Vec<String>,
    pub tables: Vec<TableDrift>,
}

impl DriftReport {
    pub fn drifted(&self) -> bool {
        self.tables.iter().any(|t| t.differing_rows > 0)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct TableDrift {
    pub table: String,
    pub live_rows: i64,
    pub rebuilt_rows: i64,
    /// Rows present on one side only or differing in some column.
    pub differing_rows: i64,
    pub rows: Vec<RowDrift>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "drift", rename_all = "snake_case")]
pub enum RowDrift {
    /// The rebuild produced it; the live table lacks it.
    MissingInLive { key: Value, rebuilt: Value },
    /// The live table has it; the rebuild did not produce it.
    ExtraInLive { key: Value, live: Value },
    /// Both have the key; these columns differ.
    Changed {
        key: Value,
        columns: BTreeMap<String, ColumnDrift>,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct ColumnDrift {
    pub live: Value,
    pub rebuilt: Value,
}

pub async fn drift_check(
    pool: &PgPool,
    engine: &Engine,
    tenant: Option<&str>,
    progress: &mut (dyn FnMut(Progress<'_>) + Send),
) -> Result<DriftReport, ProjectError> {
    let mut tx = crate::transaction::begin(pool).await?;
    sqlx::query!("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *tx)
        .await?;
    let (live, shadow) = (Schema::live(), Schema::shadow());
    let tables: Vec<Table> = engine
        .projectors()
        .iter()
        .flat_map(|p| p.tables().iter().copied())
        .collect();
    create_shadow(&mut tx, &live, &shadow, &tables).await?;

    let names: Vec<&str> = engine.projectors().iter().map(|p| p.name()).collect();
    let live_cursors: Vec<(String, String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT tenant_id, projector, seq FROM {}.cursors
          WHERE projector = ANY ($1) AND ($2::text IS NULL OR tenant_id = $2)
          ORDER BY tenant_id, projector",
        live.name()
    )))
    .bind(&names)
    .bind(tenant)
    .fetch_all(&mut *tx)
    .await?;
    let mut tenants: Vec<String> = live_cursors.iter().map(|c| c.0.clone()).collect();
    tenants.dedup();

    // Each tenant replayed into the shadow up to where its live cursors
    // stand, so a projection that lags is not mistaken for drift.
    shadow.enter(&mut tx).await?;
    for tenant in &tenants {
        let mut cursors = engine.lock_cursors(&mut tx, tenant, Wait::Block).await?;
        for cursor in &mut cursors {
            cursor.until = live_cursors
                .iter()
                .find(|(t, p, _)| t == tenant && p == cursor.projector.name())
                .map_or(0, |c| c.2);
        }
        replay(pool, &mut tx, engine, tenant, &mut cursors, progress).await?;
    }

    let mut report = DriftReport {
        tenants,
        tables: Vec::new(),
    };
    for table in &tables {
        report
            .tables
            .push(compare(&mut tx, &live, &shadow, table, tenant).await?);
    }
    tx.rollback().await?;
    Ok(report)
}

/// The shadow schema: an empty copy of every projection table and of the
/// cursors, inside the check's transaction (rolled back at its end).
async fn create_shadow(
    tx: &mut PgConnection,
    live: &Schema,
    shadow: &Schema,
    tables: &[Table],
) -> Result<(), sqlx::Error> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE SCHEMA {}",
        shadow.name()
    )))
    .execute(&mut *tx)
    .await?;
    for table in tables.iter().map(|t| t.name).chain(["cursors"]) {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE {shadow}.{table} (LIKE {live}.{table} INCLUDING ALL)",
            shadow = shadow.name(),
            live = live.name(),
        )))
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// One table, live against rebuilt (of `tenant`, or of all): row counts,
/// and the first rows found on one side only, paired by key.
async fn compare(
    tx: &mut PgConnection,
    live: &Schema,
    shadow: &Schema,
    table: &Table,
    tenant: Option<&str>,
) -> Result<TableDrift, sqlx::Error> {
    let live_table = format!("{}.{}", live.name(), table.name);
    let shadow_table = format!("{}.{}", shadow.name(), table.name);
    let filter = "($1::text IS NULL OR tenant_id = $1)";
    let counts = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT (SELECT count(*) FROM {live_table} WHERE {filter}) AS live,
                (SELECT count(*) FROM {shadow_table} WHERE {filter}) AS rebuilt"
    )))
    .bind(tenant)
    .fetch_one(&mut *tx)
    .await?;
    let differing = sqlx::query(sqlx::AssertSqlSafe(format!(
        "(SELECT 'live' AS side, to_jsonb(d) AS row FROM
             (SELECT * FROM {live_table} WHERE {filter}
              EXCEPT ALL SELECT * FROM {shadow_table} WHERE {filter}) d LIMIT {ROWS_SHOWN})
         UNION ALL
         (SELECT 'rebuilt', to_jsonb(d) FROM
             (SELECT * FROM {shadow_table} WHERE {filter}
              EXCEPT ALL SELECT * FROM {live_table} WHERE {filter}) d LIMIT {ROWS_SHOWN})"
    )))
    .bind(tenant)
    .fetch_all(&mut *tx)
    .await?;
    let mut live_rows = BTreeMap::new();
    let mut rebuilt_rows = BTreeMap::new();
    for row in differing {
        let side: String = row.get("side");
        let value: Value = row.get("row");
        let key = Value::Array(table.key.iter().map(|k| value[*k].clone()).collect());
        let key = key.to_string();
        if side == "live" {
            live_rows.insert(key, value);
        } else {
            rebuilt_rows.insert(key, value);
        }
    }
    let rows = pair(table.key, live_rows, rebuilt_rows);
    Ok(TableDrift {
        table: table.name.to_owned(),
        live_rows: counts.get("live"),
        rebuilt_rows: counts.get("rebuilt"),
        differing_rows: rows.len() as i64,
        rows,
    })
}

fn pair(
    key_columns: &[&str],
    mut live: BTreeMap<String, Value>,
    rebuilt: BTreeMap<String, Value>,
) -> Vec<RowDrift> {
    let key_of = |row: &Value| Value::Array(key_columns.iter().map(|k| row[*k].clone()).collect());
    let mut rows = Vec::new();
    for (key, rebuilt) in rebuilt {
        match live.remove(&key) {
            Some(live) => {
                let mut columns = BTreeMap::new();
                if let (Value::Object(l), Value::Object(r)) = (&live, &rebuilt) {
                    for (column, live_value) in l {
                        let rebuilt_value = r.get(column).cloned().unwrap_or(Value::Null);
                        if *live_value != rebuilt_value {
                            columns.insert(
                                column.clone(),
                                ColumnDrift {
                                    live: live_value.clone(),
                                    rebuilt: rebuilt_value,
                                },
                            );
                        }
                    }
                }
                rows.push(RowDrift::Changed {
                    key: key_of(&live),
                    columns,
                });
            }
            None => rows.push(RowDrift::MissingInLive {
                key: key_of(&rebuilt),
                rebuilt,
            }),
        }
    }
    for (_, live) in live {
        rows.push(RowDrift::ExtraInLive {
            key: key_of(&live),
            live,
        });
    }
    rows
}

/// A human-readable report: one line per table, then the differing rows.
pub fn render(report: &DriftReport) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "drift check over {} tenant(s): {}\n",
        report.tenants.len(),
        if report.drifted() {
            "DRIFT FOUND"
        } else {
            "no drift"
        }
    ));
    for table in &report.tables {
        out.push_str(&format!(
            "  {:<10} live {:>8} rows, rebuilt {:>8} rows, differing {}\n",
            table.table, table.live_rows, table.rebuilt_rows, table.differing_rows
        ));
    }
    for table in &report.tables {
        for row in &table.rows {
            match row {
                RowDrift::MissingInLive { key, .. } => {
                    out.push_str(&format!("- {} {key}: missing in live\n", table.table));
                }
                RowDrift::ExtraInLive { key, .. } => {
                    out.push_str(&format!(
                        "+ {} {key}: in live, not produced by the log\n",
                        table.table
                    ));
                }
                RowDrift::Changed { key, columns } => {
                    out.push_str(&format!("~ {} {key}:\n", table.table));
                    for (column, drift) in columns {
                        out.push_str(&format!(
                            "    {column}: live {} != rebuilt {}\n",
                            shorten(&drift.live),
                            shorten(&drift.rebuilt)
                        ));
                    }
                }
            }
        }
    }
    out
}

fn shorten(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 120 {
        let head: String = text.chars().take(117).collect();
        format!("{head}...")
    } else {
        text
    }
}

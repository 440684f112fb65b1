//! `memd-bench transfer`: `memd export` and `memd import` of one tenant's
//! chat history, timed, with the file's size; the import goes into a second
//! scratch database and is checked to verify to the exporter's head.

use std::{path::Path, time::Instant};

use super::{
    harness::{environment, report_header, write_report},
    histories::{History, load},
};
use memd::{
    admin::transfer,
    db::{self, ScratchDatabase},
    domain::tenant::TenantId,
    tenants,
};

const TENANT: &str = "transfer-bench";

struct Figures {
    events: u64,
    export_seconds: f64,
    bytes: u64,
    import_seconds: f64,
    verify_seconds: f64,
    head_ok: bool,
}

pub async fn run(database_url: &str, events: u64, out: &Path) -> anyhow::Result<()> {
    let source = ScratchDatabase::create(database_url, "memd_bench").await?;
    let target = ScratchDatabase::create(database_url, "memd_bench").await?;
    let result = measure(&source, &target, events).await;
    source.drop_now().await?;
    target.drop_now().await?;
    let (figures, environment) = result?;
    let rate = |seconds: f64| figures.events as f64 / seconds.max(1e-9);
    super::charts::bars(
        &super::charts::path_beside(out, ""),
        &format!(
            "memd export and import, {} events",
            super::charts::number(figures.events as f64)
        ),
        "events/s",
        &["export".into(), "import".into(), "verify (imported)".into()],
        &[(
            "events/s".into(),
            vec![
                rate(figures.export_seconds),
                rate(figures.import_seconds),
                rate(figures.verify_seconds),
            ],
        )],
    )?;
    write_report(out, &render(&figures, &environment))
}

async fn measure(
    source: &ScratchDatabase,
    target: &ScratchDatabase,
    events: u64,
) -> anyhow::Result<(Figures, String)> {
    let from = db::connect(source.options.clone(), 8).await?;
    db::migrate(&from).await?;
    let environment = environment(&from).await?;
    let tenant = TenantId::parse(TENANT).expect("valid tenant id");
    tenants::create_tenant(&from, &tenant, memd::domain::tenant::Scope::Admin).await?;
    load(&from, &tenant, History::Chat, 0, events).await?;
    let file =
        std::env::temp_dir().join(format!("memd-bench-{}.ndjson.gz", ulid::Ulid::generate()));
    let started = Instant::now();
    let exported = transfer::export(&from, &tenant, &file, &mut |_| {}).await?;
    let export_seconds = started.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(&file)?.len();
    let to = db::connect(target.options.clone(), 8).await?;
    db::migrate(&to).await?;
    let started = Instant::now();
    let imported = transfer::import(&to, &file, &mut |_| {}).await;
    let import_seconds = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&file);
    let imported = imported?;
    let started = Instant::now();
    let report = memd::audit::verify_chains(&to, Some(&tenant)).await?;
    let verify_seconds = started.elapsed().as_secs_f64();
    let head_ok = report[0].broken.is_none()
        && report[0].head_hash == exported.head_hash
        && imported.head_hash == exported.head_hash;
    from.close().await;
    to.close().await;
    eprintln!(
        "export {export_seconds:.1} s, import {import_seconds:.1} s, {bytes} bytes, verify {}",
        if head_ok { "ok" } else { "FAILED" }
    );
    Ok((
        Figures {
            events,
            export_seconds,
            bytes,
            import_seconds,
            verify_seconds,
            head_ok,
        },
        environment,
    ))
}

fn render(f: &Figures, environment: &str) -> String {
    let rate = |seconds: f64| f.events as f64 / seconds.max(1e-9);
    format!(
        "{}\nOne tenant's chat history ({} events, as `memd-bench acb` loads it) exported with `memd export` to \
         gzip NDJSON, then imported with `memd import` into a second scratch database on the same server (the \
         whole file checked first, then stored in transactions of {} events), then `memd verify` on the imported \
         tenant. No daemon runs: the import's projection is not part of it.\n\n\
         | events | export s | export events/s | file MiB | bytes/event | import s | import events/s | verify s | verify head = exporter's |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---|\n\
         | {} | {:.1} | {:.0} | {:.1} | {:.0} | {:.1} | {:.0} | {:.1} | {} |\n",
        report_header("transfer", environment),
        f.events,
        transfer::BATCH,
        f.events,
        f.export_seconds,
        rate(f.export_seconds),
        f.bytes as f64 / 1024.0 / 1024.0,
        f.bytes as f64 / f.events.max(1) as f64,
        f.import_seconds,
        rate(f.import_seconds),
        f.verify_seconds,
        if f.head_ok { "yes" } else { "NO" },
    )
}

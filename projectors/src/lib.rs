//! memd's derived side: the projector runtime and the read-model projectors
//! (chunks, decisions, tasks, views, summary conflicts).
//!
//! Not built yet (issue 3). The event log it will read is in `../migrations`:
//! per-tenant, gap-free `seq` on `events`, and a `pg_notify('memd_events',
//! '<tenant>:<head seq>')` on every append commit.

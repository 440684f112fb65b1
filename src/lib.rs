//! memd: a memory daemon for AI agents.
//!
//! The crate is laid out as the architecture is (see `docs/architecture.md`):
//!
//! - [`domain`]: parsed, validated types (events, redaction, tool results, the
//!   hash chain). No I/O.
//! - [`write`]: the append path, the only writer of the event log.
//! - [`read`]: Active Context Bundles, built from projections and the log.
//! - [`audit`]: hash-chain verification of the log.
//! - [`api`]: the HTTP interface, thin handlers over the above.
//! - [`mcp`]: the same calls as MCP tools on `/mcp` (Streamable HTTP).
//! - [`tenants`]: tenants and bearer tokens.
//! - [`metrics`]: `GET /metrics` for Prometheus, on a listener of its own.
//! - [`startup`], [`db`], [`telemetry`], [`config`] (flags, environment and
//!   a configuration file): wiring; [`invalidation`]: caches
//!   other processes invalidate by notification.
//! - [`admin`]: operator commands over the projections (views export and
//!   import, rebuild progress).

pub mod admin;
pub mod api;
pub mod audit;
pub mod calls;
pub mod config;
pub mod console;
pub mod db;
pub mod domain;
pub mod drill;
pub mod invalidation;
pub mod mcp;
pub mod metrics;
pub mod read;
pub mod scenario;
pub mod serve;
pub mod startup;
pub mod telemetry;
pub mod tenants;
pub mod write;

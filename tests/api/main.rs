//! Integration tests: each runs the real daemon on its own fresh database
//! (`#[sqlx::test]`) and talks to it over HTTP, as agents do.

mod acb;
mod admin_jobs;
mod agents;
mod append_only;
mod browser;
mod chain;
mod checkpoints;
mod concurrency;
mod config;
mod console;
mod drills;
mod events;
mod handoffs;
mod helpers;
mod log;
mod mcp;
mod metrics;
mod openapi;
mod policy;
mod projections;
mod projector_runtime;
mod proofs;
mod rebuild;
mod replica;
mod roles;
mod scenarios;
mod schema;
mod sealing;
mod secrets;
mod semantic;
mod shutdown;
mod tenants;
mod tool_results;
mod transfer;
mod workers;

// A real memd daemon for the client's tests: a fresh database on the
// PostgreSQL of DATABASE_URL, a tenant, and `memd serve` on a free port
// (the binary the Rust build made: MEMD_BIN, default target/debug/memd).

import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");

export interface Daemon {
  url: string;
  token: string;
  databaseUrl: string;
  /** Runs `memd <args>` against the daemon's database; its stdout. */
  cli(...args: string[]): string;
  stop(): Promise<void>;
}

function memd(): string {
  const binary = process.env.MEMD_BIN ?? resolve(REPO, "target/debug/memd");
  if (!existsSync(binary)) {
    throw new Error(`no memd binary at ${binary}: run \`cargo build --bin memd\` (or set MEMD_BIN)`);
  }
  return binary;
}

function databaseUrl(name: string): string {
  const server = new URL(process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres");
  server.pathname = `/${name}`;
  return server.toString();
}

async function freePort(): Promise<number> {
  return new Promise((done, failed) => {
    const server = createServer();
    server.once("error", failed);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => done(port));
    });
  });
}

async function ready(url: string, process: ChildProcess): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if (process.exitCode !== null) throw new Error(`memd serve exited with ${process.exitCode}`);
    try {
      if ((await fetch(`${url}/readyz`)).status === 200) return;
    } catch {
      // Not listening yet.
    }
    await new Promise((wake) => setTimeout(wake, 200));
  }
  process.kill("SIGKILL");
  throw new Error("memd serve did not become ready in 60 s");
}

/** Starts a daemon on a fresh database, with one tenant (`acme`). */
export async function startDaemon(...flags: string[]): Promise<Daemon> {
  const name = `memd_nodetest_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
  const database = databaseUrl(name);
  const cli = (...args: string[]) =>
    execFileSync(memd(), ["--database-url", database, ...args], {
      encoding: "utf8",
      timeout: 120_000,
      stdio: ["ignore", "pipe", "pipe"],
    }).trim();
  cli("migrate");
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const server = spawn(
    memd(),
    ["--database-url", database, "serve", "--no-migrate", "--listen", `127.0.0.1:${port}`,
     "--embedder", "hashed", ...flags],
    { stdio: "ignore" },
  );
  await ready(url, server);
  const token = cli("tenant", "create", "acme");
  return {
    url,
    token,
    databaseUrl: database,
    cli,
    async stop() {
      const exited = new Promise((done) => server.once("exit", done));
      server.kill("SIGTERM");
      await Promise.race([exited, new Promise((wake) => setTimeout(wake, 20_000))]);
      if (server.exitCode === null) server.kill("SIGKILL");
      execFileSync("psql", [databaseUrl("postgres"), "-qc", `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`], {
        stdio: "ignore",
        timeout: 60_000,
      });
    },
  };
}

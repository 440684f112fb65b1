"""A real memd daemon for the client's tests: a fresh database on the
PostgreSQL of DATABASE_URL, a tenant, and `memd serve` on a free port
(the binary the Rust build made: MEMD_BIN, default target/debug/memd)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]


@dataclass
class Daemon:
    url: str
    token: str
    database_url: str


def _memd() -> str:
    binary = Path(os.environ.get("MEMD_BIN", REPO / "target" / "debug" / "memd"))
    if not binary.exists():
        pytest.exit(f"no memd binary at {binary}: run `cargo build --bin memd` (or set MEMD_BIN)")
    return str(binary)


def _database_url(name: str) -> str:
    server = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    parts = urlsplit(server)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(database_url: str, *args: str) -> str:
    done = subprocess.run(
        [_memd(), "--database-url", database_url, *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout.strip()


def _serve(database_url: str, *flags: str) -> "tuple[subprocess.Popen[bytes], str]":
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [_memd(), "--database-url", database_url, "serve", "--no-migrate",
         "--listen", f"127.0.0.1:{port}", "--embedder", "hashed", *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        if process.poll() is not None:
            raise RuntimeError(f"memd serve exited with {process.returncode}")
        time.sleep(0.2)
    process.kill()
    raise RuntimeError("memd serve did not become ready in 60 s")


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    name = f"memd_pytest_{uuid.uuid4().hex[:12]}"
    url = _database_url(name)
    _cli(url, "migrate")
    yield url
    subprocess.run(
        ["psql", _database_url("postgres"), "-qc", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"],
        capture_output=True,
        timeout=60,
    )


@pytest.fixture(scope="session")
def _daemons(database_url: str) -> Iterator[List["subprocess.Popen[bytes]"]]:
    started: List["subprocess.Popen[bytes]"] = []
    yield started
    for process in started:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="session")
def daemon(database_url: str, _daemons: List["subprocess.Popen[bytes]"]) -> Daemon:
    process, url = _serve(database_url)
    _daemons.append(process)
    return Daemon(url, _cli(database_url, "tenant", "create", "acme"), database_url)


@pytest.fixture(scope="session")
def strict_daemon(database_url: str, _daemons: List["subprocess.Popen[bytes]"]) -> Daemon:
    """A second daemon on the same database that lets a tenant send one
    request a second (bursts of two), for the rate-limit tests."""
    process, url = _serve(database_url, "--rate-limit-rps", "1")
    _daemons.append(process)
    return Daemon(url, _cli(database_url, "tenant", "create", "slow"), database_url)


@pytest.fixture
def session_id() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"

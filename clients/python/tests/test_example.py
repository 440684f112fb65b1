"""`ops/examples/agent_loop.py`, the example agent loop built on this
package, run as a user runs it against the real daemon."""

import subprocess
import sys

from .conftest import REPO, Daemon


def test_the_example_agent_loop_records_turns_and_builds_bundles(
    daemon: Daemon, session_id: str
) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "ops" / "examples" / "agent_loop.py")],
        input="Our deploys go out on Tuesdays.\nwhen do deploys go out?\n",
        env={"MEMD_URL": daemon.url, "MEMD_TOKEN": daemon.token, "MEMD_SESSION": session_id,
             "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    replies = [line for line in done.stdout.splitlines() if line.startswith("(no model wired in)")]
    assert len(replies) == 2, done.stdout
    assert "retrieval path" in done.stdout
    from memd import Client

    with Client(daemon.url, daemon.token) as client:
        stored = client.events(session_id=session_id)["events"]
    assert [e["actor_type"] for e in stored] == ["human", "agent", "human", "agent"]

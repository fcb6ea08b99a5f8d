"""Several hosts, really: two server instances and one PostgreSQL server in three network namespaces.

    sudo python3 code/scripts/multihost.py          (needs root, `ip netns`, psycopg and the PostgreSQL binaries)

Topology (all addresses private to namespaces this script creates and deletes):

    host-a 10.231.1.2 --veth-- 10.231.1.1 [pg] 10.231.2.1 --veth-- 10.231.2.2 host-b

PostgreSQL runs in a throwaway cluster in the `pg` namespace, listening on its two veth
addresses only, with scram-sha-256 for the 10.231.0.0/16 subnet and nothing else over TCP.
Each host runs `serve.py --http` on its own loopback, over that database, with one
shared NOTES_MCP_SECRET, and an agent (this script, `agent` mode) that is that host's client.

It then shows: a form asked on host A and accepted on host B; one confirmation raced from
both hosts RACE_ROUNDS times (exactly one deletion each); and host A cut off (its veth taken
down) while its transaction holds a deletion it has not committed: nothing half-done, the
confirmation completes exactly once on host B and A's late commit fails. Every namespace,
process and folder is removed on every exit. Exit status: 0 all shown, 1 a check failed,
2 this machine cannot run it (said in one line).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import queue
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

# A script beside the server, not part of it: the server's modules are one folder up.
SCRIPTS = os.path.dirname(os.path.abspath(__file__))
CODE = os.path.dirname(SCRIPTS)
sys.path.insert(0, CODE)
sys.path.insert(0, SCRIPTS)

import main  # noqa: E402

RACE_ROUNDS = 50
SUBNET = "10.231.0.0/16"
PG_A, HOST_A, PG_B, HOST_B = "10.231.1.1", "10.231.1.2", "10.231.2.1", "10.231.2.2"
GUARD_SECONDS = 60.0  # a step that takes longer has hung: fail, clean up
CUTOFF_RETRIES = 20  # host B's bounded retries while host A's dead session still holds its locks
IDLE_TX_TIMEOUT_MS = 3000  # the server aborts host A's silent transaction after this (a store argument)
DB_USER, DB_NAME = "notes", "notes"
_URL_RE = re.compile(r"listening on http://127\.0\.0\.1:(\d+)/mcp")


def say(line: str) -> None:
    print(line, flush=True)


def run(*args: str, ns: str | None = None, user: str | None = None) -> None:
    """Run a command (in namespace `ns`, as `user`); raise with its output on failure."""
    prefix = (["ip", "netns", "exec", ns] if ns else []) + (["runuser", "-u", user, "--"] if user else [])
    done = subprocess.run([*prefix, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=GUARD_SECONDS)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])} failed: {done.stdout.decode(errors='replace')[-500:]}")


def unavailable() -> str | None:
    """One line saying why this machine cannot run the demonstration, or None."""
    if os.geteuid() != 0:
        return "multihost: needs root (network namespaces); nothing was done"
    if shutil.which("ip") is None or subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
        return "multihost: `ip netns` is not available here; nothing was done"
    if shutil.which("runuser") is None:
        return "multihost: runuser is missing (PostgreSQL must run as a non-root user); nothing was done"
    import postgres_cluster  # psycopg and the server binaries, checked in one place

    reason = postgres_cluster.missing()
    return f"multihost: {reason}; nothing was done" if reason is not None else None


class Agent:
    """This script in `agent` mode inside a host namespace: arm a command, release it with "go", read one line."""

    def __init__(self, ns: str, port: int, env: dict[str, str], procs: list[subprocess.Popen[str]]) -> None:
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, __file__, "agent", str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        procs.append(self.proc)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def line(self) -> str:
        line = self.lines.get(timeout=GUARD_SECONDS)
        if line is None:
            raise RuntimeError("agent ended")
        return line

    def arm(self, command: dict[str, Any]) -> None:
        self.send(json.dumps(command))
        if self.line() != "armed":
            raise RuntimeError("agent did not arm")

    def do(self, command: dict[str, Any]) -> dict[str, Any]:
        self.arm(command)
        self.send("go")
        return json.loads(self.line())


def request(message_id: int, title: str, state: str | None = None, note_id: str | None = None) -> dict[str, Any]:
    """A notes_delete tools/call: the first call, or (with state) the accepted retry."""
    params: dict[str, Any] = {
        "name": main.TOOL_NAME,
        "arguments": {"workspaceUri": main.LESSON_WORKSPACE, "title": title},
        "_meta": main.request_meta({"elicitation": {"form": {}}}),
    }
    if state is not None:
        params["requestState"] = state
        params["inputResponses"] = {
            main.INPUT_KEY: {"action": "accept", "content": {"note_id": note_id, "confirm": True}}
        }
    return {"jsonrpc": "2.0", "id": message_id, "method": "tools/call", "params": params}


def claims_of(state: str) -> dict[str, Any]:
    """The signed (not encrypted) claims of a requestState."""
    payload = state.split(".")[2]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def demonstrate() -> int:
    """Build the three hosts, run the three scenarios, report; the caller cleans up."""
    tag = f"{os.getpid() % 100000}"
    ns = {"pg": f"nmcp{tag}pg", "a": f"nmcp{tag}a", "b": f"nmcp{tag}b"}
    procs: list[subprocess.Popen[str]] = []
    folder = tempfile.mkdtemp(prefix="multihost-")
    state: dict[str, Any] = {"ns": [], "procs": procs, "folder": folder, "pg_started": False}
    try:
        return _demonstrate(ns, state)
    finally:
        cleanup(state)


def _demonstrate(ns: dict[str, str], state: dict[str, Any]) -> int:
    import postgres_cluster

    import postgres_store

    folder, procs = state["folder"], state["procs"]
    tag = ns["pg"][4:-2]
    # ---------------------------------------------------------------- network
    for name in ns.values():
        run("ip", "netns", "add", name)
        state["ns"].append(name)
        run("ip", "link", "set", "lo", "up", ns=name)
    links = {"a": (f"nm{tag}pa", f"nm{tag}a", PG_A, HOST_A), "b": (f"nm{tag}pb", f"nm{tag}b", PG_B, HOST_B)}
    for host, (pg_side, host_side, pg_ip, host_ip) in links.items():
        run("ip", "link", "add", pg_side, "type", "veth", "peer", "name", host_side)
        run("ip", "link", "set", pg_side, "netns", ns["pg"])
        run("ip", "link", "set", host_side, "netns", ns[host])
        run("ip", "addr", "add", f"{pg_ip}/24", "dev", pg_side, ns=ns["pg"])
        run("ip", "addr", "add", f"{host_ip}/24", "dev", host_side, ns=ns[host])
        run("ip", "link", "set", pg_side, "up", ns=ns["pg"])
        run("ip", "link", "set", host_side, "up", ns=ns[host])
    say(f"namespaces: {ns['a']} ({HOST_A}) -- {ns['pg']} ({PG_A}, {PG_B}) -- {ns['b']} ({HOST_B})")

    # ---------------------------------------------------------------- PostgreSQL in the pg namespace
    user = "postgres"
    import pwd

    owner = pwd.getpwnam(user)
    os.chown(folder, owner.pw_uid, owner.pw_gid)
    os.chmod(folder, 0o700)
    data, password = os.path.join(folder, "data"), secrets.token_urlsafe(24)
    binary = postgres_cluster.find_binaries()
    assert binary is not None
    run(
        os.path.join(binary, "initdb"),
        "-D",
        data,
        "-U",
        "admin",
        "-A",
        "trust",
        "--no-sync",
        "--no-instructions",
        user=user,
    )
    with open(os.path.join(data, "pg_hba.conf"), "w", encoding="utf-8") as hba:
        hba.write("local all admin trust\n")  # the admin socket lives in a 0700 folder of this run
        hba.write(f"host {DB_NAME} {DB_USER} {SUBNET} scram-sha-256\n")  # the hosts, nothing else
    os.chown(os.path.join(data, "pg_hba.conf"), owner.pw_uid, owner.pw_gid)
    options = f"-k {folder} -c listen_addresses='{PG_A},{PG_B}' -F"
    run(
        os.path.join(binary, "pg_ctl"),
        "-D",
        data,
        "-l",
        os.path.join(folder, "log"),
        "-w",
        "-o",
        options,
        "start",
        ns=ns["pg"],
        user=user,
    )
    state["pg_started"] = True
    state["pg_ctl"] = (os.path.join(binary, "pg_ctl"), data, ns["pg"], user)
    postgres_cluster.create_login(f"postgresql:///postgres?host={folder}&user=admin", DB_USER, password, DB_NAME)
    say(f"postgresql: throwaway cluster listening on {PG_A}:5432 and {PG_B}:5432 only, scram-sha-256 for {SUBNET}")

    # ---------------------------------------------------------------- the two server hosts
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOTES_MCP_", "PG"))}
    env.update(NOTES_MCP_SECRET=secrets.token_hex(32), NOTES_MCP_TOKEN=secrets.token_urlsafe(24), PGPASSWORD=password)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    agents: dict[str, Agent] = {}
    urls = {"a": f"postgresql://{DB_USER}@{PG_A}/{DB_NAME}", "b": f"postgresql://{DB_USER}@{PG_B}/{DB_NAME}"}
    for host in ("a", "b"):
        server = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns[host],
                sys.executable,
                os.path.join(CODE, "serve.py"),
                "--http",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--db",
                urls[host],
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        procs.append(server)
        stderr = server.stderr
        assert stderr is not None  # piped above
        port = None
        for line in stderr:
            match = _URL_RE.search(line)
            if match:
                port = int(match.group(1))
                break
        if port is None:
            raise RuntimeError(f"server on host {host} did not start")
        threading.Thread(target=stderr.read, daemon=True).start()  # keep draining it
        agents[host] = Agent(ns[host], port, {**env, "NOTES_MCP_DB": urls[host]}, procs)
        say(f"host {host}: serve.py --http on its loopback, --db {urls[host]} (password from PGPASSWORD)")

    store = postgres_store.open_store(f"postgresql:///{DB_NAME}?host={folder}&user=admin", clock=time.time)

    def present(note_id: str) -> bool:
        return any(note.id == note_id for note in store.all())

    failures = 0

    def check(ok: bool, line: str) -> None:
        nonlocal failures
        failures += 0 if ok else 1
        say(("ok   " if ok else "FAIL ") + line)

    # ---------------------------------------------------------------- 1. a form on A, its accept on B
    first = agents["a"].do({"op": "post", "message": request(1, "TPS report")})
    form_state = first["result"]["requestState"]
    done = agents["b"].do({"op": "post", "message": request(2, "TPS report", form_state, "note-14")})
    replay = agents["a"].do({"op": "post", "message": request(3, "TPS report", form_state, "note-14")})
    check(
        done.get("result", {}).get("structuredContent") == {"deleted": True, "noteId": "note-14"}
        and replay.get("error", {}).get("code") == main.INVALID_PARAMS
        and not present("note-14"),
        "form asked on host A, accepted on host B: deleted once; the replay on host A is refused (-32602)",
    )

    # ---------------------------------------------------------------- 2. one confirmation raced from both hosts
    for index in range(RACE_ROUNDS):
        store.put(main.Note(f"race-{index:03d}", f"Race {index:03d}", f"{main.LESSON_WORKSPACE}/race-{index:03d}.md"))
    tally = {"one deletion": 0, "other": 0}
    for index in range(RACE_ROUNDS):
        title = f"Race {index:03d}"
        asked = agents["a"].do({"op": "post", "message": request(10, title)})
        retry = request(11, title, asked["result"]["requestState"], f"race-{index:03d}")
        for agent in agents.values():
            agent.arm({"op": "post", "message": retry})
        for agent in agents.values():
            agent.send("go")
        answers = [json.loads(agent.line()) for agent in agents.values()]
        deleted = sum(1 for r in answers if r.get("result", {}).get("structuredContent", {}).get("deleted") is True)
        refused = sum(1 for r in answers if r.get("error", {}).get("code") == main.INVALID_PARAMS)
        ok = deleted == 1 and refused == 1 and not present(f"race-{index:03d}")
        tally["one deletion" if ok else "other"] += 1
    check(
        tally["other"] == 0,
        f"{RACE_ROUNDS} races of one confirmation from both hosts: {tally['one deletion']} with exactly one deletion, "
        f"{tally['other']} otherwise",
    )

    # ---------------------------------------------------------------- 3. host A cut off mid-transaction
    store.put(main.Note("cutoff-1", "Cutoff", f"{main.LESSON_WORKSPACE}/cutoff.md"))
    asked = agents["a"].do({"op": "post", "message": request(20, "Cutoff")})
    cut_state = asked["result"]["requestState"]
    claims = claims_of(cut_state)
    live = {note.id: note for note in store.all()}["cutoff-1"]
    agents["a"].arm(
        {
            "op": "consume_and_pause",
            "nonce": claims["nonce"],
            "exp": claims["exp"],
            "target": ["cutoff-1", live.version],
        }
    )
    agents["a"].send("go")
    check(
        agents["a"].line() == "inside deleted",
        "host A: nonce claimed and note deleted inside its transaction, not committed",
    )
    run("ip", "link", "set", links["a"][0], "down", ns=ns["pg"])
    say(f"host A cut off: {links['a'][0]} set down in the pg namespace")
    check(
        present("cutoff-1") and not store.is_consumed(claims["nonce"]),
        "while A is cut off: the note is still there and the nonce unspent (nothing half-done is visible)",
    )
    outcomes: list[str] = []
    for attempt in range(CUTOFF_RETRIES):
        answer = agents["b"].do({"op": "post", "message": request(30 + attempt, "Cutoff", cut_state, "cutoff-1")})
        if answer.get("result", {}).get("structuredContent", {}).get("deleted") is True:
            outcomes.append("deleted")
            break
        result = answer.get("result", {})
        outcomes.append("busy" if result.get("isError") else str(answer.get("error", {}).get("code", "?")))
    say(
        f"host B retried the same accept: {' '.join(outcomes)}  "
        "(busy = an isError result while A's session held the lock)"
    )
    check(
        outcomes[-1:] == ["deleted"] and not present("cutoff-1"),
        "host B completed the confirmation once the server aborted A's silent transaction",
    )
    run("ip", "link", "set", links["a"][0], "up", ns=ns["pg"])
    agents["a"].send("continue")
    late = json.loads(agents["a"].line())
    check(
        "StoreBusy" in late.get("error", ""), f"host A back online: its late COMMIT fails ({late.get('error', late)})"
    )
    replay = agents["a"].do({"op": "post", "message": request(60, "Cutoff", cut_state, "cutoff-1")})
    check(
        replay.get("error", {}).get("code") == main.INVALID_PARAMS,
        "host A's replay of the same accept is refused (-32602): completed exactly once",
    )
    store.close()
    say("result: " + ("every check passed" if failures == 0 else f"{failures} check(s) failed"))
    return 0 if failures == 0 else 1


def cleanup(state: dict[str, Any]) -> None:
    """Stop every process, PostgreSQL, delete the namespaces (and with them the veths) and the folder."""
    for proc in state["procs"]:
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(GUARD_SECONDS)
        except subprocess.TimeoutExpired:
            pass
    if state.get("pg_ctl"):
        pg_ctl, data, namespace, user = state["pg_ctl"]
        try:
            run(pg_ctl, "-D", data, "-m", "immediate", "-w", "stop", ns=namespace, user=user)
        except (RuntimeError, subprocess.TimeoutExpired):
            pass
    for name in state["ns"]:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    shutil.rmtree(state["folder"], ignore_errors=True)


def agent(port: int) -> None:
    """Inside a host namespace: run armed commands against the local server or the store, one line each."""
    import postgres_store
    import stores

    token, url = os.environ["NOTES_MCP_TOKEN"], os.environ["NOTES_MCP_DB"]
    while line := sys.stdin.readline():
        command = json.loads(line)
        print("armed", flush=True)
        if sys.stdin.readline().strip() != "go":
            return
        if command["op"] == "post":
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=GUARD_SECONDS)
            message = command["message"]
            body = json.dumps(message).encode()
            conn.request(
                "POST",
                "/mcp",
                body,
                {
                    "Content-Type": "application/json",
                    "Accept": "application/json, text/event-stream",
                    "Authorization": f"Bearer {token}",
                    "MCP-Protocol-Version": main.PROTOCOL_VERSION,
                    "Mcp-Method": message["method"],
                    "Mcp-Name": message["params"]["name"],
                },
            )
            print(conn.getresponse().read().decode(), flush=True)
            conn.close()
            continue
        # consume_and_pause: this host's own store, paused after the deletion, before COMMIT.
        store = postgres_store.open_store(url, clock=time.time, idle_in_transaction_timeout_ms=IDLE_TX_TIMEOUT_MS)

        def pause(stage: str) -> None:
            if stage == "deleted":
                print("inside deleted", flush=True)
                sys.stdin.readline()  # until the driver says continue

        store.pause_inside_transaction(pause)
        try:
            outcome = store.consume(
                main.LESSON_PRINCIPAL, command["nonce"], command["exp"], tuple(command["target"]), lambda note: True
            )
            print(json.dumps({"settlement": outcome.value}), flush=True)
        except stores.StoreBusy as exc:
            print(json.dumps({"error": f"StoreBusy: {exc}"}), flush=True)
        store.close()


def entry(argv: list[str]) -> int:
    """`multihost.py` runs the demonstration; `multihost.py agent PORT` is its per-host client."""
    if argv[:1] == ["agent"]:
        agent(int(argv[1]))
        return 0
    reason = unavailable()
    if reason is not None:
        print(reason, file=sys.stderr)
        return 2

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(130)  # unwinds through demonstrate()'s finally: namespaces are deleted

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return demonstrate()


if __name__ == "__main__":
    sys.exit(entry(sys.argv[1:]))

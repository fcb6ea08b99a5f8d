"""The installable package: `pip install .` into a fresh virtual environment outside the checkout gives `notes-mcp`."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import unittest
import venv
from typing import Any

from helpers import support

import main
import serve
import test_docs

GUARD = 300.0  # seconds; only a failure guard (a build may fetch setuptools from the index)
PACKAGE = "notes_mcp"
COMMAND = "notes-mcp"
# Words in pip's output that mean the package index could not be reached (then the test skips).
OFFLINE_SIGNS = (
    "Failed to establish a new connection",
    "No matching distribution found for setuptools",
    "Temporary failure in name resolution",
)
PROTOCOL_META = test_docs.PROTOCOL_META


def copy_checkout(target: str) -> str:
    """The checkout's files (no VCS data, caches or build output) under `target`; its path."""
    source = os.path.join(target, "checkout")
    shutil.copytree(
        support.ROOT,
        source,
        ignore=shutil.ignore_patterns(".git", "__pycache__", "build", "dist", "*.egg-info", "*.db", "*.db-*"),
    )
    return source


def outer_pip() -> bool:
    """True when this interpreter has pip, which can install into another environment (`pip --python`)."""
    return importlib.util.find_spec("pip") is not None


def make_venv(folder: str) -> tuple[str, str]:
    """A fresh virtual environment: (its python, its bin folder).

    Without pip of its own when this interpreter has one: ensurepip's copy of pip and
    setuptools is most of a venv's creation time, and `pip --python` installs into it alike.
    """
    venv.create(folder, with_pip=not outer_pip(), clear=True)
    bindir = os.path.join(folder, "Scripts" if os.name == "nt" else "bin")
    return os.path.join(bindir, "python"), bindir


def pip_command(python: str) -> list[str]:
    """The command line that runs pip inside the environment of `python`.

    That environment's own pip when this interpreter has none. Otherwise this interpreter's
    pip run by `python` itself, as `pip --python` does: `pip --python` starts this
    interpreter's pip only to start the same pip again under `python` (its
    `__pip-runner__.py`), and that first start costs about 0.4 s of CPU for nothing.
    """
    spec = importlib.util.find_spec("pip")
    if spec is None or not spec.submodule_search_locations:
        return [python, "-m", "pip"]
    runner = os.path.join(list(spec.submodule_search_locations)[0], "__pip-runner__.py")
    return [python, runner] if os.path.isfile(runner) else [sys.executable, "-m", "pip", "--python", python]


def pip_install(python: str, requirement: str, cwd: str) -> str:
    """`pip install requirement` into the environment of `python` (build isolation as a user gets it); pip's output.

    Skips the calling test (class) when the package index cannot be reached for setuptools.
    """
    done = subprocess.run(
        [*pip_command(python), "install", "--disable-pip-version-check", requirement],
        cwd=cwd, capture_output=True, text=True, timeout=GUARD, env=clean_env(),
    )  # fmt: skip
    output = done.stdout + done.stderr
    if done.returncode != 0 and any(sign in output for sign in OFFLINE_SIGNS):
        raise unittest.SkipTest(
            f"the package index is unreachable, so setuptools cannot be fetched for the build: {requirement}"
        )
    if done.returncode != 0:
        raise AssertionError(f"pip install {requirement} failed:\n{output}")
    return output


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without NOTES_MCP_* values or a virtual environment of the caller's."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("NOTES_MCP_", "PYTHON")) and key != "VIRTUAL_ENV"
    }
    env.update(extra)
    return env


def psycopg_present() -> bool:
    """True when this interpreter has psycopg (the CI's venv), so the [postgres] extra is installed too."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return False
    return True


# What reads the environment in code/*.py: os.environ.get("X"), environ.get("X"), getenv("X"), environ["X"].
_ENVIRON_READ_RE = re.compile(
    r"""(?:environ\.get|getenv)\(\s*"([A-Z_][A-Z0-9_]*)"|environ\[\s*"([A-Z_][A-Z0-9_]*)"\s*\]"""
)


def command_output(*argv: str) -> subprocess.CompletedProcess[str]:
    """A checkout's code/ script (serve.py, cli.py) run as a user runs it."""
    return subprocess.run([*support.python(), *argv], capture_output=True, text=True, timeout=GUARD, env=clean_env())


class CommandLineTests(unittest.TestCase):
    """The command line of a checkout and of the installed entry point: version, help, the audit's name."""

    def test_pyproject_states_the_version_the_server_reports(self) -> None:
        with open(os.path.join(support.ROOT, "pyproject.toml"), "rb") as handle:
            project = tomllib.load(handle)["project"]
        self.assertEqual(project["version"], main.SERVER_INFO["version"])
        self.assertEqual(serve.version(), main.SERVER_INFO["version"])

    def test_version_prints_the_one_version_from_serve_py_and_from_the_entry_point(self) -> None:
        expected = f"{main.SERVER_INFO['version']} (MCP {main.PROTOCOL_VERSION})"
        for script, prog in (("serve.py", "serve.py"), ("cli.py", COMMAND)):
            with self.subTest(script=script):
                done = command_output(os.path.join(support.CODE, script), "--version")
                self.assertEqual((done.returncode, done.stdout, done.stderr), (0, f"{prog} {expected}\n", ""))

    def test_help_lists_every_environment_variable_the_server_reads(self) -> None:
        read: set[str] = set()
        for name in os.listdir(support.CODE):
            if name.endswith(".py"):
                with open(os.path.join(support.CODE, name), encoding="utf-8") as handle:
                    read |= {a or b for a, b in _ENVIRON_READ_RE.findall(handle.read())}
        self.assertGreaterEqual(
            read, {"NOTES_MCP_SECRET", "NOTES_MCP_TOKEN", "XDG_STATE_HOME", "PGHOST"}
        )  # the scan finds them
        listed = command_output(os.path.join(support.CODE, "serve.py"), "--help").stdout.split(
            "environment variables:"
        )[1]
        for variable in sorted(read):
            self.assertRegex(listed, rf"\n  (\S+, )*{variable}\b", variable)

    def test_audit_help_names_the_command_the_user_typed(self) -> None:
        for prog in (COMMAND, "serve.py"):
            with self.subTest(prog=prog):
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    status = serve.serve(["audit", "--help"], prog=prog)
                self.assertEqual(status, 0)
                self.assertTrue(out.getvalue().startswith(f"usage: {prog} audit "), out.getvalue()[:60])
        done = command_output(os.path.join(support.CODE, "cli.py"), "audit", "restore", "--help")
        self.assertTrue(done.stdout.startswith(f"usage: {COMMAND} audit restore "), done.stdout[:60])


class InstalledCommandTests(unittest.TestCase):
    """`pip install .` from a copy of the checkout, then the `notes-mcp` command as a host runs it."""

    scratch: str  # setUpClass sets these
    source: str
    python: str
    bindir: str
    pip_output: str
    command: str
    purelib: str
    installed_version: str
    outputs: dict[tuple[str, ...], subprocess.CompletedProcess[str]]  # installed_command's, by argv

    @classmethod
    def setUpClass(cls) -> None:
        cls.scratch = tempfile.mkdtemp(prefix="notes-mcp-package-")
        try:
            cls.source = copy_checkout(cls.scratch)
            cls.python, cls.bindir = make_venv(os.path.join(cls.scratch, "venv"))
            cls.pip_output = pip_install(cls.python, ".", cls.source)
        except BaseException:
            shutil.rmtree(cls.scratch, True)
            raise
        cls.command = os.path.join(cls.bindir, COMMAND)
        cls.outputs = {}
        # One question to the installed environment, two answers: where it keeps packages and
        # which version of the distribution it holds.
        probe = (
            "import importlib.metadata, json, sysconfig; "
            "print(json.dumps([sysconfig.get_paths()['purelib'], importlib.metadata.version('notes-mcp')]))"
        )
        cls.purelib, cls.installed_version = json.loads(
            subprocess.run(
                [cls.python, "-c", probe], capture_output=True, text=True, check=True, timeout=GUARD, env=clean_env()
            ).stdout
        )

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.scratch, True)

    def test_pip_says_it_installed_notes_mcp(self) -> None:
        self.assertIn("Successfully installed notes-mcp-", self.pip_output)

    def test_the_project_modules_live_under_one_package_and_no_generic_name_is_installed_top_level(self) -> None:
        top = set(os.listdir(self.purelib))
        for generic in ("main.py", "config.py", "serve.py", "main", "config", "serve", "code", "cli.py"):
            self.assertNotIn(generic, top)
        self.assertIn(PACKAGE, top)
        installed = {name for name in os.listdir(os.path.join(self.purelib, PACKAGE)) if name != "__pycache__"}
        # Every module of code/ and nothing else: no sub-folder (scripts, test shims) rides along.
        expected = {name for name in os.listdir(support.CODE) if name.endswith(".py")}
        self.assertEqual(installed, expected)

    def test_help_names_the_command_and_lists_exactly_serve_py_flags(self) -> None:
        import serve

        done = self.installed_command("--help")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertTrue(done.stdout.startswith(f"usage: {COMMAND} "), done.stdout[:80])
        self.assertIn(f"{COMMAND} demo", done.stdout)
        # The same flags as `python3 code/serve.py --help`, not one more or less.
        serve_py = [*support.python(), os.path.join(support.CODE, "serve.py"), "--help"]
        checkout = subprocess.run(serve_py, capture_output=True, text=True, timeout=GUARD)
        flags = {
            option
            for action in serve.parser()._actions
            for option in action.option_strings
            if action.help != "==SUPPRESS=="
        }
        for flag in flags:
            self.assertIn(flag, done.stdout)
            self.assertIn(flag, checkout.stdout)
        self.assertEqual(
            done.stdout.split("options:")[1].split(f"{COMMAND} demo")[0].strip(),
            checkout.stdout.split("options:")[1].strip(),
        )

    def test_version_is_the_installed_distribution_s(self) -> None:
        done = self.installed_command("--version")
        self.assertEqual(done.stdout, f"{COMMAND} {self.installed_version} (MCP {main.PROTOCOL_VERSION})\n")
        self.assertEqual(self.installed_version, main.SERVER_INFO["version"])

    def test_python_m_notes_mcp_is_the_same_command_as_notes_mcp(self) -> None:
        stderr: dict[str, str] = {}
        for argv in (["--version"], ["--help"], ["--stdoi"], ["audit", "--help"]):
            with self.subTest(argv=argv):
                command = self.installed_command(*argv)
                module = subprocess.run(
                    [self.python, "-m", PACKAGE, *argv], capture_output=True, text=True, timeout=GUARD, env=clean_env()
                )
                stderr[argv[0]] = module.stderr
                self.assertEqual(
                    (module.returncode, module.stdout, module.stderr),
                    (command.returncode, command.stdout, command.stderr),
                )
                self.assertTrue(command.stdout or command.stderr)
        self.assertEqual(
            stderr["--stdoi"],
            f"{COMMAND}: unknown option --stdoi: did you mean --stdio? ({COMMAND} --help lists every option)\n",
        )

    def test_demo_runs_the_scripted_two_call_flow(self) -> None:
        done = subprocess.run([self.command, "demo"], capture_output=True, text=True, timeout=GUARD, env=clean_env())
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("Notes server demo", done.stdout)
        self.assertIn("tools/call, id 2", done.stdout)

    def test_stdio_completes_the_two_call_flow_and_deletes_the_chosen_note(self) -> None:
        notes = os.path.join(self.scratch, "flow-notes")
        os.makedirs(notes, exist_ok=True)
        for name, title in (("tps-2024.md", "TPS report 2024"), ("tps-2025.md", "TPS report 2025")):
            with open(os.path.join(notes, name), "w", encoding="utf-8") as handle:
                handle.write(f"# {title}\n")
        env = clean_env(XDG_STATE_HOME=os.path.join(self.scratch, "state"), NOTES_MCP_SECRET=support.KEY.hex())
        workspace = f"file://{notes}"
        call = {"name": "notes_delete", "arguments": {"workspaceUri": workspace, "title": "TPS"}}
        proc = subprocess.Popen(
            [self.command, "--stdio", "--notes-dir", notes],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.addCleanup(self.stop, proc)
        first = self.exchange(
            proc, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"_meta": PROTOCOL_META, **call}}
        )["result"]
        self.assertEqual(first["resultType"], "input_required")
        options = first["inputRequests"]["delete_choice"]["params"]["requestedSchema"]["properties"]["note_id"]["oneOf"]
        self.assertEqual([option["const"] for option in options], ["tps-2024.md", "tps-2025.md"])
        answer = {"delete_choice": {"action": "accept", "content": {"note_id": "tps-2025.md", "confirm": True}}}
        retry = {"_meta": PROTOCOL_META, **call, "requestState": first["requestState"], "inputResponses": answer}
        second = self.exchange(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": retry})["result"]
        self.assertFalse(second.get("isError", False), second)
        self.assertEqual(
            sorted(name for name in os.listdir(notes) if name != ".trash"), ["tps-2024.md"]
        )  # the chosen note, and only it
        proc.stdin.close()  # type: ignore[union-attr]
        self.assertEqual(proc.wait(GUARD), 0)
        stderr = proc.stderr.read().decode("utf-8", "replace")  # type: ignore[union-attr]
        self.assertIn(f"workspace {workspace}", stderr)  # the start-up report names what it serves
        self.assertNotIn(support.KEY.hex(), stderr)

    def test_the_installed_host_configurations_in_serving_md_serve_a_note(self) -> None:
        installed = 0
        for block in test_docs.json_blocks(test_docs.read(test_docs.SERVING)):
            document = json.loads(block)
            (servers,) = document.values()
            for name, entry in servers.items():
                if entry["command"] != COMMAND:
                    continue
                installed += 1
                with self.subTest(host=next(iter(document)), server=name):
                    test_docs.run_host_configuration(
                        self, entry, {"PATH": self.bindir + os.pathsep + os.environ.get("PATH", "")}
                    )
        self.assertGreaterEqual(installed, 2)  # mcpServers hosts and VS Code

    @unittest.skipUnless(
        psycopg_present(), "psycopg is absent: the [postgres] extra is installed only where it is (.ci/run)"
    )
    def test_zz_the_postgres_extra_installs_psycopg_beside_the_package(self) -> None:
        # Last in the class (zz): it reinstalls the package into the same environment, with psycopg.
        output = pip_install(self.python, ".[postgres]", self.source)
        self.assertIn("psycopg-", output)
        probe = (
            "import notes_mcp.cli as c; c.flat_imports(); import postgres_store, psycopg; print(psycopg.__version__)"
        )
        done = subprocess.run(
            [self.python, "-c", probe], capture_output=True, text=True, timeout=GUARD, env=clean_env()
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertRegex(done.stdout.strip(), r"^3\.")

    @classmethod
    def installed_command(cls, *argv: str) -> subprocess.CompletedProcess[str]:
        """`notes-mcp argv...` run once per class: what it prints for --help or --version does not change in between."""
        if argv not in cls.outputs:
            cls.outputs[argv] = subprocess.run(
                [cls.command, *argv], capture_output=True, text=True, timeout=GUARD, env=clean_env()
            )
        return cls.outputs[argv]

    def exchange(self, proc: subprocess.Popen[bytes], message: dict[str, Any]) -> dict[str, Any]:
        """Send one line, read one line."""
        proc.stdin.write(json.dumps(message).encode() + b"\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        line = proc.stdout.readline()  # type: ignore[union-attr]
        self.assertTrue(line, "the server ended early")
        return json.loads(line)

    @staticmethod
    def stop(proc: subprocess.Popen[bytes]) -> None:
        """Kill the server if it still runs and close its pipes."""
        if proc.poll() is None:
            proc.kill()
            proc.wait(GUARD)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()


if __name__ == "__main__":
    unittest.main()

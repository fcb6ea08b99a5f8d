"""The benchmark's canned responder is a fair ceiling: the same client, the same shapes as the server."""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import inspect
import io
import json
import os
import pkgutil
import re
import shutil
import sys
import tempfile
import types
import unittest
from functools import partial
from typing import Any
from unittest import mock
from xml.etree import ElementTree

from helpers import support

import bench
import benchmarks
import main
import sqlite_store
from benchmarks import checkpoint, command, common, plot, scaling, startup, transports

SVG = "{http://www.w3.org/2000/svg}"


def shape(value: Any) -> Any:
    """A JSON value's structure: object keys and nesting, with every leaf reduced to its type."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value[:1]]
    return type(value).__name__


def first_answer(server: common.StdioServer) -> dict[str, Any]:
    """The answer of a stdio server to the first call for note 0."""
    return json.loads(server.send(common.encode(common.first_call(0, 1))))


_RESPONDERS: dict[tuple[str, ...], common.StdioServer] = {}


def responder(argv: list[str]) -> common.StdioServer:
    """The canned responder or its floor over stdio, started once for the module (again if it has ended).

    Sharing them changes no test's answers: the canned responder answers each message alike,
    and the floor signs a fresh state for every first call, so a state one test settles is
    never one another test holds.
    """
    key = tuple(argv)
    server = _RESPONDERS.get(key)
    if server is None or server.process.poll() is not None:
        if server is not None:
            server.close()
        server = _RESPONDERS[key] = common.StdioServer(argv)
        unittest.addModuleCleanup(server.close)
    return server


@functools.cache
def served_first_answer() -> dict[str, Any]:
    """serve.py's answer, over stdio on a one-note config, to the first call for note 0 (one server for the module)."""
    folder = tempfile.mkdtemp()
    server = common.StdioServer(common.server_argv("stdio", common.write_config(folder, 1)))
    try:
        return first_answer(server)
    finally:
        server.close()
        shutil.rmtree(folder)


class CannedResponderTests(unittest.TestCase):
    def test_it_answers_the_clients_full_round_trips_over_stdio_and_http(self) -> None:
        stdio = responder(common.ceiling_argv("stdio"))
        http = common.HttpServer(common.ceiling_argv("http"))
        self.addCleanup(http.close)
        client = common.HttpClient(http.address)
        self.addCleanup(client.close)
        for send in (stdio.send, client.send):
            for i in range(3):
                common.round_trip(send, i)  # raises BenchError on any answer the client would refuse
            self.assertEqual(json.loads(send(common.DISCOVER, "server/discover"))["result"]["resultType"], "complete")

    def test_it_and_the_floor_answer_a_decline_as_the_server_does_deleting_nothing(self) -> None:
        for argv in (common.ceiling_argv("stdio"), common.floor_argv("stdio")):
            server = responder(argv)
            state = json.loads(server.send(common.encode(common.first_call(0, 1))))["result"]["requestState"]
            retry = common.retry_call(0, 2, state)
            retry["params"]["inputResponses"][main.INPUT_KEY] = {"action": "decline"}
            result = json.loads(server.send(common.encode(retry)))["result"]
            self.assertEqual(result["structuredContent"], {"deleted": False, "reason": "declined"})

    def test_its_form_has_the_servers_shape_and_a_state_of_the_servers_length(self) -> None:
        served = served_first_answer()
        canned = first_answer(responder(common.ceiling_argv("stdio")))
        self.assertEqual(canned["result"].keys(), served["result"].keys())
        self.assertEqual(shape(canned["result"]["inputRequests"]), shape(served["result"]["inputRequests"]))
        # A state for one candidate; the canned one is as long (give or take the digits of
        # the times in it), so both ask the client to carry and parse the same bytes.
        self.assertAlmostEqual(len(canned["result"]["requestState"]), len(served["result"]["requestState"]), delta=8)


class FloorTests(unittest.TestCase):
    """The floor is the canned responder plus the state work: it must really do that work."""

    def floor(self) -> common.StdioServer:
        return responder(common.floor_argv("stdio"))

    def test_it_answers_the_clients_full_round_trips_over_stdio_and_http(self) -> None:
        http = common.HttpServer(common.floor_argv("http"))
        self.addCleanup(http.close)
        client = common.HttpClient(http.address)
        self.addCleanup(client.close)
        for send in (self.floor().send, client.send):
            for i in range(3):
                common.round_trip(send, i)

    def test_each_state_is_signed_anew_and_a_retry_is_settled_only_once(self) -> None:
        floor = self.floor()
        firsts = [json.loads(floor.send(common.encode(common.first_call(0, k)))) for k in (1, 2)]
        states = [first["result"]["requestState"] for first in firsts]
        self.assertNotEqual(states[0], states[1])  # a fresh nonce and time in each
        retry = common.encode(common.retry_call(0, 3, states[0]))
        self.assertIn("result", json.loads(floor.send(retry)))
        replayed = json.loads(floor.send(retry))
        self.assertEqual(replayed["error"]["code"], main.INVALID_PARAMS)
        # The other state is untouched by that claim; a forged MAC and other arguments are refused.
        forged = states[1][:-2] + ("AA" if not states[1].endswith("AA") else "BB")
        for message in (common.retry_call(0, 4, forged), common.retry_call(1, 5, states[1])):
            self.assertEqual(json.loads(floor.send(common.encode(message)))["error"]["code"], main.INVALID_PARAMS)
        self.assertIn("result", json.loads(floor.send(common.encode(common.retry_call(0, 6, states[1])))))

    def test_its_state_binds_what_the_servers_binds(self) -> None:
        served = served_first_answer()
        floored = first_answer(self.floor())
        fresh = ("nonce", "iat", "exp")  # new with every state
        floor_claims, server_claims = (
            support.claims_of(answer["result"]["requestState"]) for answer in (floored, served)
        )
        self.assertEqual(floor_claims.keys(), server_claims.keys())
        self.assertEqual(
            {k: v for k, v in floor_claims.items() if k not in fresh},
            {k: v for k, v in server_claims.items() if k not in fresh},
        )
        self.assertAlmostEqual(len(floored["result"]["requestState"]), len(served["result"]["requestState"]), delta=8)


class ScalingModeTests(unittest.TestCase):
    """--mode scaling serves each store over stdio and each round trip is one choice, then a decline."""

    folder_server: scaling.ScalingServer | None = None  # folder_one_workspace's

    @classmethod
    def folder_one_workspace(cls) -> scaling.ScalingServer:
        """The folder store's server over one workspace of 30 notes, started once for the class.

        Its start-up report and its round trips are both checked; each round trip declines,
        so none changes a note and either check may come first.
        """
        if cls.folder_server is None or cls.folder_server.server.process.poll() is not None:
            folder = tempfile.mkdtemp()
            cls.addClassCleanup(shutil.rmtree, folder)
            notes, workspace, pick = scaling.scaling_notes(30, 1)
            config, uri = scaling.scaling_config(folder, "folder", notes, workspace, None)
            cls.folder_server = scaling.ScalingServer(config, uri, pick)
            cls.addClassCleanup(cls.folder_server.close)
        return cls.folder_server

    def test_each_store_and_the_many_workspaces_layout_answer_the_round_trips_over_stdio(self) -> None:
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder)
        for workspaces in (1, 10):
            notes, workspace, pick = scaling.scaling_notes(30, workspaces)
            for kind in ("memory", "sqlite", "folder"):  # PostgreSQL: the same config path, with a cluster
                with self.subTest(kind=kind, workspaces=workspaces):
                    if (kind, workspaces) == ("folder", 1):  # the class's folder server: measured the same way
                        measured = self.folder_one_workspace()
                        measured.run(0.01)
                        rate, first_ms = measured.rate, measured.first_ms
                    else:
                        config, uri = scaling.scaling_config(folder, kind, notes, workspace, None)
                        rate, first_ms = scaling.scaling_rate(config, uri, pick, 0.01)
                    self.assertGreater(rate, 0)
                    self.assertGreater(first_ms, 0)

    def test_a_folder_server_shows_from_its_start_up_report_how_its_index_learns_of_changes(self) -> None:
        measured = self.folder_one_workspace()
        self.assertTrue(measured.store_line.startswith("Markdown folders (1): "), measured.store_line)
        self.assertTrue(measured.store_line.endswith("; changes learnt from Linux inotify"), measured.store_line)

    def test_a_memory_store_whose_notes_overflow_the_config_cap_is_left_out_not_written(self) -> None:
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder)
        notes, workspace, _ = scaling.scaling_notes(30, 1)
        config, _ = scaling.scaling_config(folder, "memory", notes, workspace, None)
        size = os.path.getsize(config)
        os.unlink(config)
        with mock.patch.object(scaling.config_file, "MAX_CONFIG_BYTES", size):
            config, _ = scaling.scaling_config(folder, "memory", notes, workspace, None)  # at the cap: written
            self.assertEqual(os.path.getsize(config), size)
        os.unlink(config)
        too_small = mock.patch.object(scaling.config_file, "MAX_CONFIG_BYTES", size - 1)
        with too_small, self.assertRaises(scaling.ConfigTooLarge):
            scaling.scaling_config(folder, "memory", notes, workspace, None)
        self.assertEqual(os.listdir(folder), [])

    def test_the_caller_of_the_many_workspaces_row_asks_only_for_notes_of_its_workspace(self) -> None:
        notes, workspace, pick = scaling.scaling_notes(3000, 1000)
        inside = main.parse_file_uri(workspace)
        mine = {note.id for note in notes if main.inside_workspace(note, inside)}
        self.assertEqual(mine, {"b7", "b1007", "b2007"})
        self.assertTrue(all(common.note_id(pick(k)) in mine for k in range(20)))
        twins = [note for note in notes if "w0007-evil" in note.uri]  # same titles, look-alike folder
        self.assertEqual(sorted(note.title for note in twins), sorted(common.note_title(int(i[1:])) for i in mine))

    def test_the_goal_share_is_half_of_the_ten_note_rate(self) -> None:
        self.assertEqual(scaling.SCALING_TARGET_SHARE, 0.5)
        self.assertEqual(scaling.SCALING_SIZES, (10, 1_000, 10_000, 100_000))


class StartupModeTests(unittest.TestCase):
    """--mode startup times a real first answer of both kinds, from this tree and from a git export."""

    def test_the_per_call_set_up_answers_discover_and_initialize_and_a_ref_is_exported_with_its_serve_py(self) -> None:
        folder = tempfile.mkdtemp(prefix="bench-startup-")
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        argv = [
            sys.executable,
            common.SERVE_PY,
            "--stdio",
            "--config",
            common.write_config(folder, 3),
            "--db",
            os.path.join(folder, "n.db"),
            "--notes-tools",
            "--confirm-in-browser",
        ]
        for message in (common.DISCOVER, startup.INITIALIZE):
            self.assertGreater(startup.first_line_ms(argv, message, common.server_env()), 0)
        with self.assertRaises(common.BenchError):  # an error answer is no first answer
            nope = common.encode({"jsonrpc": "2.0", "id": 1, "method": "nope", "params": {}})
            startup.first_line_ms(argv, nope, common.server_env())
        self.assertTrue(os.path.isfile(startup.tree_of("HEAD", os.path.join(folder, "ref"))))


class PlotTests(unittest.TestCase):
    """`--mode plot` draws the README's two plots from recorded figures; `--record` records a run's."""

    def figures(self) -> dict[str, Any]:
        with open(common.RECORDED_FIGURES, encoding="utf-8") as handle:
            return json.load(handle)

    def test_plot_mode_draws_the_committed_svgs_from_the_recorded_figures(self) -> None:
        out = self.enterContext(tempfile.TemporaryDirectory(prefix="bench-plot-"))
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            self.assertEqual(command.run(["--mode", "plot", "--out", out]), 0)
        self.assertEqual(sorted(os.listdir(out)), ["scaling.svg", "speed.svg"])
        self.assertEqual(printed.getvalue().split(), [os.path.join(out, "speed.svg"), os.path.join(out, "scaling.svg")])
        for name in ("speed.svg", "scaling.svg"):
            with self.subTest(plot=name), open(os.path.join(out, name), encoding="utf-8") as drawn:
                with open(os.path.join(common.PLOTS, name), encoding="utf-8") as committed:
                    self.assertEqual(drawn.read(), committed.read())

    def test_the_speed_plot_has_a_floor_and_a_server_bar_per_run_as_long_as_its_share(self) -> None:
        runs = self.figures()["speed"]
        page = ElementTree.fromstring(plot.speed_svg(runs))
        for part in ("floor", "server"):
            bars = [float(bar.get("width", "")) for bar in page.iter(SVG + "rect") if bar.get("class") == part]
            expected = [480 * run[part] / run["ceiling"] for run in runs]  # the 0..100 % axis is 480 pixels wide
            self.assertEqual(len(bars), len(runs))
            for bar, width in zip(bars, expected, strict=True):
                self.assertAlmostEqual(bar, width, delta=0.05)

    def test_the_scaling_plot_has_a_line_per_store_through_each_measured_count(self) -> None:
        scaling = self.figures()["scaling"]
        page = ElementTree.fromstring(plot.scaling_svg(scaling))
        lines = [line.get("points", "").split() for line in page.iter(SVG + "polyline") if line.get("class") == "store"]
        self.assertEqual(len(lines), len(scaling["rates"]))
        for points, rates in zip(lines, scaling["rates"].values(), strict=True):
            self.assertEqual(len(points), len([rate for rate in rates if rate is not None]))
        self.assertIn("keeps 81 % at 100,000", ElementTree.tostring(page, encoding="unicode"))  # SQLite: 469 of 576

    def test_record_appends_transport_runs_and_replaces_the_scaling_figures(self) -> None:
        path = os.path.join(self.enterContext(tempfile.TemporaryDirectory(prefix="bench-record-")), "figures.json")
        measured = {
            kind: {part: {"rate": rate} for part, rate in (("ceiling", 100.4), ("floor", 80.6), ("server", 60.0))}
            for kind in ("stdio", "http")
        }
        runs = transports.speed_runs(measured, ["stdio", "http"])
        self.assertEqual(runs[0], {"transport": "stdio", "ceiling": 100, "floor": 81, "server": 60})
        first = {"rates": {f"{size:,}": {"sqlite": 500.0, "memory": 900.0} for size in scaling.SCALING_SIZES}}
        first["rates"]["100,000"].pop("memory")  # a memory config that large is not served
        with contextlib.redirect_stdout(io.StringIO()):
            common.record(path, runs[:1], scaling.scaling_rates(first), "one")
            common.record(path, runs[1:], {"notes": [10], "rates": {"sqlite": [7]}}, "two")
            common.record(path, runs[:1], None, "three")
        with open(path, encoding="utf-8") as handle:
            recorded = json.load(handle)
        self.assertEqual(
            [(run["transport"], run["command"]) for run in recorded["speed"]],
            [("stdio", "one"), ("http", "two"), ("stdio", "three")],
        )
        self.assertEqual(recorded["scaling"], {"notes": [10], "rates": {"sqlite": [7]}, "command": "two"})
        self.assertEqual(
            scaling.scaling_rates(first)["rates"], {"memory": [900, 900, 900, None], "sqlite": [500, 500, 500, 500]}
        )
        self.assertEqual(os.listdir(os.path.dirname(path)), ["figures.json"])  # no temporary file left

    def test_checkpoint_mode_measures_both_stores_in_one_run_and_reports_their_ratio(self) -> None:
        with tempfile.TemporaryDirectory(prefix="bench-checkpoint-") as folder:
            args = command.parse_args(["--mode", "checkpoint", "--seconds", "0.02", "--notes", "20", "--dir", folder])
            printed, opened = io.StringIO(), []
            real_open = sqlite_store.open_store

            def recording_open(*a: Any, **k: Any) -> Any:
                opened.append(real_open(*a, **k))
                return opened[-1]

            with contextlib.redirect_stdout(printed), mock.patch.object(sqlite_store, "open_store", recording_open):
                figures = checkpoint.run(args)
            self.assertEqual(os.listdir(folder), [])  # its databases are removed with their folder
        self.assertEqual([store.checkpoint_each_consume for store in opened], [True, False])
        self.assertGreater(figures["with"], 0)
        self.assertGreater(figures["without"], 0)
        self.assertEqual(figures["ratio"], figures["with"] / figures["without"])
        self.assertIn("ratio, with / without", printed.getvalue())
        self.assertIn(f"{figures['ratio']:.2f}", printed.getvalue())

    def test_the_report_prints_no_fixed_reference_figure_beside_measured_ones(self) -> None:
        for module in [bench, *package_modules()]:
            with self.subTest(module=module.__name__):
                self.assertEqual([name for name in vars(module) if name.startswith("SDK_")], [])
                self.assertNotIn("official SDK", inspect.getsource(module))


# Each mode `bench.py --help` lists and the package modules that mode runs, in order.
MODE_MODULES = {
    "inprocess": ["inprocess"],
    "stdio": ["transports"],
    "http": ["transports"],
    "sqlite": ["sqlite"],
    "checkpoint": ["checkpoint"],
    "postgres": ["postgres"],
    "scaling": ["scaling"],
    "search": ["search"],
    "latency": ["latency"],
    "index-memory": ["index_memory"],
    "rename-loop": ["rename_loop"],
    "index-rebuild": ["index_rebuild"],
    "startup": ["startup"],
    "plot": ["plot"],
    "all": ["inprocess", "transports"],
    "idle": ["idle"],
    "flood": ["hostile"],
    "readahead": ["hostile"],
    "guess": ["hostile"],
}


def package_modules() -> list[types.ModuleType]:
    """Every module of the benchmarks package, imported."""
    return [importlib.import_module(f"benchmarks.{info.name}") for info in pkgutil.iter_modules(benchmarks.__path__)]


def modes_in_help() -> list[str]:
    """The modes `bench.py --help` names (the shared command line's choices, those with their own options), sorted."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.suppress(SystemExit):
        command.parse_args(["--help"])
    shown = " ".join(printed.getvalue().split())  # argparse wraps lines where it likes
    choices = re.search(r"--mode \{([a-z,-]+)\}", shown)
    assert choices is not None, shown
    return sorted({*choices.group(1).split(","), *re.findall(r"--mode ([a-z][a-z-]*)", shown)})


def recorded(calls: list[tuple[str, object]], name: str, given: object) -> int:
    """A stub for a mode module's entry: note (module, what it was given) in `calls`, succeed."""
    calls.append((name, given))
    return 0


class CommandLineTests(unittest.TestCase):
    """`bench.py --mode X` runs the module of mode X: one module per mode, behind one command line."""

    def dispatched(self, argv: list[str]) -> list[tuple[str, object]]:
        """(module, what it was given) for each mode module `argv` runs, with every module's entry stubbed."""
        calls: list[tuple[str, object]] = []
        with contextlib.ExitStack() as stack:
            for module in package_modules():
                name = module.__name__.rpartition(".")[2]
                for entry in ("run", "run_command_line") if name not in ("command", "common") else ():
                    if hasattr(module, entry):
                        stack.enter_context(mock.patch.object(module, entry, partial(recorded, calls, name)))
            stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
            self.assertEqual(command.dispatch(argv), 0)
        return calls

    def test_every_mode_the_help_lists_is_dispatched_to_its_own_module(self) -> None:
        shown = modes_in_help()
        self.assertEqual(shown, sorted(MODE_MODULES))  # a mode listed without a module here fails
        for mode in shown:
            with self.subTest(mode=mode):
                argv = ["--mode", mode, "--seconds", "1"] if mode != "readahead" else ["--mode", mode]
                calls = self.dispatched(argv)
                self.assertEqual([name for name, _ in calls], MODE_MODULES[mode])
                for _, given in calls:
                    if mode in command.OWN_COMMAND_LINES:  # its own parser gets the whole line
                        self.assertEqual(given, argv)
                    else:
                        if not isinstance(given, argparse.Namespace):
                            self.fail(f"{mode}: parsed arguments expected, got {given!r}")
                        self.assertEqual((given.mode, given.seconds), (mode, 1.0))

    def test_a_mode_with_its_own_options_is_one_only_first_on_the_line(self) -> None:
        calls = self.dispatched(["--seconds", "1", "--mode", "latency"])
        self.assertEqual([name for name, _ in calls], ["latency"])
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
            self.dispatched(["--seconds", "1", "--mode", "idle"])  # not a choice of the shared command line

    def test_every_module_of_the_package_runs_a_mode_or_is_shared(self) -> None:
        named = {name for names in MODE_MODULES.values() for name in names}
        modules = {module.__name__.rpartition(".")[2] for module in package_modules()}
        self.assertEqual(modules - named, {"command", "common"})
        self.assertEqual(named - modules, set())

    def test_record_names_the_command_that_measured_the_figures(self) -> None:
        args = command.parse_args(["--mode", "scaling", "--seconds", "2", "--record", "f.json"])
        self.assertEqual(args.command, "python3 code/scripts/bench.py --mode scaling --seconds 2 --record f.json")


if __name__ == "__main__":
    unittest.main()

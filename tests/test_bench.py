"""The benchmark's canned responder is a fair ceiling: the same client, the same shapes as the server."""

from __future__ import annotations

import json
import shutil
import tempfile
import unittest
from typing import Any

import support  # noqa: F401 - puts code/ on sys.path

import bench


def shape(value: Any) -> Any:
    """A JSON value's structure: object keys and nesting, with every leaf reduced to its type."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value[:1]]
    return type(value).__name__


class CannedResponderTests(unittest.TestCase):
    def first_answers(self, argv: list[str]) -> dict[str, Any]:
        server = bench.StdioServer(argv)
        self.addCleanup(server.close)
        return json.loads(server.send(bench.encode(bench.first_call(0, 1))))

    def test_it_answers_the_clients_full_round_trips_over_stdio_and_http(self) -> None:
        stdio = bench.StdioServer(bench.ceiling_argv("stdio"))
        self.addCleanup(stdio.close)
        http = bench.HttpServer(bench.ceiling_argv("http"))
        self.addCleanup(http.close)
        client = bench.HttpClient(http.address)
        self.addCleanup(client.close)
        for send in (stdio.send, client.send):
            for i in range(3):
                bench.round_trip(send, i)  # raises BenchError on any answer the client would refuse
            self.assertEqual(json.loads(send(bench.DISCOVER, "server/discover"))["result"]["resultType"], "complete")

    def test_its_form_has_the_servers_shape_and_a_state_of_the_servers_length(self) -> None:
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder)
        served = self.first_answers(bench.server_argv("stdio", bench.write_config(folder, 1)))
        canned = self.first_answers(bench.ceiling_argv("stdio"))
        self.assertEqual(canned["result"].keys(), served["result"].keys())
        self.assertEqual(shape(canned["result"]["inputRequests"]), shape(served["result"]["inputRequests"]))
        # A state for one candidate; the canned one is as long (give or take the digits of
        # the times in it), so both ask the client to carry and parse the same bytes.
        self.assertAlmostEqual(len(canned["result"]["requestState"]), len(served["result"]["requestState"]), delta=8)


if __name__ == "__main__":
    unittest.main()

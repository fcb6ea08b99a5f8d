"""Wire values: the literal numbers other tests reach only through main's names."""

from __future__ import annotations

import hashlib
import unittest

from helpers import support  # noqa: F401 - puts code/ on the import path

import frame
import main


class WireValues(unittest.TestCase):
    def test_error_codes_are_the_numbers_json_rpc_and_2026_07_28_define(self) -> None:
        # Every other test compares codes by name, so a typo in a constant would pass them
        # all while every client saw the wrong number.
        expected = {
            "PARSE_ERROR": -32700,
            "INVALID_REQUEST": -32600,
            "METHOD_NOT_FOUND": -32601,
            "INVALID_PARAMS": -32602,
            "INTERNAL_ERROR": -32603,
            "HEADER_MISMATCH": -32020,
            "MISSING_REQUIRED_CLIENT_CAPABILITY": -32021,
            "UNSUPPORTED_PROTOCOL_VERSION": -32022,
        }
        # The two the lesson does not use (bytes that are not JSON, HTTP headers) are the product frame's.
        self.assertEqual({name: getattr(main, name, None) or getattr(frame, name) for name in expected}, expected)

    def test_the_shortest_signing_key_is_as_long_as_the_mac_it_keys(self) -> None:
        # A shorter HMAC-SHA256 key gives less security than the tag length promises.
        self.assertEqual(main.MIN_KEY_BYTES, hashlib.sha256().digest_size)


if __name__ == "__main__":
    unittest.main()

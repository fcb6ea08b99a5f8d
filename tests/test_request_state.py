"""The signed requestState: strict format, key ring, every binding, expiry at the edge."""

from __future__ import annotations

import base64
import hashlib
import hmac
import inspect
import json
import unittest
from typing import Any

from helpers.support import (
    KEY,
    OTHER_KEY,
    PRINCIPAL,
    Clock,
    Log,
    accept,
    answered,
    call,
    make_server,
    note_ids,
    tps,
    unb64,
)

import frame
import main

ALL = 6  # notes in the lesson fixture


def split(token: str) -> list[str]:
    return token.split(".")


class Sealing(unittest.TestCase):
    def test_seal_then_open_round_trips_the_claims(self) -> None:
        signer = frame.KeyRing([KEY])
        claims = {"sub": "alice", "n": [1, "x"], "exp": 12.5}
        self.assertEqual(signer.verify(signer.sign(claims)), claims)

    def test_the_token_has_four_parts_and_its_claims_are_readable_not_secret(self) -> None:
        token = frame.KeyRing([KEY]).sign({"sub": "alice"})
        version, key_id, payload, mac = split(token)
        self.assertEqual(version, main.STATE_VERSION)
        self.assertEqual(json.loads(unb64(payload)), {"sub": "alice"})
        self.assertEqual(len(unb64(mac)), 32)
        self.assertNotIn(KEY.hex(), token)

    def test_keys_shorter_than_the_minimum_are_refused_and_the_minimum_is_accepted(self) -> None:
        frame.KeyRing([b"k" * main.MIN_KEY_BYTES])
        keys: Any  # values of several types, on purpose
        for keys in ([b"k" * (main.MIN_KEY_BYTES - 1)], [], b"k" * 64, ["k" * 64], [KEY, b"short"]):
            with self.subTest(keys=str(keys)[:40]):
                with self.assertRaises(ValueError):
                    frame.KeyRing(keys)

    def test_rotation_newest_key_signs_and_every_listed_key_verifies(self) -> None:
        old = frame.KeyRing([OTHER_KEY])
        rotated = frame.KeyRing([KEY, OTHER_KEY])
        old_token = old.sign({"a": 1})
        self.assertEqual(rotated.verify(old_token), {"a": 1})
        self.assertEqual(split(rotated.sign({"a": 1}))[1], main.StateSigner.key_id(KEY))
        with self.assertRaises(main.StateError):
            frame.KeyRing([KEY]).verify(old_token)  # the retired key no longer verifies

    def test_one_token_has_one_spelling(self) -> None:
        signer = frame.KeyRing([KEY])
        token = signer.sign({"sub": "alice", "x": "yz"})
        version, key_id, payload, mac = split(token)
        mac_bytes = unb64(mac)
        variants = {
            "padded mac": f"{version}.{key_id}.{payload}.{mac}=",
            "standard alphabet": token.replace("-", "+").replace("_", "/")
            if ("-" in token or "_" in token)
            else token + "+",
            "spare bits set": f"{version}.{key_id}.{payload}.{mac[:-1]}{chr(ord(mac[-1]) + 1)}",
            "padded payload": f"{version}.{key_id}.{payload}==.{mac}",
            "standard base64 mac": f"{version}.{key_id}.{payload}.{base64.b64encode(mac_bytes).decode()}",
            "whitespace": f" {token}",
            "extra part": f"{token}.x",
            "upper version": token.replace("v1.", "V1.", 1),
            "unknown key": f"{version}.00000000.{payload}.{mac}",
            "empty": "",
            "not a string": 12,
            "mac of other bytes": f"{version}.{key_id}.{payload}.{main.b64url_encode(bytes(32))}",
            "truncated mac": f"{version}.{key_id}.{payload}.{main.b64url_encode(mac_bytes[:16])}",
        }
        for label, variant in variants.items():
            with self.subTest(label):
                with self.assertRaises(main.StateError):
                    signer.verify(variant)

    def test_a_state_in_another_format_version_is_refused_even_with_a_valid_mac(self) -> None:
        # The day a v2 format exists, a v1 verifier must not read a v2 state as v1.
        head = f"v2.{main.StateSigner.key_id(KEY)}.{main.b64url_encode(main.canonical_json({'sub': 'alice'}))}"
        mac = hmac.new(KEY, head.encode(), hashlib.sha256).digest()
        with self.assertRaises(main.StateError):
            frame.KeyRing([KEY]).verify(f"{head}.{main.b64url_encode(mac)}")

    def test_a_state_of_exactly_the_length_limit_verifies(self) -> None:
        signer = frame.KeyRing([KEY])
        # The payload grows 4 characters per 3 bytes: start a few bytes short of the limit, not at 0.
        pad = max(0, (main.MAX_STATE_LENGTH - len(signer.sign({"pad": ""}))) * 3 // 4 - 8)
        self.assertLess(len(signer.sign({"pad": "x" * pad})), main.MAX_STATE_LENGTH)
        while len(token := signer.sign({"pad": "x" * pad})) < main.MAX_STATE_LENGTH:
            pad += 1
        self.assertEqual(len(token), main.MAX_STATE_LENGTH)  # reachable: the payload grows 4 chars per 3 bytes
        self.assertEqual(signer.verify(token), {"pad": "x" * pad})

    def test_oversized_state_is_refused_before_any_hashing(self) -> None:
        signer = frame.KeyRing([KEY])
        with self.assertRaises(main.StateError) as caught:
            signer.verify("v1." + "a" * main.MAX_STATE_LENGTH)
        self.assertIn("oversized", str(caught.exception))


class Bindings(unittest.TestCase):
    """Every claim the state binds, presented wrongly, is one fixed -32602 with nothing mutated."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.log = Log()
        self.server = make_server(clock=self.clock, log=self.log)
        self.state = answered(self.server, call(tps()), PRINCIPAL)["result"]["requestState"]
        self.claims = frame.KeyRing([KEY]).verify(self.state)

    def retry(self, state, principal: str = PRINCIPAL, arguments: dict | None = None) -> dict:
        return answered(
            self.server, call(arguments or tps(), id=2, requestState=state, inputResponses=accept()), principal
        )

    def assert_refused(self, response: dict) -> None:
        self.assertEqual(
            response["error"], {"code": main.INVALID_PARAMS, "message": "Invalid params: requestState is not valid"}
        )
        self.assertEqual(len(note_ids(self.server)), ALL)

    def forged(self, **changes) -> str:
        return frame.KeyRing([KEY]).sign({**self.claims, **changes})

    def test_the_state_binds_principal_tool_method_arguments_phase_candidates_nonce_and_expiry(self) -> None:
        self.assertEqual(
            sorted(self.claims), ["args", "cands", "exp", "iat", "method", "nonce", "phase", "sub", "tool"]
        )
        self.assertEqual(self.claims["sub"], PRINCIPAL)
        self.assertEqual([c[0] for c in self.claims["cands"]], ["note-3", "note-7", "note-14"])
        self.assertTrue(all(len(c[1]) == 32 for c in self.claims["cands"]))

    def test_tampered_state_is_refused(self) -> None:
        version, key_id, payload, mac = split(self.state)
        claims = json.loads(unb64(payload))
        claims["cands"].append(["evil-1", "0" * 32])
        tampered = f"{version}.{key_id}.{main.b64url_encode(main.canonical_json(claims))}.{mac}"
        self.assert_refused(self.retry(tampered))

    def test_state_forged_with_another_key_is_refused(self) -> None:
        self.assert_refused(self.retry(frame.KeyRing([OTHER_KEY]).sign(self.claims)))

    def test_state_presented_by_another_principal_is_refused(self) -> None:
        self.server.tools[main.TOOL_NAME].policy = main.AuthorizationPolicy(
            {PRINCIPAL: [main.LESSON_WORKSPACE], "bob": [main.LESSON_WORKSPACE]}
        )
        self.assert_refused(self.retry(self.state, principal="bob"))

    def test_state_for_another_tool_method_or_phase_is_refused(self) -> None:
        for change in ({"tool": "notes_publish"}, {"method": "prompts/get"}, {"phase": "connect"}):
            with self.subTest(change=change):
                self.assert_refused(self.retry(self.forged(**change)))

    def test_state_with_malformed_claims_is_refused(self) -> None:
        for change in ({"exp": "never"}, {"exp": None}, {"exp": True}, {"nonce": 5}, {"cands": "all"}):
            with self.subTest(change=change):
                self.assert_refused(self.retry(self.forged(**change)))

    def test_a_mac_segment_that_is_not_strict_base64url_gets_the_one_32602_without_a_traceback(self) -> None:
        version, key_id, payload, mac = split(self.state)
        for label, bad in {"length 1 mod 4": mac + "AA", "bang": mac[:-1] + "!", "padding": mac[:-2] + "=="}.items():
            with self.subTest(label):
                self.assert_refused(self.retry(f"{version}.{key_id}.{payload}.{bad}"))
        self.assertFalse(any("Traceback" in line or "internal error" in line for line in self.log))

    def test_malformed_payload_fields_are_refused_one_by_one(self) -> None:
        good = dict(self.claims)
        self.assertEqual(main.StatePayload.parse(good).nonce, good["nonce"])
        bad: dict[str, dict[str, Any]] = {
            "iat true": {"iat": True},
            "iat infinite": {"iat": float("-inf")},
            "exp infinite": {"exp": float("inf")},
            "exp nan": {"exp": float("nan")},
            "cands an object": {"cands": {}},
            "cands a string": {"cands": ""},
            "a candidate as a string": {"cands": ["ab"]},
            "a candidate of one": {"cands": [["note-14"]]},
            "a candidate of three": {"cands": [["note-14", "v", "x"]]},
            "a candidate version not a string": {"cands": [["note-14", 1]]},
            "a candidate id not a string": {"cands": [[14, "v"]]},
            "a candidate of two non-strings": {"cands": [[14, 1]]},
            "extra not an object": {"extra": [1]},
            "no method": {"method": None},
        }
        for label, change in bad.items():
            with self.subTest(label):
                with self.assertRaises(main.StateError):
                    main.StatePayload.parse({**good, **change})

    def test_a_state_whose_issue_time_is_a_boolean_or_whose_expiry_is_infinite_is_refused(self) -> None:
        # A boolean is a number to Python (True == 1.0) and infinity never expires.
        for change in ({"iat": True}, {"exp": float("inf")}):
            with self.subTest(change=change):
                self.assert_refused(self.retry(self.forged(**change)))

    def test_non_object_claims_are_refused(self) -> None:
        signer = frame.KeyRing([KEY])
        for claims in ([1], "x"):
            head = f"v1.{main.StateSigner.key_id(KEY)}.{main.b64url_encode(json.dumps(claims).encode())}"
            mac = hmac.new(KEY, head.encode(), hashlib.sha256).digest()
            with self.assertRaises(main.StateError):
                signer.verify(f"{head}.{main.b64url_encode(mac)}")

    def test_a_state_whose_payload_holds_a_non_ascii_character_gets_the_one_32602(self) -> None:
        version, key_id, payload, mac = split(self.state)
        for odd in ("é", "\u2028", "\udc80"):
            with self.subTest(odd=odd):
                self.assert_refused(self.retry(f"{version}.{key_id}.{payload[:-1]}{odd}.{mac}"))
        self.assertFalse(any("Traceback" in line or "internal error" in line for line in self.log))

    def test_a_state_issued_in_the_future_beyond_the_skew_is_refused_and_within_it_accepted(self) -> None:
        self.assert_refused(self.retry(self.forged(iat=self.clock.now + main.MAX_CLOCK_SKEW_SECONDS + 0.001)))
        self.assertTrue(any("issued in the future" in line for line in self.log))
        result = self.retry(self.forged(iat=self.clock.now + main.MAX_CLOCK_SKEW_SECONDS))["result"]
        self.assertEqual(result["structuredContent"], {"deleted": True, "noteId": "note-14"})

    def test_a_state_living_longer_than_the_ttl_is_refused_even_when_signed_with_the_key(self) -> None:
        ttl = main.DEFAULT_STATE_TTL_SECONDS
        self.assertEqual(self.claims["exp"] - self.claims["iat"], ttl)  # what the server signs
        for exp in (self.claims["iat"] + ttl + 0.001, self.claims["iat"] + 10 * 365 * 86400):
            with self.subTest(exp=exp):
                self.assert_refused(self.retry(self.forged(exp=exp)))
        self.assertTrue(any("lifetime longer than the TTL" in line for line in self.log))
        self.assertEqual(len(note_ids(self.server)), ALL)  # nothing was deleted
        result = self.retry(self.forged(exp=self.claims["iat"] + ttl))["result"]
        self.assertEqual(result["structuredContent"], {"deleted": True, "noteId": "note-14"})

    def test_a_null_request_state_beside_answers_is_a_malformed_pairing_not_a_first_call(self) -> None:
        response = answered(self.server, call(tps(), id=2, requestState=None, inputResponses=accept()), PRINCIPAL)
        self.assert_refused(response)
        for state in (5, ["x"], {"a": 1}, True):
            with self.subTest(state=state):
                self.assert_refused(
                    answered(self.server, call(tps(), id=3, requestState=state, inputResponses=accept()), PRINCIPAL)
                )

    def test_expiry_is_accepted_just_inside_and_refused_at_the_limit(self) -> None:
        self.clock.now = self.claims["exp"]
        self.assert_refused(self.retry(self.state))
        self.clock.now = self.claims["exp"] - 0.001
        result = self.retry(self.state)["result"]
        self.assertEqual(result["structuredContent"], {"deleted": True, "noteId": "note-14"})

    def test_an_expired_state_answered_cancel_or_not_answered_is_refused_at_and_after_expiry(self) -> None:
        # Cancel and "no answer" act on nothing, yet an expired state must not keep a flow
        # alive: "no answer" would sign a fresh form onto a dead confirmation.
        answers = {"cancel": {main.INPUT_KEY: {"action": "cancel"}}, "no answer": {}}
        for offset in (0.0, 1.0):
            self.clock.now = self.claims["exp"] + offset
            for label, responses in answers.items():
                with self.subTest(label, after=offset):
                    response = answered(
                        self.server, call(tps(), id=5, requestState=self.state, inputResponses=responses), PRINCIPAL
                    )
                    self.assert_refused(response)
                    self.assertNotIn("result", response)
        self.assertEqual(len(self.server.services.replay), 0)

    def test_the_nonce_carries_128_random_bits(self) -> None:
        self.assertEqual(len(unb64(self.claims["nonce"])), 16)

    def test_default_lifetime_is_the_named_ttl(self) -> None:
        self.assertEqual(self.claims["exp"] - self.claims["iat"], main.DEFAULT_STATE_TTL_SECONDS)

    def test_the_reason_for_a_refusal_goes_to_the_log_not_the_wire(self) -> None:
        response = self.retry(self.forged(tool="notes_publish"))
        self.assertNotIn("tool", response["error"]["message"])
        self.assertTrue(any("tool does not match" in line for line in self.log))

    def test_a_forged_state_never_reaches_the_replay_store(self) -> None:
        replay = self.server.services.replay
        for _ in range(50):
            self.retry(frame.KeyRing([OTHER_KEY]).sign(self.claims))
        self.assertEqual(len(replay), 0)


class ServerConstruction(unittest.TestCase):
    def test_state_ttl_must_be_finite_positive_and_bounded(self) -> None:
        lesson = make_server()
        ttl: Any  # values of several types, on purpose
        for ttl in (0, -1, float("nan"), float("inf"), main.MAX_STATE_TTL_SECONDS + 1, "300"):
            with self.subTest(ttl=ttl):
                with self.assertRaises(ValueError):
                    frame.notes_server(keys=[KEY], notes=lesson.notes, policy=lesson.policy, state_ttl=ttl)
        for ttl in (main.MAX_STATE_TTL_SECONDS, 0.5):  # the top of (0, MAX] and a lifetime under a second
            server = frame.notes_server(keys=[KEY], notes=lesson.notes, policy=lesson.policy, state_ttl=ttl)
            self.assertEqual(server.services.signer.ttl, ttl)

    def test_the_signing_key_is_never_a_constant_in_the_source(self) -> None:
        source = inspect.getsource(main)
        self.assertNotIn("keys=[b", source.replace(" ", ""))
        with self.assertRaises(TypeError):
            frame.notes_server(notes=make_server().notes, policy=make_server().policy)  # type: ignore[call-arg]
        self.assertIn("secrets.token_bytes(32)", inspect.getsource(main.demo))


if __name__ == "__main__":
    unittest.main()

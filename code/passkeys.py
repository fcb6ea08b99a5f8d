"""The WebAuthn checks of the confirmation page's passkeys, on Yubico's `fido2` (the optional extra
notes-mcp[passkeys]).

This module alone imports the library; serve.py imports it only when --passkeys is offer
or require, and code/passkey_pages.py (standard library) calls the two functions below:

    registered  a `navigator.credentials.create` response: its client data (type, challenge,
                origin), its authenticator data (RP ID hash, user present, user verified) and
                the credential it attests (id, public key); the credential to keep
    asserted    a `navigator.credentials.get` response: the same client-data and flag checks,
                then the signature over authenticatorData || SHA-256(clientDataJSON) with the
                stored public key; the authenticator's sign count (the caller compares it)

Each raises Refused with a reason fit for the page and the log; no byte a browser sent
reaches any other exception. The attestation statement is not checked (the page asks for
"none"): what makes a credential the principal's is the token sign-in it was registered in.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from fido2 import cbor
from fido2.cose import CoseKey, UnsupportedKey
from fido2.utils import websafe_decode, websafe_encode
from fido2.webauthn import AttestationObject, AuthenticatorData, CollectedClientData

__all__ = ["Refused", "asserted", "decode", "registered"]


class Refused(Exception):
    """A WebAuthn response that does not prove what it must; the message says which check failed."""


def decode(text: str) -> bytes:
    """A base64url field of the page's form as bytes (Refused when it is not one)."""
    try:
        return websafe_decode(text)
    except (ValueError, TypeError) as exc:
        raise Refused("a field is not base64url") from exc


def _client_data(raw: bytes, kind: str, challenge: bytes, origin: str) -> None:
    """clientDataJSON names this ceremony, this challenge and the page's own origin."""
    client = CollectedClientData(raw)
    if client.type != kind:
        raise Refused(f"client data is not {kind}")
    # Phishing and cross-binding: the browser writes the origin it ran on, and the challenge
    # is a MAC over exactly what this response may approve.
    if not hmac.compare_digest(client.challenge, challenge):
        raise Refused("the challenge is not this page's")
    if client.origin != origin:
        raise Refused("the origin is not this server's pages")
    if client.cross_origin:
        raise Refused("made in a cross-origin frame")


def _flags(auth: AuthenticatorData, rp_id: str) -> None:
    """The authenticator signed for this RP ID, with the person present and verified (PIN, fingerprint, face)."""
    if not hmac.compare_digest(auth.rp_id_hash, hashlib.sha256(rp_id.encode("ascii")).digest()):
        raise Refused("the RP ID hash is not this server's")
    if not auth.is_user_present():
        raise Refused("no user presence")
    # A model can press no fingerprint reader: an assertion without UV proves only a touch, or nothing.
    if not auth.is_user_verified():
        raise Refused("no user verification")


def registered(
    client_data: bytes, attestation: bytes, challenge: bytes, origin: str, rp_id: str
) -> tuple[str, str, int]:
    """(credential id, COSE public key, sign count), both base64url, of a verified registration; else Refused."""
    try:
        _client_data(client_data, "webauthn.create", challenge, origin)
        auth = AttestationObject(attestation).auth_data
        _flags(auth, rp_id)
        credential = auth.credential_data
        if credential is None:
            raise Refused("no attested credential")
        key: Any = credential.public_key
        if isinstance(CoseKey.parse(dict(key)), UnsupportedKey):
            raise Refused("an unsupported key algorithm")
        return websafe_encode(credential.credential_id), websafe_encode(cbor.encode(dict(key))), int(auth.counter)
    except Refused:
        raise
    except Exception as exc:  # every byte is hostile: any parse failure is one refusal
        raise Refused("a malformed registration") from exc


def asserted(
    client_data: bytes,
    authenticator_data: bytes,
    signature: bytes,
    challenge: bytes,
    origin: str,
    rp_id: str,
    public_key: str,
) -> int:
    """The sign count of an assertion whose client data, flags and signature all verify; else Refused."""
    try:
        _client_data(client_data, "webauthn.get", challenge, origin)
        auth = AuthenticatorData(authenticator_data)
        _flags(auth, rp_id)
        stored = cbor.decode(websafe_decode(public_key))
        if not isinstance(stored, dict):
            raise Refused("the stored key is not a COSE key")
        key = CoseKey.parse(stored)
        key.verify(bytes(authenticator_data) + hashlib.sha256(client_data).digest(), signature)
        return int(auth.counter)
    except Refused:
        raise
    except Exception as exc:  # InvalidSignature, a malformed structure, an unknown key: one refusal
        raise Refused("the signature or the assertion does not verify") from exc

"""Signing, verifying, reading and consuming the states of the product's asking tools.

`notes_delete` (code/main.py, section 7) runs its own cycle in the open, as the lesson
tells it. The product's confirmed tools (code/browser_confirm.py's Confirmed: every form and
URL-mode answer is read here), `notes_publish` in code/connect.py and the conformance
fixtures (several questions, in several steps, some of them sampling or roots requests)
go through this class, which is built on the lesson's functions and adds no check of its own:

    ask      main.new_state + StateSigner.sign + main.input_required
    verify   main.verify_state (the one verification)
    answer   main.read_answer + main.chosen (the one answer reader)
    consume  main.consume (the one claim, in the store's atomic step)

Standard library only.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import main

__all__ = ["Reply", "Confirmations"]


class Reply(enum.Enum):
    """What the answers to one step mean for a tool's flow (the lesson's section 6 table)."""

    ASK_AGAIN = "ask again"  # no answer to our question
    CANCELLED = "cancelled"  # the state stays usable until it expires
    DECLINED = "declined"  # the confirmation is consumed
    ACCEPTED = "accepted"  # the content (and the choice) go to the tool


class Answered(NamedTuple):
    """The one reading of a retry's answers: the Reply, and what an accept carried."""

    reply: Reply
    content: dict[str, Any]  # accepted: each question's answer by key
    chosen: tuple[str, str] | None  # accepted with a choice: (note id, version shown)


class Confirmations:
    """Sign, verify, read and consume the states of multi-step asking tools, through main.py's functions."""

    def __init__(self, services: main.Services) -> None:
        self.services = services

    def ask(
        self,
        call: main.ToolCall,
        args_digest: str,
        phase: str,
        requests: dict[str, Any],
        cands: Iterable[tuple[str, str]],
        extra: Mapping[str, Any] | None = None,
        *,
        follows: main.StatePayload | None = None,
    ) -> dict[str, Any]:
        """`input_required` with the questions and a signed state (one that `follows` keeps its nonce and expiry)."""
        claims = main.new_state(self.services, call.principal, call.name, args_digest, phase, cands, follows, extra)
        return main.input_required(requests, self.services.signer.sign(claims))

    def verify(self, call: main.ToolCall, args_digest: str, phases: Collection[str]) -> main.StatePayload:
        """The echoed state, verified for this call by main.verify_state; else the one -32602."""
        return main.verify_state(self.services, call.state, call.principal, call.name, args_digest, phases)

    def answer(
        self,
        call: main.ToolCall,
        state: main.StatePayload,
        keys: Sequence[str],
        *,
        forms: Collection[str] | None = None,
        choice: str | None = None,
        consume: Callable[[str, main.StatePayload], Any] | None = None,
    ) -> Answered:
        """The answers to a verified state's questions, read once (main.read_answer); a decline consumes the state.

        `keys` are the questions asked, in order; those in `forms` (by default all) are
        elicitation results, any other (a sampling or roots answer) is taken as sent. With
        `choice`, the first form's value of that field must be one the state offered. A
        decline is consumed by `consume` (by default `self.consume`; the page's cycle closes its page with it).
        """
        content: dict[str, Any] = {}
        for key in keys:
            if forms is not None and key not in forms:
                sent = (call.responses or {}).get(key)
                if sent is None:
                    return Answered(Reply.ASK_AGAIN, {}, None)
                content[key] = sent
                continue
            answer = main.read_answer(call.responses, key)
            if answer is None:
                return Answered(Reply.ASK_AGAIN, {}, None)
            if answer.action == "cancel":
                return Answered(Reply.CANCELLED, {}, None)  # dismissed: the state stays usable
            if answer.action == "decline":
                (consume or self.consume)(call.principal, state)
                return Answered(Reply.DECLINED, {}, None)
            content[key] = answer.content
        picked = main.chosen(content[keys[0]], state, choice) if choice is not None else None
        return Answered(Reply.ACCEPTED, content, picked)

    def consume(
        self,
        principal: str,
        state: main.StatePayload,
        target: tuple[str, str] | None = None,
        recheck: Any = main.refuse_every_note,
    ) -> main.Settlement:
        """Consume a verified state's nonce (and act on `target`) through main.consume."""
        return main.consume(self.services, principal, state, target, recheck)

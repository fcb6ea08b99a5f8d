"""Conformance fixtures: the tools, prompts, resources and completions the official suite calls.

Off by default. `python3 code/serve.py --http --conformance-fixtures` imports this module
and calls `install(server)`; nothing else does. Everything here goes through the core's
public seams, exactly like notes_delete and notes_publish:

    server.add_tool(tool)                         each fixture tool (tools/list, tools/call)
    server.add_method(name, handler, capability)  prompts/*, resources/*, completion/complete

Multi-round fixtures are given the core's one confirmation cycle (`server.confirmations`:
ask, verify, answer, consume), so an answer means what it means for notes_delete (a
cancel leaves the state usable, a decline consumes it): their `requestState` is signed, bound to the
principal, the tool and its arguments, and consumed once, so a tampered or replayed state
gets the core's -32602. Capability checks name what is missing with -32021, as
`main.require_form_elicitation` does. None of this data is real: the fixture values are
the suite's, and no fixture touches the notes store's notes. Standard library only.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import confirmations
import frame
import main

__all__ = ["install"]

LIST_TTL_MS = 3_600_000  # cache hints for prompts/list, resources/list, templates and reads
MAX_COMPLETIONS = 100  # CompleteResult.completion.values may hold at most this many
MAX_TEMPLATE_ID_LENGTH = 64  # characters of `{id}` in test://template/{id}/data
MAX_ANSWER_TEXT = 1000  # characters of one sampled or elicited answer a fixture keeps in its state
MAX_ANSWER_ITEMS = 16  # items of one multi-select answer a fixture keeps in its state

# 1x1 PNG and a 44-byte WAV header: the smallest valid payloads of each kind.
PNG_BASE64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV_BASE64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def text(value: str) -> dict[str, Any]:
    """A text content block."""
    return {"type": "text", "text": value}


def image() -> dict[str, Any]:
    """An image content block (the fixture PNG)."""
    return {"type": "image", "data": PNG_BASE64, "mimeType": "image/png"}


def complete(content: list[dict[str, Any]], *, is_error: bool = False) -> dict[str, Any]:
    """A complete CallToolResult with these content blocks."""
    return {"resultType": "complete", "content": content, "isError": is_error}


def missing_capability(required: dict[str, Any]) -> main.McpError:
    """-32021 naming exactly the capabilities this request lacks."""
    return main.McpError(
        main.MISSING_REQUIRED_CLIENT_CAPABILITY,
        "Server requires client capabilities this request does not declare",
        {"requiredCapabilities": required},
    )


# =====================================================================================
# Input validation: the subset of JSON Schema the fixtures' inputSchemas use
# =====================================================================================


def schema_errors(schema: Mapping[str, Any], value: Any, root: Mapping[str, Any]) -> list[str]:
    """What is wrong with `value` under `schema` (empty: valid); `root` resolves `#/$defs/...`."""
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return schema_errors(root["$defs"][ref.removeprefix("#/$defs/")], value, root)
    errors: list[str] = []
    kind = schema.get("type")
    checks: dict[str, Callable[[Any], bool]] = {
        "object": lambda v: isinstance(v, dict),
        "string": lambda v: isinstance(v, str),
        "boolean": lambda v: isinstance(v, bool),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
    }
    if kind in checks and not checks[kind](value):
        return [f"must be a {kind}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append("must be one of " + ", ".join(map(str, schema["enum"])))
    if "const" in schema and value != schema["const"]:
        errors.append(f"must be {schema['const']!r}")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{name} is required")
        for name, item in value.items():
            if name in properties:
                errors += [f"{name} {e}" for e in schema_errors(properties[name], item, root)]
            elif schema.get("additionalProperties") is False:
                errors.append(f"unexpected property {name!r}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            errors += [f"item {e}" for e in schema_errors(schema["items"], item, root)]
    if "oneOf" in schema and sum(not schema_errors(part, value, root) for part in schema["oneOf"]) != 1:
        errors.append("must match exactly one of the alternatives")
    for part in schema.get("allOf", []):
        errors += schema_errors(part, value, root)
    if "anyOf" in schema and all(schema_errors(part, value, root) for part in schema["anyOf"]):
        errors.append("matches none of the alternatives")
    if "if" in schema:
        branch = schema.get("else" if schema_errors(schema["if"], value, root) else "then")
        errors += schema_errors(branch, value, root) if branch else []
    return errors


def read_arguments(call: main.ToolCall, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The call's arguments checked against its inputSchema: -32602 if not an object, isError if invalid."""
    if not isinstance(call.arguments, dict):
        raise main.McpError(main.INVALID_PARAMS, f"Invalid params: arguments for tool {call.name} must be an object")
    errors = schema_errors(schema, call.arguments, schema)
    if errors:
        raise main.ToolError(f"Invalid arguments for tool {call.name}: {errors[0]}.")
    return call.arguments


# =====================================================================================
# Tools that answer at once
# =====================================================================================


@dataclasses.dataclass(frozen=True)
class Fixture:
    """A tool whose answer is a function of its validated arguments and the call."""

    descriptor: dict[str, Any]
    run: Callable[[main.ToolCall, dict[str, Any]], dict[str, Any]]

    def call(self, call: main.ToolCall) -> dict[str, Any]:
        """Validate the arguments, then run."""
        return self.run(call, read_arguments(call, self.descriptor["inputSchema"]))


def tool(
    name: str,
    description: str,
    run: Callable[[main.ToolCall, dict[str, Any]], dict[str, Any]],
    schema: dict[str, Any] | None = None,
) -> Fixture:
    """A fixture tool; no schema means it takes no arguments."""
    return Fixture({"name": name, "description": description, "inputSchema": schema or EMPTY_SCHEMA}, run)


def with_progress(call: main.ToolCall, args: dict[str, Any]) -> dict[str, Any]:
    """Three progress notifications (0, 50, 100 of 100) when the request asked for them, then text."""
    notify, token = frame.context().notify, frame.context().progress_token
    if notify is not None and token is not None:
        for step in (0, 50, 100):
            params = {"progressToken": token, "progress": step, "total": 100}
            notify({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
    return complete([text("Progress complete.")])


def needs_sampling(call: main.ToolCall, args: dict[str, Any]) -> dict[str, Any]:
    """Runs only for a request that declares sampling; otherwise -32021 before anything happens."""
    if not isinstance(call.meta.capabilities.get("sampling"), dict):
        raise missing_capability({"sampling": {}})
    return complete([text("The request declared sampling.")])


def error_result(call: main.ToolCall, args: dict[str, Any]) -> dict[str, Any]:
    """Always a tool execution error (isError), never a protocol error."""
    raise main.ToolError("This tool intentionally returns an error for testing")


JSON_SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}

HEADER_PARAM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region", "description": "Mirrored in Mcp-Param-Region."}
    },
    "required": ["region"],
    "additionalProperties": False,
}


def plain_tools() -> list[Fixture]:
    """Every fixture tool that answers in one round."""
    mixed = {
        "uri": "test://mixed-content-resource",
        "mimeType": "application/json",
        "text": '{"test":"data","value":123}',
    }
    embedded = {
        "uri": "test://embedded-resource",
        "mimeType": "text/plain",
        "text": "This is an embedded resource content.",
    }
    return [
        tool(
            "test_simple_text",
            "Returns one text block.",
            lambda c, a: complete([text("This is a simple text response for testing.")]),
        ),
        tool("test_image_content", "Returns one PNG image block.", lambda c, a: complete([image()])),
        tool(
            "test_audio_content",
            "Returns one WAV audio block.",
            lambda c, a: complete([{"type": "audio", "data": WAV_BASE64, "mimeType": "audio/wav"}]),
        ),
        tool(
            "test_embedded_resource",
            "Returns one embedded text resource.",
            lambda c, a: complete([{"type": "resource", "resource": embedded}]),
        ),
        tool(
            "test_multiple_content_types",
            "Returns text, an image and an embedded resource.",
            lambda c, a: complete(
                [text("Multiple content types test:"), image(), {"type": "resource", "resource": mixed}]
            ),
        ),
        tool("test_error_handling", "Always returns a tool execution error (isError).", error_result),
        tool(
            "test_tool_with_progress", "Sends three progress notifications when given a progressToken.", with_progress
        ),
        tool("test_missing_capability", "Requires the client's sampling capability (else -32021).", needs_sampling),
        # No log notification without the request's own logLevel: this core reads no
        # per-request log level, so the tool never logs (the suite checks that absence).
        tool(
            "test_logging_tool",
            "Completes without log notifications unless the request sets a log level.",
            lambda c, a: complete([text("Logging tool done.")]),
        ),
        tool(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features",
            lambda c, a: complete([text("Valid: " + json.dumps(a, sort_keys=True))]),
            JSON_SCHEMA_2020_12,
        ),
        tool(
            "test_header_param",
            "Echoes its region argument, which is mirrored in the Mcp-Param-Region header.",
            lambda c, a: complete([text("Region: " + a["region"])]),
            HEADER_PARAM_SCHEMA,
        ),
    ]


# =====================================================================================
# Tools that ask first (input_required), through the core's confirmation cycle
# =====================================================================================


@dataclasses.dataclass(frozen=True)
class Question:
    """One entry of `inputRequests`: its key, the request, and the client capability it needs."""

    key: str
    request: dict[str, Any]

    @property
    def method(self) -> str:
        """elicitation/create, sampling/createMessage or roots/list."""
        return self.request["method"]


def form(key: str, message: str, field: str, kind: str = "string") -> Question:
    """A one-field form elicitation."""
    return form_of(key, message, {field: {"type": kind}}, [field])


def form_of(key: str, message: str, properties: dict[str, Any], required: list[str] | None = None) -> Question:
    """A form elicitation with these field schemas (and these required fields)."""
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return Question(
        key, {"method": "elicitation/create", "params": {"mode": "form", "message": message, "requestedSchema": schema}}
    )


def sample(key: str, prompt: str, max_tokens: int) -> Question:
    """A sampling request with one user message."""
    params = {"messages": [{"role": "user", "content": text(prompt)}], "maxTokens": max_tokens}
    return Question(key, {"method": "sampling/createMessage", "params": params})


def roots(key: str) -> Question:
    """A roots/list request."""
    return Question(key, {"method": "roots/list", "params": {}})


def declares(capabilities: Mapping[str, Any], method: str) -> bool:
    """True when this request's client can answer `method`."""
    if method == "elicitation/create":
        return main.supports_form_elicitation(capabilities)
    name = {"sampling/createMessage": "sampling", "roots/list": "roots"}[method]
    return isinstance(capabilities.get(name), dict)


REQUIRED_FOR: dict[str, dict[str, Any]] = {
    "elicitation/create": {"elicitation": {"form": {}}},
    "sampling/createMessage": {"sampling": {}},
    "roots/list": {"roots": {}},
}


def kept(question: Question, sent: Any) -> dict[str, Any]:
    """An accepted answer to one question in the form the fixture keeps, or -32602.

    Which answers count (none yet, cancelled, declined, accepted) is decided before this,
    once for every tool, by the core's Confirmations.answer; this only checks the content.
    """
    if question.method == "elicitation/create":
        schema = question.request["params"]["requestedSchema"]
        # Only the form's own fields are kept, each checked against its schema and cut to
        # a bound: what a client adds or inflates never reaches the signed state.
        content = {name: value for name, value in sent.items() if name in schema["properties"]}
        if schema_errors(schema, content, schema):
            raise main.McpError(main.INVALID_PARAMS, "Invalid params: the answer does not match the form")
        return {name: bounded(value) for name, value in content.items()}
    if question.method == "sampling/createMessage":
        answer = sent.get("content") if isinstance(sent, dict) else None
        if not isinstance(answer, dict) or answer.get("type") != "text" or not isinstance(answer.get("text"), str):
            raise main.McpError(
                main.INVALID_PARAMS, f"Invalid params: inputResponses.{question.key} must be a text sampling result"
            )
        return {"text": answer["text"][:MAX_ANSWER_TEXT]}
    found = sent.get("roots") if isinstance(sent, dict) else None
    if not isinstance(found, list) or not all(isinstance(r, dict) and isinstance(r.get("uri"), str) for r in found):
        raise main.McpError(
            main.INVALID_PARAMS, f"Invalid params: inputResponses.{question.key} must be a roots result"
        )
    return {"uris": [r["uri"][: main.MAX_URI_LENGTH] for r in found[: main.MAX_CANDIDATES]]}


def bounded(value: Any) -> Any:
    """A form value cut to the fixtures' bounds (text to MAX_ANSWER_TEXT, lists to MAX_ANSWER_ITEMS)."""
    if isinstance(value, str):
        return value[:MAX_ANSWER_TEXT]
    if isinstance(value, list):
        return [bounded(item) for item in value[:MAX_ANSWER_ITEMS]]
    return value


Rounds = list[list[Question]] | Callable[[dict[str, Any]], list[list[Question]]]


class AskingTool:
    """A tool that asks one or more rounds of questions, then answers from what it was told.

    Round n's answers travel to round n+1 in the signed state (`extra`), so a client never
    resends them; the final round consumes the state's nonce, so its answer counts once.
    With `only_declared`, a round asks only what this request's client can answer. The
    rounds may be a function of the validated arguments (which the state is bound to).
    """

    def __init__(
        self,
        confirmations: confirmations.Confirmations,
        name: str,
        description: str,
        rounds: Rounds,
        finish: Callable[[dict[str, Any]], str],
        *,
        only_declared: bool = False,
        schema: dict[str, Any] | None = None,
    ) -> None:
        self.confirmations = confirmations
        self.descriptor: dict[str, Any] = {
            "name": name,
            "description": description,
            "inputSchema": schema or EMPTY_SCHEMA,
        }
        self.rounds = rounds
        self.finish = finish
        self.only_declared = only_declared

    def questions(self, call: main.ToolCall, rounds: list[list[Question]], index: int) -> list[Question]:
        """Round `index`'s questions for this request's client, or -32021 naming what it lacks."""
        wanted = rounds[index]
        usable = [q for q in wanted if declares(call.meta.capabilities, q.method)]
        if self.only_declared and usable:
            return usable
        if len(usable) < len(wanted) or not usable:
            missing: dict[str, Any] = {}
            for q in wanted:
                if not declares(call.meta.capabilities, q.method):
                    missing |= REQUIRED_FOR[q.method]
            raise missing_capability(missing)
        return usable

    def call(self, call: main.ToolCall) -> dict[str, Any]:
        """First call: ask round 0. Retry: verify the state, read the answers, then ask again, ask on, or finish."""
        arguments = read_arguments(call, self.descriptor["inputSchema"])
        rounds = self.rounds(arguments) if callable(self.rounds) else self.rounds
        args_digest = main.digest(arguments)
        if call.state is None:
            return self.ask(call, args_digest, rounds, 0, {})
        phases = {f"round-{i}" for i in range(len(rounds))}
        state = self.confirmations.verify(call, args_digest, phases)  # tampered, replayed, foreign: -32602
        index = int(state.phase.removeprefix("round-"))
        asked = self.questions(call, rounds, index)
        forms = {q.key for q in asked if q.method == "elicitation/create"}
        answered = self.confirmations.answer(call, state, [q.key for q in asked], forms=forms)
        told = dict(state.extra)
        if answered.reply is confirmations.Reply.ASK_AGAIN:
            return self.ask(call, args_digest, rounds, index, told, follows=state)
        if answered.reply is not confirmations.Reply.ACCEPTED:  # declined (consumed) or cancelled (still usable)
            return complete([text(f"The user {answered.reply.value}; nothing further was done.")])
        for question in asked:
            told[question.key] = kept(question, answered.content[question.key])
        if index + 1 < len(rounds):
            return self.ask(call, args_digest, rounds, index + 1, told, follows=state)
        self.confirmations.consume(call.principal, state)
        return complete([text(self.finish(told))])

    def ask(
        self,
        call: main.ToolCall,
        args_digest: str,
        rounds: list[list[Question]],
        index: int,
        told: dict[str, Any],
        follows: main.StatePayload | None = None,
    ) -> dict[str, Any]:
        """input_required with round `index`'s questions and a signed state carrying what was told."""
        requests = {q.key: q.request for q in self.questions(call, rounds, index)}
        return self.confirmations.ask(call, args_digest, f"round-{index}", requests, [], told, follows=follows)


def asking_tools(confirmations: confirmations.Confirmations) -> list[AskingTool]:
    """Every fixture tool that answers with input_required first."""
    name = form("user_name", "What is your name?", "name")

    def ask(
        tool_name: str,
        description: str,
        rounds: list[list[Question]],
        finish: Callable[[dict[str, Any]], str],
        **kw: Any,
    ) -> AskingTool:
        return AskingTool(confirmations, tool_name, description, rounds, finish, **kw)

    return [
        ask(
            "test_input_required_result_elicitation",
            "Asks the user's name, then greets them.",
            [[name]],
            lambda t: f"Hello, {t['user_name']['name']}!",
        ),
        ask(
            "test_input_required_result_sampling",
            "Asks the client's model a question.",
            [[sample("capital_question", "What is the capital of France?", 100)]],
            lambda t: "LLM said: " + t["capital_question"]["text"],
        ),
        ask(
            "test_input_required_result_list_roots",
            "Asks the client for its roots.",
            [[roots("client_roots")]],
            lambda t: "Client roots: " + ", ".join(t["client_roots"]["uris"]),
        ),
        ask(
            "test_input_required_result_request_state",
            "Asks for a confirmation carried by a signed requestState.",
            [[form("confirm", "Please confirm", "ok", "boolean")]],
            lambda t: f"state-ok: confirmed={t['confirm']['ok']}",
        ),
        ask(
            "test_input_required_result_multiple_inputs",
            "Asks a form, a sampling request and roots in one round.",
            [[name, sample("greeting", "Generate a greeting", 50), roots("client_roots")]],
            lambda t: f"{t['greeting']['text']} {t['user_name']['name']} ({len(t['client_roots']['uris'])} roots)",
        ),
        ask(
            "test_input_required_result_multi_round",
            "Asks two questions in two rounds.",
            [
                [form("step1", "Step 1: What is your name?", "name")],
                [form("step2", "Step 2: What is your favorite color?", "color")],
            ],
            lambda t: f"{t['step1']['name']} likes {t['step2']['color']}.",
        ),
        ask(
            "test_input_required_result_tampered_state",
            "Asks for a confirmation; a modified requestState is refused.",
            [[form("confirm", "Please confirm", "ok", "boolean")]],
            lambda t: f"confirmed={t['confirm']['ok']}",
        ),
        ask(
            "test_input_required_result_capabilities",
            "Asks only what the request's client declares it can answer.",
            [[name, sample("capital_question", "What is the capital of France?", 100)]],
            lambda t: "Answered: " + ", ".join(sorted(t)),
            only_declared=True,
        ),
        ask(
            "test_streaming_elicitation",
            "Asks the user's name as input_required, never as a request on the stream.",
            [[name]],
            lambda t: f"Hello, {t['user_name']['name']}!",
        ),
    ]


# =====================================================================================
# Tools the 2025-11-25 suite calls: live requests there, input_required here
# =====================================================================================
#
# These ask through input_required like the tools above; the legacy adapter turns each
# question into a live sampling/createMessage or elicitation/create on the call's stream
# and its answer into inputResponses, so both eras go through one confirmation cycle.

LOG_STEPS = ("Tool execution started", "Tool processing data", "Tool execution completed")


def with_logging(call: main.ToolCall, args: dict[str, Any]) -> dict[str, Any]:
    """Three info log messages ahead of the result, where the transport carries notifications.

    The core passes no per-request log level to tools, so the level is applied where it
    is known: by the legacy session (logging/setLevel) before it relays them.
    """
    notify = frame.context().notify
    if notify is not None:
        for step in LOG_STEPS:
            params = {"level": "info", "logger": "test_tool_with_logging", "data": step}
            notify({"jsonrpc": "2.0", "method": "notifications/message", "params": params})
    return complete([text("Logging complete: 3 messages sent.")])


def string_argument(name: str, description: str) -> dict[str, Any]:
    """An inputSchema taking one required string argument."""
    return {
        "type": "object",
        "properties": {name: {"type": "string", "description": description}},
        "required": [name],
        "additionalProperties": False,
    }


def titled(prefix: str, titles: list[str]) -> list[dict[str, str]]:
    """`[{const: prefix1, title: titles[0]}, ...]` for titled single- and multi-selects."""
    return [{"const": f"{prefix}{i}", "title": title} for i, title in enumerate(titles, 1)]


DEFAULTS_FORM = {
    "name": {"type": "string", "default": "John Doe"},
    "age": {"type": "integer", "default": 30},
    "score": {"type": "number", "default": 95.5},
    "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
    "verified": {"type": "boolean", "default": True},
}
ENUMS_FORM = {
    "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
    "titledSingle": {"type": "string", "oneOf": titled("value", ["First Option", "Second Option", "Third Option"])},
    "legacyEnum": {
        "type": "string",
        "enum": ["opt1", "opt2", "opt3"],
        "enumNames": ["Option One", "Option Two", "Option Three"],
    },
    "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
    "titledMulti": {
        "type": "array",
        "items": {"anyOf": titled("value", ["First Choice", "Second Choice", "Third Choice"])},
    },
}
USER_INFO_FORM = {
    "username": {"type": "string", "description": "User's response"},
    "email": {"type": "string", "description": "User's email address"},
}


def completed(key: str) -> Callable[[dict[str, Any]], str]:
    """The finishing text of a form fixture: the accepted content, as the suite describes it."""
    return lambda told: f"Elicitation completed: action=accept, content={json.dumps(told[key], sort_keys=True)}"


def legacy_era_tools(confirmations: confirmations.Confirmations) -> list[Fixture | AskingTool]:
    """The tools only the 2025-11-25 suite calls (listed in both eras, like every fixture)."""

    def ask(
        tool_name: str, description: str, rounds: Rounds, finish: Callable[[dict[str, Any]], str], **kw: Any
    ) -> AskingTool:
        return AskingTool(confirmations, tool_name, description, rounds, finish, **kw)

    return [
        tool("test_tool_with_logging", "Sends three info log messages, then completes.", with_logging),
        ask(
            "test_sampling",
            "Asks the client's model the given prompt.",
            lambda a: [[sample("llm_answer", a["prompt"][:MAX_ANSWER_TEXT], 100)]],
            lambda t: "LLM response: " + t["llm_answer"]["text"],
            schema=string_argument("prompt", "The prompt to send to the LLM"),
        ),
        ask(
            "test_elicitation",
            "Asks the user for a username and an email address.",
            lambda a: [[form_of("user_info", a["message"][:MAX_ANSWER_TEXT], USER_INFO_FORM, ["username", "email"])]],
            lambda t: f"User response: action=accept, content={json.dumps(t['user_info'], sort_keys=True)}",
            schema=string_argument("message", "The message to show the user"),
        ),
        ask(
            "test_elicitation_sep1034_defaults",
            "Asks a form whose every field has a default.",
            [[form_of("defaults", "Please review the defaults", DEFAULTS_FORM)]],
            completed("defaults"),
        ),
        ask(
            "test_elicitation_sep1330_enums",
            "Asks a form with every kind of enum field.",
            [[form_of("enums", "Please pick your options", ENUMS_FORM)]],
            completed("enums"),
        ),
    ]


# =====================================================================================
# Prompts
# =====================================================================================


@dataclasses.dataclass(frozen=True)
class Prompt:
    """A prompt: its descriptor and its messages for validated string arguments."""

    descriptor: dict[str, Any]
    render: Callable[[dict[str, str]], list[dict[str, Any]]]


def user(content: dict[str, Any]) -> dict[str, Any]:
    """A user PromptMessage."""
    return {"role": "user", "content": content}


def argument(name: str, description: str) -> dict[str, Any]:
    """A required PromptArgument."""
    return {"name": name, "description": description, "required": True}


CONTEXT_QUESTION = form("user_context", "What context should the prompt use?", "context")

PROMPTS: dict[str, Prompt] = {
    p.descriptor["name"]: p
    for p in [
        Prompt(
            {"name": "test_simple_prompt", "description": "A prompt without arguments."},
            lambda a: [user(text("This is a simple prompt for testing."))],
        ),
        Prompt(
            {
                "name": "test_prompt_with_arguments",
                "description": "A prompt with two required arguments.",
                "arguments": [argument("arg1", "First argument"), argument("arg2", "Second argument")],
            },
            lambda a: [user(text(f"Prompt with arguments: arg1='{a['arg1']}', arg2='{a['arg2']}'"))],
        ),
        Prompt(
            {
                "name": "test_prompt_with_embedded_resource",
                "description": "A prompt embedding the resource it is given.",
                "arguments": [argument("resourceUri", "URI of the resource to embed")],
            },
            lambda a: [
                user(
                    {
                        "type": "resource",
                        "resource": {
                            "uri": a["resourceUri"],
                            "mimeType": "text/plain",
                            "text": "Embedded resource content for testing.",
                        },
                    }
                ),
                user(text("Please process the embedded resource above.")),
            ],
        ),
        Prompt(
            {"name": "test_prompt_with_image", "description": "A prompt with an image."},
            lambda a: [user(image()), user(text("Please analyze the image above."))],
        ),
        Prompt(
            {
                "name": "test_input_required_result_prompt",
                "description": "A prompt that asks the user for context first.",
            },
            lambda a: [user(text(f"Use this context: {a['context']}"))],
        ),
    ]
}


def list_prompts(
    server: frame.Server, request: main.Envelope, meta: main.RequestMeta, principal: str, notify: frame.Notify | None
) -> dict[str, Any]:
    """Every prompt, in a fixed order, with cache hints."""
    refuse_cursor(request.params)
    return {
        "resultType": "complete",
        "prompts": [json.loads(json.dumps(p.descriptor)) for p in PROMPTS.values()],
        "ttlMs": LIST_TTL_MS,
        "cacheScope": "public",
    }


def get_prompt(
    server: frame.Server, request: main.Envelope, meta: main.RequestMeta, principal: str, notify: frame.Notify | None
) -> dict[str, Any]:
    """A prompt's messages; unknown names and missing or non-string arguments are -32602."""
    params = request.params
    prompt = PROMPTS.get(params.get("name")) if isinstance(params.get("name"), str) else None
    if prompt is None:
        raise main.McpError(main.INVALID_PARAMS, "Invalid params: unknown prompt")
    given = params.get("arguments", {})
    if given is None:
        given = {}
    if not isinstance(given, dict) or not all(isinstance(v, str) for v in given.values()):
        raise main.McpError(main.INVALID_PARAMS, "Invalid params: prompt arguments must be an object of strings")
    declared = {a["name"] for a in prompt.descriptor.get("arguments", [])}
    missing = sorted(declared - set(given))
    if missing:
        raise main.McpError(main.INVALID_PARAMS, f"Invalid params: missing prompt argument {missing[0]!r}")
    arguments = {name: given[name][:MAX_ANSWER_TEXT] for name in declared}
    if prompt.descriptor["name"] == "test_input_required_result_prompt":
        # This prompt's answer grants nothing and is asked again whenever it is missing, so it
        # issues no requestState; a retry that carries one was not issued by us.
        if "requestState" in params:
            raise main.McpError(main.INVALID_PARAMS, main.STATE_INVALID)
        if not declares(meta.capabilities, CONTEXT_QUESTION.method):
            raise missing_capability(REQUIRED_FOR[CONTEXT_QUESTION.method])
        responses = params.get("inputResponses")
        if responses is not None and not isinstance(responses, dict):
            raise main.McpError(main.INVALID_PARAMS, "Invalid params: inputResponses must be an object")
        # No state, nothing granted: every answer but an accept simply asks again.
        answer = main.read_answer(responses, CONTEXT_QUESTION.key)
        if answer is None or answer.action != "accept":
            return {"resultType": "input_required", "inputRequests": {CONTEXT_QUESTION.key: CONTEXT_QUESTION.request}}
        arguments = kept(CONTEXT_QUESTION, answer.content)
    return {
        "resultType": "complete",
        "description": prompt.descriptor["description"],
        "messages": prompt.render(arguments),
    }


# =====================================================================================
# Resources and completions
# =====================================================================================

RESOURCES: dict[str, dict[str, Any]] = {
    "test://static-text": {
        "listing": {
            "uri": "test://static-text",
            "name": "static-text",
            "description": "A static text resource.",
            "mimeType": "text/plain",
        },
        "contents": {
            "uri": "test://static-text",
            "mimeType": "text/plain",
            "text": "This is the content of the static text resource.",
        },
    },
    "test://static-binary": {
        "listing": {
            "uri": "test://static-binary",
            "name": "static-binary",
            "description": "A static PNG image.",
            "mimeType": "image/png",
        },
        "contents": {"uri": "test://static-binary", "mimeType": "image/png", "blob": PNG_BASE64},
    },
    # The resource the 2025-11-25 suite subscribes to (its content never changes).
    "test://watched-resource": {
        "listing": {
            "uri": "test://watched-resource",
            "name": "watched-resource",
            "description": "A resource to subscribe to.",
            "mimeType": "text/plain",
        },
        "contents": {"uri": "test://watched-resource", "mimeType": "text/plain", "text": "Watched resource content."},
    },
}
TEMPLATE = {
    "uriTemplate": "test://template/{id}/data",
    "name": "template-data",
    "description": "JSON data for any id.",
    "mimeType": "application/json",
}
# A bounded, plain id: the template never reflects arbitrary text into a URI.
_TEMPLATE_RE = re.compile(rf"test://template/([A-Za-z0-9_-]{{1,{MAX_TEMPLATE_ID_LENGTH}}})/data")


def refuse_cursor(params: dict[str, Any]) -> None:
    """-32602 for any cursor: the fixtures' lists fit one page, so no cursor is ours."""
    if params.get("cursor") is not None:
        raise main.McpError(main.INVALID_PARAMS, "Invalid params: unknown cursor")


def list_resources(
    server: frame.Server, request: main.Envelope, meta: main.RequestMeta, principal: str, notify: frame.Notify | None
) -> dict[str, Any]:
    """The static resources, text first, with cache hints."""
    refuse_cursor(request.params)
    return {
        "resultType": "complete",
        "resources": [dict(r["listing"]) for r in RESOURCES.values()],
        "ttlMs": LIST_TTL_MS,
        "cacheScope": "public",
    }


def list_templates(
    server: frame.Server, request: main.Envelope, meta: main.RequestMeta, principal: str, notify: frame.Notify | None
) -> dict[str, Any]:
    """The one resource template, with cache hints."""
    refuse_cursor(request.params)
    return {
        "resultType": "complete",
        "resourceTemplates": [dict(TEMPLATE)],
        "ttlMs": LIST_TTL_MS,
        "cacheScope": "public",
    }


def read_resource(
    server: frame.Server, request: main.Envelope, meta: main.RequestMeta, principal: str, notify: frame.Notify | None
) -> dict[str, Any]:
    """A static resource or a template instance; anything else is -32602 naming the uri."""
    uri = request.params.get("uri")
    if not isinstance(uri, str) or not 0 < len(uri) <= main.MAX_URI_LENGTH:
        raise main.McpError(
            main.INVALID_PARAMS, f"Invalid params: uri must be a string of 1..{main.MAX_URI_LENGTH} characters"
        )
    if uri in RESOURCES:
        contents = dict(RESOURCES[uri]["contents"])
    elif match := _TEMPLATE_RE.fullmatch(uri):
        data = {"id": match[1], "templateTest": True, "data": f"Data for ID: {match[1]}"}
        contents = {"uri": uri, "mimeType": "application/json", "text": json.dumps(data, separators=(",", ":"))}
    else:
        raise main.McpError(main.INVALID_PARAMS, "Resource not found", {"uri": uri})
    return {"resultType": "complete", "contents": [contents], "ttlMs": LIST_TTL_MS, "cacheScope": "public"}


COMPLETIONS: dict[tuple[str, str], list[str]] = {
    ("test_prompt_with_arguments", "arg1"): ["test", "testing", "test-value", "other"],
    ("test_prompt_with_arguments", "arg2"): ["alpha", "beta", "gamma"],
}


def complete_argument(
    server: frame.Server, request: main.Envelope, meta: main.RequestMeta, principal: str, notify: frame.Notify | None
) -> dict[str, Any]:
    """Known values of a prompt argument that start with what was typed; unknown refs are -32602."""
    ref, argument_ = request.params.get("ref"), request.params.get("argument")
    if not isinstance(ref, dict) or ref.get("type") != "ref/prompt" or not isinstance(argument_, dict):
        raise main.McpError(main.INVALID_PARAMS, "Invalid params: ref must be a ref/prompt and argument an object")
    prompt_name, argument_name = ref.get("name"), argument_.get("name")
    # Strings only: a list or object as a name must not reach the dict lookup.
    known = (
        COMPLETIONS.get((prompt_name, argument_name))
        if isinstance(prompt_name, str) and isinstance(argument_name, str)
        else None
    )
    typed = argument_.get("value")
    if known is None or not isinstance(typed, str):
        raise main.McpError(main.INVALID_PARAMS, "Invalid params: no completions for that prompt argument")
    values = [value for value in known if value.startswith(typed)]
    return {
        "resultType": "complete",
        "completion": {
            "values": values[:MAX_COMPLETIONS],
            "total": len(values),
            "hasMore": len(values) > MAX_COMPLETIONS,
        },
    }


# =====================================================================================
# Installing
# =====================================================================================


def install(server: frame.Server) -> None:
    """Register every fixture tool, prompt, resource and completion on `server`."""
    for fixture in [*plain_tools(), *asking_tools(server.confirmations), *legacy_era_tools(server.confirmations)]:
        server.add_tool(fixture)
    server.add_method("prompts/list", list_prompts, capability="prompts")
    server.add_method("prompts/get", get_prompt, capability="prompts")
    server.add_method("resources/list", list_resources, capability="resources")
    server.add_method("resources/read", read_resource, capability="resources")
    server.add_method("resources/templates/list", list_templates, capability="resources")
    server.add_method("completion/complete", complete_argument, capability="completions")

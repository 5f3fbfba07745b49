"""The contract checker: every invariant a chat-completion response must keep, whatever the model.

Written from the wire contract (/work/shared/spec, docs/protocol.md), not from the server's code:
:func:`check` takes the request body, the HTTP status and headers and either the JSON body or
the SSE data payloads, and returns every :class:`Violation` found (an empty list when the
response keeps the contract).  Each violation names its invariant, so a run can tally them per
model family (``tests/fuzz/survey.py``).

The invariants:

* ``status``: 200, or a 4xx before generating with the error envelope and a code the request
  can earn; never a 5xx.
* ``headers``: the correlation headers always; the SSE headers on a stream.
* ``framing``: ``data:`` events, JSON chunks with one id/object/created/model, ``[DONE]`` last.
* ``role``: the first delta announces ``role: "assistant"``.
* ``channels``: a delta never mixes ``content`` and ``reasoning_content``.
* ``finish``: exactly one finish chunk (empty delta), a documented reason; nothing but usage
  after it.
* ``usage``: a usage chunk (choices ``[]``) exactly when asked; the numbers add up and the
  completion stays within the budget.
* ``tool_deltas``: per index, the first fragment carries id, ``type: "function"`` and the name;
  later fragments only arguments; indices appear in order from 0.
* ``markup``: no control token, tool-call markup or thinking tag in ``content`` or
  ``reasoning_content``.
* ``partial_markup``: neither ends in a piece of one (``</`` of ``</tool_call>``, ``<|chan`` of
  ``<|channel|>``): a marker the budget, a stop or a holdback cut at its end.  Two characters at
  least: a lone ``<`` or ``[`` is ordinary text.
* ``strict``: a strict ``json_schema`` answer validates unless flagged ``X-Grammar-Constraints:
  downgraded``; a ``json_object`` answer parses as an object.
* ``tools``: calls name a listed tool; arguments parse as an object and (for a strict tool that is
  not flagged) validate; ``tool_choice`` and ``parallel_tool_calls`` are honoured (required or
  named: calls and no ``content``, the tool grammar allows no text outside them); a turn with
  calls finishes ``tool_calls`` or ``length``, one without never ``tool_calls``.
* ``logprobs``: OpenAI's shape when asked (at most ``top_logprobs`` alternatives), null otherwise.
* ``error_chunk``: no generation error after the headers.
* ``cancel``: a cancel answered 200 makes the response finish ``cancelled``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from afm_struct.grammar.validation import validate_json

# Classes the fuzzer finds that are not fixed here, each with its reason; the test tolerates
# them, the survey counts them apart.
KNOWN_NO_MINIMUM = (
    "closing search gave up on the schema (min_output_tokens None): a required/named call "
    "cut before its name, neither refused (400) nor closed"
)

FINISH_REASONS = ("stop", "length", "tool_calls", "cancelled")
# 400 codes a well-formed fuzz request can earn before generating: the budget below the shortest
# valid output, a dev-set schema the engine refuses, a prompt too long for the tiny context.
REFUSALS = (
    "max_tokens_too_small",
    "invalid_schema",
    "context_length_exceeded",
    "grammar_too_complex",
    "invalid_value",
)


@dataclass(frozen=True)
class Violation:
    """One broken invariant: its name and what was seen."""

    invariant: str
    detail: str
    known: str | None = None  # a class reported and not fixed here: why (see KNOWN_*)

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.detail}" + (f" (known: {self.known})" if self.known else "")


@dataclass
class Answer:
    """What a response assembled to, streamed or not."""

    content: str = ""
    reasoning: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)
    finish: str | None = None
    usage: dict[str, Any] | None = None
    logprobs: list[Any] | None = None


@dataclass
class Checker:
    """Collects the violations of one response to ``body``; ``markup`` is every string that must
    never reach ``content`` or ``reasoning_content`` (the model's control tokens, tool markup,
    thinking tags)."""

    body: dict[str, Any]
    markup: tuple[str, ...]
    found: list[Violation] = field(default_factory=list)
    downgraded: bool = False

    def fail(self, invariant: str, detail: str, *, known: str | None = None) -> None:
        self.found.append(Violation(invariant, detail[:600], known))

    def expect(self, ok: bool, invariant: str, detail: str) -> bool:
        if not ok:
            self.fail(invariant, detail)
        return ok

    # -- what the request asked -----------------------------------------------------------------

    @property
    def budget(self) -> int | None:
        value = self.body.get("max_completion_tokens", self.body.get("max_tokens"))
        return value if isinstance(value, int) else None

    @property
    def closing(self) -> bool:
        return self.body.get("afm_close_on_length", True) is not False

    @property
    def tools(self) -> dict[str, dict[str, Any]]:
        return {t["function"]["name"]: t["function"] for t in self.body.get("tools") or ()}

    @property
    def tool_choice(self) -> Any:
        return self.body.get("tool_choice", "auto" if self.body.get("tools") else "none")

    # -- status and headers ---------------------------------------------------------------------

    def status(self, status: int, headers: dict[str, str], error: Any) -> bool:
        """True when the response is a 200 to be read further."""
        self.expect(
            "x-request-id" in headers and "openai-request-id" in headers,
            "headers",
            f"correlation headers missing: {sorted(headers)}",
        )
        if status == 200:
            return True
        if not self.expect(status < 500, "status", f"HTTP {status}: {error}"):
            return False
        envelope = error.get("error") if isinstance(error, dict) else None
        if not self.expect(
            isinstance(envelope, dict) and {"message", "type", "param", "code"} <= set(envelope),
            "status",
            f"HTTP {status} without the error envelope: {error}",
        ):
            return False
        self.expect(
            status == 400 and envelope["code"] in REFUSALS,
            "status",
            f"HTTP {status} {envelope['code']}: {envelope['message']}",
        )
        if envelope["code"] == "max_tokens_too_small":
            self.expect(
                envelope["param"] in ("max_tokens", "max_completion_tokens", "messages"),
                "status",
                f"max_tokens_too_small names {envelope['param']!r}",
            )
        return False

    # -- the non-streaming body -----------------------------------------------------------------

    def completion(self, payload: dict[str, Any]) -> Answer | None:
        """The answer of a ``chat.completion`` body (violations noted on the way)."""
        if not self.expect(
            payload.get("object") == "chat.completion" and len(payload.get("choices") or ()) == 1,
            "framing",
            f"not one chat.completion choice: {str(payload)[:300]}",
        ):
            return None
        choice = payload["choices"][0]
        message = choice.get("message") or {}
        self.expect(message.get("role") == "assistant", "role", f"message role {message.get('role')!r}")
        answer = Answer(
            content=message.get("content") or "",
            reasoning=message.get("reasoning_content") or "",
            calls=list(message.get("tool_calls") or ()),
            finish=choice.get("finish_reason"),
            usage=payload.get("usage"),
        )
        self.expect(answer.usage is not None, "usage", "a completion without usage")
        self._logprobs_field(choice.get("logprobs"), answer)
        return answer

    # -- the stream ----------------------------------------------------------------------------

    def stream(self, headers: dict[str, str], payloads: list[str]) -> Answer | None:
        """The answer a stream assembles to (its framing, order and deltas checked)."""
        self.expect(
            headers.get("content-type") == "text/event-stream"
            and headers.get("cache-control") == "no-cache"
            and headers.get("x-accel-buffering") == "no",
            "headers",
            f"SSE headers: {headers}",
        )
        if not self.expect(
            bool(payloads) and payloads[-1] == "[DONE]" and "[DONE]" not in payloads[:-1],
            "framing",
            f"[DONE] is not the one last event: {payloads[-3:]}",
        ):
            return None
        try:
            chunks = [json.loads(p) for p in payloads[:-1]]
        except ValueError as exc:
            self.fail("framing", f"an event is not JSON: {exc}")
            return None
        answer = Answer()
        identity: tuple[Any, ...] | None = None
        finished_at: int | None = None
        usage_chunks = 0
        seen_delta = False
        indices: list[int] = []
        logprobs: list[Any] = []
        for n, chunk in enumerate(chunks):
            if any(k in chunk for k in ("afm_profile", "afm_profile_extended")):
                continue
            ident = (chunk.get("id"), chunk.get("object"), chunk.get("created"), chunk.get("model"))
            identity = identity or ident
            self.expect(
                ident == identity and ident[1] == "chat.completion.chunk",
                "framing",
                f"chunk {n} identity {ident} != {identity}",
            )
            if "error" in chunk:
                self.fail("error_chunk", f"generation error after the headers: {chunk['error']}")
            choices = chunk.get("choices")
            if choices == []:
                usage_chunks += 1
                self.expect(finished_at is not None, "usage", "usage chunk before the finish chunk")
                answer.usage = chunk.get("usage")
                continue
            if not self.expect(
                isinstance(choices, list) and len(choices) == 1, "framing", f"chunk {n}: {chunk}"
            ):
                continue
            self.expect(finished_at is None, "finish", f"chunk {n} after the finish chunk: {chunk}")
            choice = choices[0]
            delta = choice.get("delta") or {}
            if choice.get("finish_reason") is not None:
                finished_at = n
                answer.finish = choice["finish_reason"]
                self.expect(delta == {} or "error" in chunk, "finish", f"finish chunk with a delta: {delta}")
                continue
            self.expect(
                seen_delta or delta.get("role") == "assistant",
                "role",
                f"first delta without role assistant: {delta}",
            )
            self.expect(not seen_delta or "role" not in delta, "role", f"role again in chunk {n}")
            seen_delta = True
            self.expect(
                not (delta.get("content") and delta.get("reasoning_content")),
                "channels",
                f"a delta mixes content and reasoning: {delta}",
            )
            answer.content += delta.get("content") or ""
            answer.reasoning += delta.get("reasoning_content") or ""
            for fragment in delta.get("tool_calls") or ():
                self._tool_fragment(fragment, answer, indices)
            if choice.get("logprobs") is not None:
                logprobs.extend((choice["logprobs"] or {}).get("content") or ())
            else:
                self.expect(
                    not self.body.get("logprobs") or not (delta.get("content") or delta.get("tool_calls")),
                    "logprobs",
                    f"a delta without the logprobs asked for: {delta}",
                )
        self.expect(finished_at is not None, "finish", "no finish chunk")
        asked = bool((self.body.get("stream_options") or {}).get("include_usage"))
        self.expect(
            usage_chunks == (1 if asked else 0),
            "usage",
            f"{usage_chunks} usage chunks, include_usage={asked}",
        )
        if self.body.get("logprobs"):
            answer.logprobs = logprobs
            self._logprob_entries(logprobs)
        return answer

    def _tool_fragment(self, fragment: dict[str, Any], answer: Answer, indices: list[int]) -> None:
        index = fragment.get("index")
        function = fragment.get("function") or {}
        if index not in indices:
            self.expect(index == len(indices), "tool_deltas", f"call index {index} after {indices}")
            self.expect(
                bool(fragment.get("id"))
                and fragment.get("type") == "function"
                and isinstance(function.get("name"), str)
                and function["name"] != "",
                "tool_deltas",
                f"a call's first fragment lacks id/type/name: {fragment}",
            )
            indices.append(index)
            answer.calls.append(
                {
                    "id": fragment.get("id"),
                    "type": "function",
                    "function": {"name": function.get("name"), "arguments": ""},
                }
            )
        else:
            self.expect(
                set(fragment) <= {"index", "function"} and set(function) <= {"arguments"},
                "tool_deltas",
                f"a later fragment carries more than arguments: {fragment}",
            )
        if index in indices:
            call = answer.calls[indices.index(index)]
            call["function"]["arguments"] += function.get("arguments") or ""

    # -- logprobs -------------------------------------------------------------------------------

    def _logprobs_field(self, field_value: Any, answer: Answer) -> None:
        if not self.body.get("logprobs"):
            self.expect(
                field_value is None, "logprobs", f"logprobs not asked but sent: {str(field_value)[:200]}"
            )
            return
        if not self.expect(
            isinstance(field_value, dict) and isinstance(field_value.get("content"), list),
            "logprobs",
            f"logprobs asked, got {str(field_value)[:200]}",
        ):
            return
        answer.logprobs = field_value["content"]
        self._logprob_entries(answer.logprobs)

    def _logprob_entries(self, entries: list[Any]) -> None:
        top = self.body.get("top_logprobs") or 0
        for entry in entries:
            ok = (
                isinstance(entry, dict)
                and isinstance(entry.get("token"), str)
                and isinstance(entry.get("logprob"), (int, float))
                and entry["logprob"] <= 1e-6
                and isinstance(entry.get("bytes"), list)
                and isinstance(entry.get("top_logprobs"), list)
                and len(entry["top_logprobs"]) <= top
            )
            if not self.expect(ok, "logprobs", f"bad logprob entry (top_logprobs={top}): {str(entry)[:200]}"):
                return

    # -- what the answer must be ----------------------------------------------------------------

    def answer(self, answer: Answer, headers: dict[str, str], cancelled: bool) -> None:
        """The semantic invariants of an assembled answer."""
        finish = answer.finish
        self.downgraded = headers.get("x-grammar-constraints") == "downgraded"
        if cancelled:
            self.expect(finish == "cancelled", "cancel", f"cancel answered 200, finish {finish!r}")
        self.expect(finish in FINISH_REASONS, "finish", f"finish_reason {finish!r}")
        if finish == "cancelled" and not cancelled:
            self.fail("finish", "finished cancelled without a cancel")
        self._usage(answer.usage)
        for channel, text in (("content", answer.content), ("reasoning_content", answer.reasoning)):
            hits = [m for m in self.markup if m in text]
            self.expect(not hits, "markup", f"{channel} holds {hits}: {text[:300]!r}")
            cut = cut_markup(text, self.markup)
            self.expect(
                cut is None, "partial_markup", f"{channel} ends in a piece of {cut!r}: {text[-300:]!r}"
            )
        self._tool_calls(answer)
        if finish == "cancelled":
            return
        fmt = self.body.get("response_format") or {}
        if not self.closing and finish == "length":
            return  # closing off: a cut answer is cut where the budget ended, and says so
        if fmt.get("type") == "json_schema" and not self.body.get("tools") and "stop" not in self.body:
            spec = fmt["json_schema"]
            if spec.get("strict") and not self.downgraded:
                outcome = validate_json(answer.content, spec.get("schema"))
                self.expect(
                    outcome.ok,
                    "strict",
                    f"strict output does not validate ({finish}): "
                    f"{answer.content[:300]!r} {list(outcome.errors)[:2]}",
                )
        if fmt.get("type") == "json_object" and not self.body.get("tools") and "stop" not in self.body:
            outcome = validate_json(answer.content, None, require_object=True)
            self.expect(
                outcome.ok,
                "strict",
                f"json_object output does not parse ({finish}): {answer.content[:300]!r}",
            )

    def _usage(self, usage: Any) -> None:
        if usage is None:
            return
        ok = (
            isinstance(usage, dict)
            and all(
                isinstance(usage.get(k), int) for k in ("prompt_tokens", "completion_tokens", "total_tokens")
            )
            and usage["prompt_tokens"] + usage["completion_tokens"] == usage["total_tokens"]
        )
        if self.expect(ok, "usage", f"usage {usage}") and self.budget is not None:
            self.expect(
                usage["completion_tokens"] <= self.budget,
                "usage",
                f"{usage['completion_tokens']} completion tokens over the budget {self.budget}",
            )

    def _tool_calls(self, answer: Answer) -> None:
        calls, choice, finish = answer.calls, self.tool_choice, answer.finish
        if calls:
            self.expect(
                finish in ("tool_calls", "length", "cancelled"),
                "tools",
                f"a turn with calls finished {finish!r}",
            )
        elif finish == "tool_calls":
            self.fail("tools", "finish_reason tool_calls without a call")
        if not self.body.get("tools") or choice == "none":
            self.expect(not calls, "tools", f"calls without tools or under tool_choice none: {calls}")
            return
        named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
        if finish != "cancelled" and (named is not None or choice == "required"):
            names = [c["function"]["name"] for c in calls]
            if not calls and finish == "length":
                # With closing off the budget may cut the call before its name: dropped, as
                # documented.  With closing on the budget was checked against the shortest call,
                # unless the closing search gave up on the schema (then nothing is refused).
                if self.closing:
                    self.fail("tools", f"tool_choice {choice}, no call (length)", known=KNOWN_NO_MINIMUM)
            elif named is not None:
                self.expect(names == [named], "tools", f"tool_choice names {named}, calls {names} ({finish})")
            else:
                self.expect(
                    bool(calls),
                    "tools",
                    f"tool_choice required, no call ({finish}): {answer.content[:200]!r}",
                )
            self.expect(
                answer.content == "",
                "tools",
                f"tool_choice {choice}: content beside the calls ({finish}): {answer.content[:200]!r}",
            )
        if self.body.get("parallel_tool_calls") is False or named is not None:
            self.expect(len(calls) <= 1, "tools", f"{len(calls)} calls where at most one is allowed")
        for call in calls:
            self._one_call(call, answer)

    def _one_call(self, call: dict[str, Any], answer: Answer) -> None:
        function = call.get("function") or {}
        name = function.get("name")
        if not self.expect(name in self.tools, "tools", f"a call to unlisted {name!r}"):
            return
        self.expect(bool(call.get("id")) and call.get("type") == "function", "tools", f"call {call}")
        if answer.finish == "cancelled":
            return
        arguments = function.get("arguments")
        declared = self.tools[name]
        outcome = validate_json(arguments if isinstance(arguments, str) else "", None, require_object=True)
        if not self.expect(
            outcome.ok,
            "tools",
            f"{name} arguments do not parse as an object ({answer.finish}): {str(arguments)[:300]!r}",
        ):
            return
        if not self.closing and answer.finish == "length":
            return  # closing off: a cut call's arguments are closed syntactically, may not validate
        if declared.get("strict") and "parameters" in declared and not self.downgraded:
            outcome = validate_json(arguments, declared["parameters"])
            self.expect(
                outcome.ok,
                "tools",
                f"strict {name} arguments do not validate ({answer.finish}): "
                f"{arguments[:300]!r} {list(outcome.errors)[:2]}",
            )


def cut_markup(text: str, markup: tuple[str, ...]) -> str | None:
    """The marker of ``markup`` whose first two or more characters (not all) end ``text``."""
    for marker in markup:
        for length in range(len(marker) - 1, 1, -1):
            if text.endswith(marker[:length]):
                return marker
    return None


def check(
    body: dict[str, Any],
    markup: tuple[str, ...],
    status: int,
    headers: dict[str, str],
    *,
    json_body: Any = None,
    payloads: list[str] | None = None,
    cancelled: bool = False,
) -> list[Violation]:
    """Every violation of the contract in one response to ``body`` (``payloads`` for a stream,
    ``json_body`` otherwise; ``cancelled`` when a cancel for it was answered 200)."""
    checker = Checker(body, markup)
    headers = {k.lower(): v for k, v in headers.items()}
    if not checker.status(status, headers, json_body):
        return checker.found
    answer = checker.stream(headers, payloads or []) if body.get("stream") else checker.completion(json_body)
    if answer is not None:
        checker.answer(answer, headers, cancelled)
    return checker.found

"""The high-level call for extraction pipelines: messages + schema → a validated Python object.

    from pydantic import BaseModel
    import afm_struct

    class Invoice(BaseModel):
        number: str
        total: float

    result = afm_struct.extract("Invoice INV-7 totals 12.50 EUR.", Invoice)
    result.value          # Invoice(number='INV-7', total=12.5)
    result.mode           # 'enforced' (or 'downgraded' with result.reason)
    result.raw_text       # the JSON text the model produced
    result.enforcement    # per keyword and path: enforced, rewritten, relaxed or validated

    result = afm_struct.extract("Invoice INV-7 totals 12.50 EUR.", Invoice, logprobs=True)
    result.confidence["$.total"]   # FieldConfidence(mean_logprob=..., min_logprob=..., ...)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ..decoding.logprobs import TokenLogprob
from ..errors import AfmError
from .confidence import FieldConfidence, field_confidence

_DEFAULT_MODEL: Any = None
_DEFAULT_LOCK = threading.Lock()


class ExtractionError(AfmError):
    """The output did not validate (cut by ``max_tokens``, or a best-effort output was wrong)."""

    type = "extraction_error"
    status = 422
    code = "invalid_output"

    def __init__(self, message: str, *, result: Extraction) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class Extraction:
    """The outcome of :func:`extract`."""

    value: Any  # a pydantic instance when a model class was given, else plain JSON data
    valid: bool
    mode: str  # "enforced" or "downgraded"
    reason: str | None  # why the constraint was downgraded, if it was
    raw_text: str
    finish_reason: str
    errors: tuple[str, ...]
    prompt_tokens: int
    completion_tokens: int
    # With extract(..., logprobs=True): confidence per leaf path ("$.address.city",
    # "$.items[0]") and every generated token's entry; None otherwise.
    confidence: dict[str, FieldConfidence] | None = None
    token_logprobs: tuple[TokenLogprob, ...] | None = None
    # What of the schema the grammar enforced, keyword by keyword (grammar/enforcement.py).
    enforcement: dict[str, Any] | None = None


def _default_model() -> Any:
    global _DEFAULT_MODEL
    with _DEFAULT_LOCK:
        if _DEFAULT_MODEL is None:
            from ..models import load_model

            _DEFAULT_MODEL = load_model()
        return _DEFAULT_MODEL


def _schema_of(schema: Any) -> tuple[dict[str, Any], Any]:
    """(JSON Schema, pydantic class or None) for a dict or a pydantic model class.

    A pydantic model's objects are closed (:func:`close_objects`): pydantic writes nothing
    about extra keys for its default ``extra="ignore"``, and read as open JSON Schema that let
    the model invent keys the class then drops.  ``extra="allow"`` (written as
    ``additionalProperties: true``) keeps that model's object open; a dict is taken as written.
    """
    from ..grammar.schema.closed_objects import close_objects

    if isinstance(schema, dict):
        return schema, None
    if hasattr(schema, "model_json_schema") and hasattr(schema, "model_validate"):
        return close_objects(schema.model_json_schema()), schema
    raise TypeError("schema must be a JSON Schema dict or a pydantic BaseModel class")


@dataclass(frozen=True)
class Job:
    """One extraction, compiled and ready to generate (:func:`prepare`)."""

    loaded: Any
    constraint: Any  # the CompiledConstraint
    request: Any  # the GenerationRequest
    model_class: Any  # the pydantic class, or None
    max_tokens: int
    logprobs: bool


def prepare(messages: str | list[dict[str, Any]], schema: Any, *, model: Any = None,
            max_tokens: int = 512, temperature: float = 0.0, seed: int | None = None,
            logprobs: bool = False) -> Job:
    """Compile ``schema`` and build the generation request for ``messages`` (as :func:`extract`)."""
    from ..decoding.generator import GenerationRequest
    from ..decoding.sampling import SamplingParams
    from ..grammar.compiler import compile_constraint
    from ..grammar.spec import JsonSchemaRequest
    from ..serving.value_checks import check_values

    loaded = model if model is not None else _default_model()
    json_schema, pydantic_cls = _schema_of(schema)
    chat = [{"role": "user", "content": messages}] if isinstance(messages, str) else messages
    check_values(chat, "messages")  # a lone surrogate is a TypeError in the tokenizer
    constraint = compile_constraint(loaded.tokenizer, JsonSchemaRequest(json_schema))
    request = GenerationRequest(
        loaded.tokenizer.encode_chat(chat),
        SamplingParams(temperature=temperature, seed=seed, max_tokens=max_tokens),
        constraint=constraint, logprobs=0 if logprobs else None)
    return Job(loaded, constraint, request, pydantic_cls, max_tokens, logprobs)


def extract(messages: str | list[dict[str, Any]], schema: Any, *, model: Any = None,
            max_tokens: int = 512, temperature: float = 0.0, seed: int | None = None,
            check: bool = True, logprobs: bool = False) -> Extraction:
    """Generate one JSON instance of ``schema`` for ``messages`` and validate it.

    ``messages`` is a user prompt or an OpenAI-style list; ``schema`` a JSON Schema dict or a
    pydantic model class; ``model`` a :class:`~afm_struct.models.LoadedModel` (default: the
    embedded model, loaded once).  With ``check`` (the default) an invalid output raises
    :class:`ExtractionError` carrying the result; otherwise the result says ``valid=False``.
    With ``logprobs`` the result also carries ``confidence``: per leaf field, the mean and
    minimum logprob of the tokens that wrote its value (:mod:`afm_struct.library.confidence`).
    The result's ``enforcement`` says what of the schema the grammar enforced, keyword by
    keyword (:mod:`afm_struct.grammar.enforcement`).  To watch the object grow, see
    :func:`afm_struct.library.extraction_stream.extract_stream`.
    """
    from ..decoding.generator import Finished, Generator, TextDelta

    job = prepare(messages, schema, model=model, max_tokens=max_tokens, temperature=temperature,
                  seed=seed, logprobs=logprobs)
    entries: list[TokenLogprob] = []
    fin = None
    for event in Generator.from_loaded(job.loaded).generate(job.request):
        if isinstance(event, TextDelta):
            entries.extend(event.logprobs or ())
        elif isinstance(event, Finished):
            fin = event
    assert fin is not None
    return conclude(job, fin, entries, check=check)


def conclude(job: Job, fin: Any, entries: list[TokenLogprob], *, check: bool = True) -> Extraction:
    """The :class:`Extraction` of a finished generation (``fin``: the generator's ``Finished``);
    raises the generation's error, and :class:`ExtractionError` when ``check`` and invalid."""
    from ..decoding.generator import FinishReason
    from ..grammar.enforcement import enforcement_report
    from ..grammar.spec import Mode

    constraint, max_tokens, pydantic_cls = job.constraint, job.max_tokens, job.model_class
    if fin.error is not None:
        raise fin.error
    text = fin.text if constraint.mode is Mode.ENFORCED else constraint.sanitize(fin.text)
    confidence = None
    if job.logprobs:  # sanitized text is cut out of the output: its offsets start further in
        confidence = field_confidence(text, entries, base=max(fin.text.find(text), 0))
    outcome = constraint.validate(text)
    errors = tuple(outcome.errors)
    valid = outcome.ok and fin.reason is FinishReason.STOP
    if fin.reason is FinishReason.LENGTH:
        errors = (f"max_tokens ({max_tokens}) reached before the JSON was complete", *errors)
    value = outcome.value
    if valid and pydantic_cls is not None:
        try:
            value = pydantic_cls.model_validate(outcome.value)
        except Exception as exc:  # pydantic-only checks (validators) the schema cannot express
            valid, errors = False, (*errors, str(exc))
    result = Extraction(value=value if valid else None, valid=valid, mode=str(constraint.mode),
                        reason=constraint.reason, raw_text=fin.text, finish_reason=str(fin.reason),
                        errors=errors, prompt_tokens=fin.usage.prompt_tokens,
                        completion_tokens=fin.usage.completion_tokens, confidence=confidence,
                        token_logprobs=tuple(entries) if job.logprobs else None,
                        enforcement=enforcement_report(constraint))
    if check and not valid:
        raise ExtractionError("the model output is not a valid instance: " + "; ".join(errors),
                              result=result)
    return result

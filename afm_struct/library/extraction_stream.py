"""``extract_stream()``: :func:`~afm_struct.library.extraction.extract` with the object's
partial values while it is generated.

    stream = afm_struct.extract_stream("Invoice INV-7 totals 12.50 EUR.", Invoice)
    for partial in stream.partials():   # Invoice.model_construct(...) of each value so far
        show(partial)
    stream.result()                     # the Extraction, as extract() returns it

Each text delta of an enforced constraint yields the value its text so far parses to
(:mod:`afm_struct.serving.partials`, jiter's partial mode), typed with the pydantic class when
one is given (``model_construct``: :mod:`afm_struct.library.partial_models`).  A downgraded
constraint's text is sanitized at the end, as the server defers it: its one partial is the
sanitized whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..decoding.logprobs import TokenLogprob
from ..serving.partials import PartialJson, parse_partial
from .extraction import Extraction, Job, conclude, prepare
from .partial_models import typed_partial


class ExtractionStream:
    """One extraction, generated as :meth:`partials` is iterated; :meth:`result` finishes it."""

    def __init__(self, job: Job, *, check: bool) -> None:
        self.job = job
        self.check = check
        self._result: Extraction | None = None
        self._started = False

    def partials(self) -> Iterator[Any]:
        """The value parsed so far after each text delta that parses (typed with the pydantic
        class, when given); the last is the final object when the output is whole.  Once."""
        from ..decoding.generator import Finished, Generator, TextDelta
        from ..grammar.spec import Mode

        if self._started:
            raise RuntimeError("partials() runs the generation once; read result()")
        self._started = True
        enforced = self.job.constraint.mode is Mode.ENFORCED
        growing = PartialJson()
        entries: list[TokenLogprob] = []
        fin = None
        for event in Generator.from_loaded(self.job.loaded).generate(self.job.request):
            if isinstance(event, TextDelta):
                entries.extend(event.logprobs or ())
                found = growing.feed(event.text) if enforced and event.text else None
                if found is not None:
                    yield typed_partial(found.value, self.job.model_class)
            elif isinstance(event, Finished):
                fin = event
        assert fin is not None
        if not enforced and fin.error is None:
            found = parse_partial(self.job.constraint.sanitize(fin.text))
            if found is not None:
                yield typed_partial(found.value, self.job.model_class)
        self._result = conclude(self.job, fin, entries, check=self.check)

    def result(self) -> Extraction:
        """The :class:`Extraction` (generating the rest first if :meth:`partials` did not)."""
        if self._result is None:
            for _ in self.partials() if not self._started else ():
                pass
        if self._result is None:
            raise RuntimeError("the generation was not finished: iterate partials() to its end")
        return self._result


def extract_stream(messages: str | list[dict[str, Any]], schema: Any, *, model: Any = None,
                   max_tokens: int = 512, temperature: float = 0.0, seed: int | None = None,
                   check: bool = True, logprobs: bool = False) -> ExtractionStream:
    """:func:`~afm_struct.library.extraction.extract`, streamed: the schema is compiled now
    (its errors raised here), generation runs as :meth:`ExtractionStream.partials` is read."""
    job = prepare(messages, schema, model=model, max_tokens=max_tokens, temperature=temperature,
                  seed=seed, logprobs=logprobs)
    return ExtractionStream(job, check=check)

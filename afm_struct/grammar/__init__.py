"""Constraint compilation: JSON Schema, regex, Lark and tool grammars to token-mask engines.

Start here: :func:`~.compiler.compile_constraint` (:mod:`.compiler`) takes a request
(:mod:`.spec`) and compiles it down the downgrade ladder (:mod:`.ladder`: exact -> relaxed ->
generic JSON -> unconstrained), cached (:mod:`.cache`) and bounded in time and memory
(:mod:`.worker`, :mod:`.compile_memory`).  The rooms below it, each with its job in its
``__init__``:

* ``schema/``: what a JSON Schema means (admission checks, rewrites, the tables they read);
* ``patterns/``: regular expressions as languages;
* ``engines/``: the engine protocol and one file per engine (llguidance, outlines-core);
* ``closer/``: closing cut output, and the budgets that keep it possible.

Also at the top: the request's tool-call schema (:mod:`.tool_schema`), other servers' grammar
dialects (:mod:`.grammar_syntax`), what of an engine's complaint reaches the user
(:mod:`.diagnostics`), the ``downgraded`` rule (:mod:`.downgrade`) and the after-the-fact
checks of best-effort output (:mod:`.validation`).
"""

from __future__ import annotations

from afm_struct.lazy_exports import lazy_getattr

# The names a reader and the layers above start from: name -> its module (loaded lazily, so
# importing one module of the grammar loads only that module).
_EXPORTS = {
    "CompileOptions": ".spec",
    "CompiledConstraint": ".compiler",
    "ConstraintCompiler": ".compiler",
    "compile_constraint": ".compiler",
    "get_compiler": ".compiler",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_getattr(__name__, _EXPORTS)

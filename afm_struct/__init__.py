"""afm-struct: grammar-constrained structured output for local LLMs on MLX.

The public facade.  Names load lazily so that ``import afm_struct`` (and the CLI's start-up)
does not import MLX before it has to; what it does first is load an optimized BLAS, which must
come before MLX to take effect (:mod:`afm_struct.models.blas_select`).
"""

from __future__ import annotations

from .deferred_imports import defer_rfc3987_grammar
from .lazy_exports import lazy_getattr
from .models.blas_select import select_optimized_blas
from .models.thread_stack import ensure_thread_stack

__version__ = "0.1.0"

select_optimized_blas()
defer_rfc3987_grammar()  # before anything imports jsonschema (see afm_struct/deferred_imports.py)
ensure_thread_stack()  # before any compile thread starts (see models/thread_stack.py)

_EXPORTS = {
    "AfmError": "afm_struct.errors",
    "CompileOptions": "afm_struct.grammar.spec",
    "Extraction": "afm_struct.library.extraction",
    "ExtractionError": "afm_struct.library.extraction",
    "ExtractionStream": "afm_struct.library.extraction_stream",
    "GenerationRequest": "afm_struct.decoding.generator",
    "Generator": "afm_struct.decoding.generator",
    "JsonObjectRequest": "afm_struct.grammar.spec",
    "JsonSchemaRequest": "afm_struct.grammar.spec",
    "SamplingParams": "afm_struct.decoding.sampling",
    "compile_constraint": "afm_struct.grammar.compiler",
    "extract": "afm_struct.library.extraction",
    "extract_stream": "afm_struct.library.extraction_stream",
    "load_model": "afm_struct.models",
    "make_mlx_lm_processor": "afm_struct.decoding.mlx_lm_processor",
    "run_batch": "afm_struct.library.batch_file",
}

__all__ = sorted([*_EXPORTS, "__version__"])


__getattr__ = lazy_getattr(__name__, _EXPORTS)

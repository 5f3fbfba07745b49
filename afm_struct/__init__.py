"""afm-struct: grammar-constrained structured output for local LLMs on MLX."""

__version__ = "0.1.0"

__all__ = ["__version__"]

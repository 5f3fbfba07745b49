"""Model loading: mlx-lm directories and hub ids, GGUF files, the embedded default."""

from .loader import LoadedModel, ModelInfo, load_model, load_tokenizer

__all__ = ["LoadedModel", "ModelInfo", "load_model", "load_tokenizer"]

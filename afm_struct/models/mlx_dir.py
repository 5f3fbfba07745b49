"""An mlx-lm model directory as users have them: where it is, what it is called, and whether it
can serve chat at all, checked at load so a broken directory fails in one line, not per request.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError

# Files one of which a Hugging Face tokenizer needs (fast tokenizers, SentencePiece, GPT-2 BPE).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")


def names(spec: str, path: Path) -> tuple[str, tuple[str, ...]]:
    """The model's id and its aliases for ``spec`` (as given to ``--model``) found at ``path``.

    A hub id is its own id (``org/name``), the short name an alias; a snapshot inside a Hugging
    Face cache (``…/models--org--name/snapshots/<commit>``) is named by its repo, not its commit;
    another directory by its folder name.
    """
    repo = hub_repo_of(path)
    if repo is None and not Path(spec).exists():
        repo = spec.strip("/")
    if repo is None:
        return path.absolute().name, ()
    short = repo.split("/")[-1]
    return repo, (short,) if short != repo else ()


def hub_repo_of(path: Path) -> str | None:
    """``org/name`` when ``path`` is a snapshot in a Hugging Face cache, else None."""
    parts = path.absolute().parts
    for i in range(len(parts) - 2):
        if parts[i].startswith("models--") and parts[i + 1] == "snapshots":
            # huggingface_hub writes repo_id.replace("/", "--"); an org holds no "--".
            return parts[i].removeprefix("models--").replace("--", "/", 1)
    return None


def locate(spec: str) -> Path:
    """The local folder of ``spec``: the directory itself, or the hub repo's snapshot (downloaded
    by mlx-lm's own resolver, or found in the cache when ``HF_HUB_OFFLINE`` is set)."""
    from mlx_lm.utils import _download  # the resolver mlx_lm.load itself uses

    try:
        return Path(_download(spec))
    except Exception as exc:  # huggingface_hub raises many kinds: offline, not found, auth
        raise ModelLoadError(f"cannot find model {spec!r}: not a directory here, and the Hugging Face "
                             f"hub (or its offline cache) has no such repo: {_one_line(exc)}") from exc


def load(path: Path) -> tuple[Any, Any, list[int], dict[str, Any]]:
    """The model, its Hugging Face tokenizer, its end-of-turn ids and its config, read as
    ``mlx_lm.load`` reads them (``mlx_lm.utils.load_model``, then ``AutoTokenizer`` and the eos
    ids of config.json or the architecture's defaults plus the tokenizer's own eos token).

    Not through ``mlx_lm.load``: it wraps the tokenizer in a ``TokenizerWrapper`` this package
    never uses (only the Hugging Face tokenizer and the eos ids were taken from it), and on
    large vocabularies building the wrapper costs about what the tokenizer does: tokenizer.json
    parsed a second time in Python to pick a streaming detokenizer, every token mapped for that
    detokenizer, and the whole vocabulary read three times to guess thinking and tool-call
    markers (~1-1.5 s of CPU a load at 128-200k tokens)."""
    import mlx_lm.utils
    from transformers import AutoTokenizer

    model, config = mlx_lm.utils.load_model(path)
    hf = AutoTokenizer.from_pretrained(path)
    ids = config.get("eos_token_id")
    if ids is None:
        defaults = getattr(mlx_lm.utils, "_tokenizer_defaults", lambda _path: None)(path) or {}
        ids = defaults.get("eos_token_ids")
    eos = {ids} if isinstance(ids, int) else set(ids or [])
    if hf.eos_token_id is not None:
        eos.add(hf.eos_token_id)
    return model, hf, sorted(eos), config


def check_files(path: Path) -> None:
    """Refuse a directory that lacks what mlx-lm and a tokenizer need, naming the files."""
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{path} is not an mlx-lm model directory: it has no config.json")
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise ModelLoadError(f"{path} has no tokenizer: add one of {', '.join(TOKENIZER_FILES)} "
                             "(with tokenizer_config.json) from the model's original repository")


def check_tokenizer(hf: Any, path: Path, *, chat_template: str | None, default_template: bool,
                    say: Callable[[str], None]) -> None:
    """Refuse a tokenizer that cannot serve chat; set ``chat_template`` (a file's text) when given,
    or ChatML when the model has none and ``default_template`` is on (saying so)."""
    if not hf.encode("Hello, world", add_special_tokens=False):
        raise ModelLoadError(f"the tokenizer of {path} encodes nothing (its vocabulary has "
                             f"{len(hf)} tokens): tokenizer.json is missing or unreadable")
    if chat_template is not None:
        hf.chat_template = chat_template
        return
    if getattr(hf, "chat_template", None):
        return
    if default_template:
        from .tokenizer import DEFAULT_CHAT_TEMPLATE  # ChatML

        hf.chat_template = DEFAULT_CHAT_TEMPLATE
        say(f"{path} has no chat template: using ChatML (--default-chat-template)")
        return
    where = ("tokenizer_config.json has no chat_template" if (path / "tokenizer_config.json").is_file()
             else "there is no tokenizer_config.json")
    raise ModelLoadError(f"{path} has no chat template ({where} and no chat_template.jinja): give "
                         "--chat-template FILE, or --default-chat-template to use ChatML")


def read_template(file: str | None) -> str | None:
    """The text of a ``--chat-template`` file (None when not given); refused in one line when
    unreadable or empty."""
    if file is None:
        return None
    try:
        text = Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"cannot read --chat-template {file}: {_one_line(exc)}") from exc
    if not text.strip():
        raise ModelLoadError(f"--chat-template {file} is empty")
    return text


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("…" if len(text) > 300 else "")

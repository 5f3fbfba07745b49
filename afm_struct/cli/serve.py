"""``afm-struct serve``: load a model and run the OpenAI-compatible HTTP server."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, Any

from ..errors import AfmError

if TYPE_CHECKING:
    from ..models.tokenizer import Tokenizer

# --model scripted[:TOKENS_PER_S]: the deterministic test model (afm_struct.testing) over HTTP.
SCRIPTED_SPEC = "scripted"
SCRIPTED_DEFAULT_TOKENS_PER_S = 50.0
# The --responses-store value when the option is not given.
STORE_ENV = "AFM_STRUCT_RESPONSES_STORE"
# --store-ttl's default: OpenAI keeps stored responses 30 days.
DEFAULT_STORE_TTL = "30d"
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_BYTES = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_duration(text: str) -> float:
    """``--store-ttl``: seconds, or a number with s / m / h / d (``30d``); 0 is never."""
    spec = text.strip().lower()
    scale = _SECONDS.get(spec[-1:], 0)
    try:
        value = float(spec[:-1] if scale else spec) * (scale or 1)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: give seconds or a number with "
                                         "s, m, h or d (30d), or 0 to keep responses for ever")
    return value


def parse_size(text: str) -> int:
    """A byte count, or a number with K / M / G / T (binary: ``1G`` is 2**30); 0 is no bound."""
    spec = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = _BYTES.get(spec[-1:], 0)
    try:
        value = float(spec[:-1] if scale else spec) * (scale or 1)
    except ValueError:
        value = -1.0
    if not 0 <= value < 2**63 or value != int(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: give bytes or a number with K, M, "
                                         "G or T (1G), or 0 for no bound")
    return int(value)


def parse_count(text: str) -> int:
    """A count >= 0 (0 is no bound)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count: give a whole number >= 0 (0: no bound)")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``serve`` subcommand."""
    from ..resources import server_module

    d = server_module("settings").ServerSettings()
    p = sub.add_parser("serve", help="run the OpenAI-compatible server",
                       description="Serve POST /v1/chat/completions (SSE streaming), cancellation, "
                                   "/v1/models, /health and /openapi.json.")
    p.add_argument("--host", default=d.host, help=f"bind address (default {d.host})")
    p.add_argument("--port", type=int, default=d.port, help=f"port (default {d.port})")
    add_serve_options(p, d)
    p.set_defaults(func=run)


def add_serve_options(p: argparse.ArgumentParser, d: Any) -> list[argparse.Action]:
    """The options a replica takes (all but --host/--port), shared with ``afm-struct cluster``;
    returns their actions so the cluster can pass them on."""
    actions: list[argparse.Action] = []

    def add(*names: str, **kwargs: Any) -> None:
        actions.append(p.add_argument(*names, **kwargs))

    add("--model", default=None,
        help="GGUF file, mlx-lm directory or hub id (default: the embedded SmolLM2-135M); "
             "scripted[:TOKENS_PER_S] serves the deterministic test model, which counts up at "
             "TOKENS_PER_S tokens per second per request (default "
             f"{SCRIPTED_DEFAULT_TOKENS_PER_S:g}), for load and cluster tests")
    add("--served-model-name", dest="served_model_names", action="append", default=[],
        metavar="NAME",
        help="a name clients may send as `model` (repeatable; the first is echoed in "
             "responses and all are listed by /v1/models; default: the model's own id)")
    add("--model-alias", dest="model_aliases", action="append", default=[], metavar="PATTERN=NAME",
        help="serve requests naming a model that matches the glob PATTERN as the served NAME "
             "(repeatable, first match wins; e.g. 'claude-*=SmolLM2-135M-Instruct' for Claude "
             "Code, '*=NAME' to answer to any name)")
    add("--default-max-tokens", type=int, default=d.default_max_tokens, metavar="N",
        help="the output budget of a request that sets none (Codex CLI sends none), lowered to "
             f"what the context leaves (default {d.default_max_tokens})")
    add("--weights", default="auto",
        help="auto, float32, float16, bfloat16 or quantized (default auto: on the CPU backend fp32, "
             "dequantized, when it fits in half the available memory; on GPUs as stored; the load "
             "log says which and why)")
    add("--chat-template", default=None, metavar="FILE",
        help="a Jinja chat template for an mlx-lm directory, replacing its own (a directory "
             "without one is refused at load unless this or --default-chat-template is given)")
    add("--default-chat-template", action="store_true",
        help="serve an mlx-lm directory that ships no chat template with ChatML (logged)")
    add("--log-level", default=d.log_level,
        choices=["critical", "error", "warning", "info", "debug"], help="log level")
    add("--max-queue", type=int, default=d.max_queue,
        help=f"requests allowed to wait; beyond it 503 + Retry-After (default {d.max_queue})")
    add("--max-active", type=int, default=d.max_active,
        help=f"sequences generated together (default {d.max_active})")
    add("--join-wait-ms", type=float, default=d.join_wait_ms,
        help="longest a running batch holds its next pass for requests replacing rows that "
             "just finished, used only while clients are seen to send them that fast; "
             f"0 turns it off (default {d.join_wait_ms:g})")
    add("--max-body-bytes", type=int, default=d.max_body_bytes,
        help=f"request body limit, 413 beyond it (default {d.max_body_bytes})")
    add("--body-timeout", dest="body_timeout_s", type=float, default=d.body_timeout_s,
        metavar="SECONDS",
        help="a request body must be complete this long after its headers, else 408 "
             f"(default {d.body_timeout_s:g})")
    add("--header-timeout", dest="header_timeout_s", type=float, default=d.header_timeout_s,
        metavar="SECONDS",
        help="a request's headers must be complete this long after the connection opened or "
             f"the last response ended, else 408 and the connection closes (default {d.header_timeout_s:g})")
    add("--max-connections", type=int, default=d.max_connections,
        help="open connections beyond this get 503 + Retry-After; with --max-body-bytes it "
             f"bounds the memory bodies in transit take (default {d.max_connections})")
    add("--grammar-backend", default="llguidance", choices=("llguidance", "outlines"),
        help="engine for json_schema / tools constraints (default llguidance)")
    add("--property-order", default="schema", choices=("schema", "any"),
        help="objects' properties only in the schema's order (default: keys are forced) "
             "or in any order")
    add("--grammar-budget-s", type=float, default=d.grammar_budget_s, metavar="SECONDS",
        help="grammar work (masks, parsing, closing) one request may spend in all; beyond it "
             "the request ends with grammar_too_complex: a 400, or an error chunk once "
             f"streaming (default {d.grammar_budget_s:g})")
    add("--no-close-on-length", dest="close_on_length", action="store_false",
        help="let max_tokens cut constrained output mid-value; by default its last tokens "
             "complete the JSON / tool call so it parses (finish_reason stays length)")
    add("--api-key", dest="api_keys", action="append", default=[], metavar="KEY",
        help="require 'Authorization: Bearer KEY' on every route but /health (repeatable; also "
             "AFM_STRUCT_API_KEYS, comma-separated, and --api-key-file)")
    add("--api-key-file", default=None, metavar="PATH",
        help="a file of accepted API keys, one per line, or 'name: key' lines naming each "
             "key's tenant (# starts a comment)")
    add("--responses-store", default=None, metavar="PATH|postgresql://...",
        help="where stored responses (the Responses API's store) are kept: a SQLite file, which "
             "the replicas of one host may share, or a PostgreSQL URL for several hosts (also "
             f"{STORE_ENV}, which keeps a password off the command line; default "
             "$XDG_DATA_HOME/afm-struct/responses.sqlite3)")
    add("--no-cache", dest="cache", action="store_false",
        help="neither read nor write the disk cache of what is derived from the model's files "
             "(its tokenizer, the closing vocabulary): rebuild them on this start; also "
             "AFM_STRUCT_NO_CACHE=1.  The cache lives in $AFM_STRUCT_CACHE_DIR (default "
             "$XDG_CACHE_HOME/afm-struct, i.e. ~/.cache/afm-struct)")
    add("--no-store", dest="store", action="store_false",
        help="keep no responses (requests asking to store them are answered, not stored)")
    add("--store-ttl", type=parse_duration, default=parse_duration(DEFAULT_STORE_TTL),
        metavar="DURATION",
        help="stored responses older than this are no longer returned and are deleted: seconds, "
             f"or 90m, 12h, 30d; 0 keeps them for ever (default {DEFAULT_STORE_TTL}, as OpenAI)")
    add("--store-quota-responses", type=parse_count, default=d.store_quota_responses, metavar="N",
        help="stored responses each tenant (API key name) may keep; beyond it a request with store "
             f"on is refused with 429 store_quota_exceeded (0: no bound; default {d.store_quota_responses})")
    add("--store-quota-bytes", type=parse_size, default=d.store_quota_bytes, metavar="SIZE",
        help="bytes of stored responses each tenant may keep, e.g. 500M or 2G (0: no bound; default "
             f"{d.store_quota_bytes >> 30}G)")
    add("--batch-lines", dest="batch_lines_in_flight", type=int, default=d.batch_lines_in_flight,
        metavar="N",
        help="lines of batch jobs (/v1/batches) run at once, each only while a row is spare, so "
             f"live requests come first (default {d.batch_lines_in_flight})")
    add("--batch-lines-live", dest="batch_lines_with_live", type=int, default=d.batch_lines_with_live,
        metavar="N",
        help="batch lines run at once while live requests run (default: as --batch-lines); in "
             "any case no new line starts while a live request waits for its first token")
    add("--batch-lease-s", type=float, default=d.batch_lease_s, metavar="SECONDS",
        help="a batch line a replica runs is its own this long (renewed while it runs); a line "
             "of a replica that died is run again after it (default "
             f"{d.batch_lease_s:g})")
    add("--drain-seconds", "--drain-timeout", dest="drain_seconds", type=float,
        default=d.drain_seconds, metavar="SECONDS",
        help="on SIGTERM, stop taking requests (503 draining, /health 503) and give those in "
             "flight this long to finish; the rest end with finish_reason cancelled, then the "
             f"process exits 0 (default {d.drain_seconds:g})")
    add("--log-format", default=d.log_format, choices=("text", "json"),
        help="text (human-readable) or json: one object per line, one line per request with "
             "its ID, endpoint, status, mode, tokens, TTFT, latency and finish reason "
             f"(default {d.log_format})")
    add("--log-content", action="store_true",
        help="also log each request's prompt and output text (off by default: they may hold "
             "personal data)")
    return actions


def parse_scripted_spec(spec: str | None) -> float | None:
    """Tokens per second per request for ``scripted[:TOKENS_PER_S]``; None for any other model."""
    if spec is None or (spec != SCRIPTED_SPEC and not spec.startswith(SCRIPTED_SPEC + ":")):
        return None
    rate = spec[len(SCRIPTED_SPEC) + 1:]
    if not rate:
        return SCRIPTED_DEFAULT_TOKENS_PER_S
    try:
        value = float(rate)
    except ValueError:
        value = -1.0
    if not 0 < value <= 100_000:
        raise AfmError(f"--model {spec}: TOKENS_PER_S must be a number in (0, 100000], "
                       f"e.g. {SCRIPTED_SPEC}:{SCRIPTED_DEFAULT_TOKENS_PER_S:g}")
    return value


def open_response_store(args: argparse.Namespace, environ: dict[str, str] | None = None) -> Any:
    """The response store the options name (None with --no-store), opened and migrated.
    Raises StoreError naming the path (or the database) when it cannot be used."""
    import os

    from ..store import open_store

    spec = args.responses_store or (os.environ if environ is None else environ).get(STORE_ENV) or None
    if not args.store:
        if args.responses_store:
            raise AfmError("--no-store and --responses-store contradict each other: give one")
        return None
    return open_store(spec, ttl_s=args.store_ttl or None)


class _Say:
    """Start-up messages: printed to stderr, or logged (one JSON object per line) under
    ``--log-format json``, so that every line a JSON-logging server writes parses."""

    def __init__(self, json_logs: bool) -> None:
        self.json_logs = json_logs

    def __call__(self, message: str, level: int = logging.INFO) -> None:
        if self.json_logs:
            logging.getLogger("afm_struct.cli").log(level, message.removeprefix("afm-struct: ").strip())
        else:
            print(message, file=sys.stderr, flush=True)

    def progress(self, message: str) -> None:
        """Model-loading progress."""
        self(f"  … {message}")


def run(args: argparse.Namespace) -> int:
    """Load the model (with progress), print what runs where, then serve until interrupted."""
    from ..grammar.compiler import compile_constraint
    from ..grammar.spec import CompileOptions
    from ..models.blas import blas_in_use, warn_if_reference_blas
    from ..models.loader import load_model
    from ..resources import server_module

    auth, settings_module = server_module("auth"), server_module("settings")
    api_keys = auth.load_api_keys(args.api_keys, args.api_key_file)
    tokens_per_s = parse_scripted_spec(args.model)
    try:
        settings = settings_module.ServerSettings(
            host=args.host, port=args.port, log_level=args.log_level, max_queue=args.max_queue,
            max_active=args.max_active, max_body_bytes=args.max_body_bytes,
            join_wait_ms=args.join_wait_ms, body_timeout_s=args.body_timeout_s,
            header_timeout_s=args.header_timeout_s, max_connections=args.max_connections,
            close_on_length=args.close_on_length, grammar_budget_s=args.grammar_budget_s,
            served_model_names=tuple(args.served_model_names),
            model_aliases=server_module("model_alias").parse_aliases(args.model_aliases),
            default_max_tokens=args.default_max_tokens,
            api_keys=api_keys, drain_seconds=args.drain_seconds, log_format=args.log_format,
            log_content=args.log_content, store_quota_responses=args.store_quota_responses,
            store_quota_bytes=args.store_quota_bytes,
            batch_lines_in_flight=args.batch_lines_in_flight, batch_lease_s=args.batch_lease_s,
            batch_lines_with_live=args.batch_lines_with_live)
    except ValueError as exc:
        raise AfmError(f"invalid server settings: {exc}") from None
    server_module("logging_json").configure(settings.log_format, settings.log_level,
                                            log_content=settings.log_content)
    say = _Say(settings.log_format == "json")
    if not api_keys and not auth.is_loopback(settings.host):
        say(f"afm-struct: warning: serving on {settings.host} without an API key: anyone who can "
            f"reach port {settings.port} can use the model; set --api-key, --api-key-file or "
            f"{auth.ENV_VAR}", logging.WARNING)
    if not args.cache:
        from ..models import disk_cache

        disk_cache.disable()
    # Before the model: a bad store path fails in a second, not after the load.
    store = open_response_store(args)
    say(f"afm-struct: responses stored in {store.description}" if store is not None else
        "afm-struct: responses not stored (--no-store)")
    say(f"afm-struct: loading {args.model or 'the embedded model'}")
    if tokens_per_s is not None:
        from ..testing import served_scripted_model

        loaded = served_scripted_model(tokens_per_s)
    else:
        from ..models.loader import ChatTemplateOptions
        from ..models.mlx_dir import read_template

        templates = ChatTemplateOptions(read_template(args.chat_template), args.default_chat_template)
        loaded = load_model(args.model, weights=args.weights, progress=say.progress, templates=templates)
    info = loaded.info
    stored = f" stored {info.stored} →" if info.stored else ""
    aliases = f", also as {', '.join(info.aliases)}" if info.aliases else ""
    say(f"afm-struct: model {info.id}{aliases} ({info.source},{stored} {info.weights}, "
        f"{info.weight_bytes / 1e6:.0f} MB, context {info.context_length}) "
        f"loaded in {info.load_seconds:.1f}s"
        + (f"; weights: {info.weights_reason}" if info.weights_reason else ""))
    say(f"afm-struct: MLX device {info.device}; BLAS {blas_in_use()}")
    warn_if_reference_blas()
    keys = f"API key required ({len(api_keys)} accepted)" if api_keys else "no API key"
    say(f"afm-struct: serving on http://{settings.host}:{settings.port} "
        f"(POST /v1/chat/completions, /v1/responses, /v1/completions, /v1/messages, /v1/files, "
        f"/v1/batches; Ollama's /api/chat, /api/generate; GET /v1/models, /health, /metrics; {keys})")
    options = CompileOptions(backend=args.grammar_backend, property_order=args.property_order)

    def compile_fn(tokenizer: Tokenizer, request: Any) -> Any:
        return compile_constraint(tokenizer, request, options)

    app = server_module("app").create_app(loaded, settings, compile_fn=compile_fn, response_store=store)
    return int(server_module("drain").run(app, settings))

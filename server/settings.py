"""Server settings: built once (CLI or app factory), frozen, passed down explicitly."""

from __future__ import annotations

from dataclasses import dataclass, field

from afm_struct.decoding.grammar_budget import DEFAULT_GRAMMAR_BUDGET_S
from afm_struct.store import StoreQuota

from .model_alias import ModelAlias
from .tenants import ApiKey, distinct_keys


@dataclass(frozen=True)
class ServerSettings:
    """Everything the HTTP layer can be configured with.

    Nothing below the app factory reads the environment: the CLI builds one of these.
    """

    host: str = "127.0.0.1"
    port: int = 9999
    log_level: str = "info"
    # Admission: sequences stepped together, and requests allowed to wait behind them.
    max_active: int = 8
    max_queue: int = 16
    retry_after_s: int = 1
    # Longest a running batch holds a pass for requests replacing finished rows (adaptive; 0 off).
    join_wait_ms: float = 40.0
    # Bodies above this are refused with 413 before they are parsed.
    max_body_bytes: int = 8 * 1024 * 1024
    # A request body must be complete this long after its headers, or 408 (stalled uploads).
    body_timeout_s: float = 30.0
    # A request's headers must be complete this long after the connection opened or the last
    # response ended (slowloris); else 408 and the connection is closed.
    header_timeout_s: float = 10.0
    # Open connections beyond this get 503 + Retry-After: with max_body_bytes, a bound on the
    # memory bodies in transit take.
    max_connections: int = 128
    # Used when a request gives neither max_tokens nor max_completion_tokens (clamped to context).
    default_max_tokens: int = 4096
    # X-AFM-Profile: extended samples at this interval (the contract asks for <= 250 ms).
    profile_interval_s: float = 0.1
    # Reasoning extraction: "auto" splits <think>…</think> when the tokenizer has those tokens,
    # "think" always does, "off" never does.
    reasoning: str = "auto"
    # Completed request IDs remembered (for a precise 404 message on a late cancel).
    recent_ids: int = 1024
    # Constrained output cut by max_tokens ends with the grammar's shortest completion, so it
    # parses (finish_reason stays "length"); a request's afm_close_on_length: false opts out.
    close_on_length: bool = True
    # Seconds of grammar work (masks, parsing, closing) one request may spend before it ends
    # with grammar_too_complex (afm_struct/decoding/grammar_budget.py).
    grammar_budget_s: float = DEFAULT_GRAMMAR_BUDGET_S
    # Names the server answers to in ``model`` and lists in /v1/models (empty: the model's id).
    served_model_names: tuple[str, ...] = ()
    # Glob patterns of other names served as one of those (--model-alias 'claude-*=NAME').
    model_aliases: tuple[ModelAlias, ...] = ()
    # Other names the model answers to when no --served-model-name is given (a hub id's short
    # name); listed after its id.  create_app fills it from the loaded model.
    model_short_names: tuple[str, ...] = ()
    # Bearer keys accepted on every route but /health (empty: no authentication), each naming
    # its tenant or not (a bare string is an unnamed key). Kept out of the repr so settings can
    # be logged.
    api_keys: tuple[ApiKey | str, ...] = field(default=(), repr=False)
    # SIGTERM: requests in flight get this long to finish before they are cancelled.
    drain_seconds: float = 30.0
    # "text" (human-readable) or "json" (one object per line); prompt and output text are
    # logged only with log_content.
    log_format: str = "text"
    log_content: bool = False
    # What each tenant may keep in the response store (0: no bound): stored responses, and the
    # bytes they take.  Beyond it a create with store on is 429 store_quota_exceeded.
    store_quota_responses: int = 100_000
    store_quota_bytes: int = 1 << 30
    # Batch jobs (docs/batches.md): lines of all batches in flight at once (each only while the
    # scheduler has a spare row), and how long a claimed line is a runner's before another
    # runner (a restart, another replica on the store) may take it over.
    batch_lines_in_flight: int = 4
    batch_lease_s: float = 30.0
    # Lines in flight while live requests run (a new line starts only below it; None: as
    # batch_lines_in_flight): each batch row adds its masks, sampling and event-loop work to
    # every step a live request waits on, but the lines held back start together once live
    # traffic pauses, a burst the next live request meets (benchmarks/batch/README.md).
    batch_lines_with_live: int | None = None

    def __post_init__(self) -> None:
        live_lines = self.batch_lines_with_live
        live_lines = self.batch_lines_in_flight if live_lines is None else live_lines
        if self.batch_lines_in_flight < 1 or not self.batch_lease_s > 0 or live_lines < 0:
            raise ValueError("batch_lines_in_flight must be >= 1, batch_lines_with_live >= 0 and "
                             "batch_lease_s > 0")
        if not 0 < self.profile_interval_s <= 0.25:
            raise ValueError("profile_interval_s must be in (0, 0.25]")
        if self.reasoning not in ("auto", "think", "off"):
            raise ValueError("reasoning must be auto, think or off")
        if self.max_active < 1 or self.max_queue < 0:
            raise ValueError("max_active must be >= 1 and max_queue >= 0")
        if not (self.body_timeout_s > 0 and self.header_timeout_s > 0):
            raise ValueError("body_timeout_s and header_timeout_s must be > 0")
        if not 0 < self.grammar_budget_s <= 3600:
            raise ValueError("grammar_budget_s must be in (0, 3600]")
        if self.default_max_tokens < 1:
            raise ValueError("default_max_tokens must be >= 1")
        if self.max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        if not 0 <= self.join_wait_ms <= 1000:
            raise ValueError("join_wait_ms must be in [0, 1000]")
        if any(not name.strip() for name in self.served_model_names):
            raise ValueError("a served model name must not be empty")
        if len(set(self.served_model_names)) != len(self.served_model_names):
            raise ValueError("served model names must be distinct")
        if self.served_model_names:
            for alias in self.model_aliases:
                if alias.target not in self.served_model_names:
                    raise ValueError(f"model alias {alias.pattern!r} maps to {alias.target!r}, which is not "
                                     f"a served model name ({', '.join(self.served_model_names)})")
        if not 0 <= self.drain_seconds <= 3600:
            raise ValueError("drain_seconds must be in [0, 3600]")
        if self.log_format not in ("text", "json"):
            raise ValueError("log_format must be text or json")
        if any(isinstance(key, str) and (not key or key != key.strip()) for key in self.api_keys):
            raise ValueError("an API key must be non-empty and without surrounding spaces")
        object.__setattr__(self, "api_keys", distinct_keys(self.api_keys))
        if self.store_quota_responses < 0 or self.store_quota_bytes < 0:
            raise ValueError("store quotas must be >= 0 (0: no bound)")

    @property
    def store_quota(self) -> StoreQuota:
        """What each tenant may keep in the response store."""
        return StoreQuota(responses=self.store_quota_responses or None, bytes=self.store_quota_bytes or None)

    @property
    def keys(self) -> tuple[ApiKey, ...]:
        """The accepted keys (``api_keys`` as :class:`ApiKey` values)."""
        return self.api_keys  # type: ignore[return-value]  # normalized in __post_init__

    def model_names(self, model_id: str) -> tuple[str, ...]:
        """The names requests may send as ``model``, the first one echoed by default."""
        return self.served_model_names or (model_id, *(a for a in self.model_short_names if a != model_id))

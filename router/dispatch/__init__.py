"""Outbound delivery: the outbox dispatcher, its per-channel senders and its leader-elected loop."""

from router.dispatch.dispatcher import (
    DispatchConfig,
    Dispatcher,
    backoff_seconds,
    build_dispatcher,
    outbox_status,
    requeue_dead,
)
from router.dispatch.leader import LEADER_LOCK_KEY, DispatcherLoop

__all__ = ["LEADER_LOCK_KEY", "DispatchConfig", "Dispatcher", "DispatcherLoop", "backoff_seconds",
           "build_dispatcher", "outbox_status", "requeue_dead"]

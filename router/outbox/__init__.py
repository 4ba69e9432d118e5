"""The outbox: queued outbound messages (store), the dispatcher that delivers them through the channels' senders,
its leader-elected loop, rate limits and delivery receipts."""

from router.outbox.dispatcher import (
    DispatchConfig,
    Dispatcher,
    backoff_seconds,
    build_dispatcher,
    outbox_status,
    requeue_dead,
)
from router.outbox.leader import LEADER_LOCK_KEY, DispatcherLoop

__all__ = ["LEADER_LOCK_KEY", "DispatchConfig", "Dispatcher", "DispatcherLoop", "backoff_seconds",
           "build_dispatcher", "outbox_status", "requeue_dead"]

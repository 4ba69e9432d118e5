"""The background loop that runs the lease and SLA sweeps every few seconds.

Every pod may run it: :meth:`HandoffService.run_sweeps` takes a transaction-scoped advisory
lock, so at any moment one pod sweeps and the others skip. A pod that dies mid-sweep rolls
back and releases the lock with its connection, so leadership moves without coordination.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from handoff.service import HandoffService

log = logging.getLogger(__name__)


class SweeperLoop:
    def __init__(self, service: HandoffService, interval: float):
        self.service = service
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs = 0
        self.last: dict[str, Any] | None = None

    def start(self) -> SweeperLoop:
        if self.interval <= 0 or self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._loop, name="handoff-sweeper", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.last = self.service.run_sweeps()
                self.runs += 1
                if self.last.get("requeued") or self.last.get("breached"):
                    log.info("handoff sweep", extra={"fields": {k: self.last[k] for k in ("requeued", "breached")}})
            except Exception:  # noqa: BLE001 - a failed sweep is retried on the next tick
                log.warning("handoff sweep failed", exc_info=True)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

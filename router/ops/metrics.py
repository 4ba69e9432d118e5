"""Prometheus metrics. One registry per app instance, so several apps (tests) never collide."""

from __future__ import annotations

import logging
import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

log = logging.getLogger(__name__)

STAGES = ("harness", "rules", "embedding", "retrieval", "rerank", "answer", "handoff", "total")
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.http_requests = Counter(
            "switchboard_http_requests", "HTTP requests by route and status", ["method", "route", "status"], registry=r
        )
        self.messages = Counter("switchboard_messages", "Inbound messages committed, by channel", ["channel"],
                                registry=r)
        self.turn_failures = Counter(
            "switchboard_turn_failures", "Failed turn attempts (rolled back) by cause: pool_timeout, connection_lost, "
            "server_shutdown, connect_failed, deadlock, error", ["cause"], registry=r)
        self.duplicates = Counter(
            "switchboard_duplicate_messages", "Retried deliveries answered from the stored turn", ["channel"], registry=r
        )
        self.decisions = Counter(
            "switchboard_decisions", "Routing decisions", ["tier", "intent", "decided_by"], registry=r
        )
        self.escalations = Counter("switchboard_escalations", "Escalations by rule", ["rule"], registry=r)
        self.l1_resolved = Counter("switchboard_l1_auto_resolved", "L1 turns answered from the KB", registry=r)
        self.stage_seconds = Histogram(
            "switchboard_stage_seconds", "Latency per pipeline stage", ["stage"], buckets=_LATENCY_BUCKETS, registry=r
        )
        self.tickets = Counter("switchboard_tickets", "Ticket lifecycle events", ["kind", "event"], registry=r)
        self.queue_depth = Gauge("switchboard_queue_depth", "Open tickets", ["kind", "priority"], registry=r,
                                 multiprocess_mode="mostrecent")
        self.sla_breaches = Counter("switchboard_sla_breaches", "Tickets past their SLA", ["kind"], registry=r)
        self.rebuild_seconds = Gauge("switchboard_rebuild_seconds", "Duration of the last index rebuild", registry=r,
                                     multiprocess_mode="mostrecent")
        self.rebuild_chunks = Gauge("switchboard_rebuild_chunks", "Chunks in the last index rebuild", registry=r,
                                    multiprocess_mode="mostrecent")
        self.outbox = Counter("switchboard_outbox", "Outbound deliveries by channel and result", ["channel", "result"], registry=r)
        self.csat = Counter("switchboard_csat_ratings", "CSAT ratings received, by score", ["score"], registry=r)

    def refresh_from_database(self, pool) -> None:
        """Set the gauges whose truth is shared by every pod and lives in Postgres: queue depth and the
        last knowledge rebuild (it runs in its own process, e.g. the nightly CronJob). Called per scrape;
        a database problem leaves the last values and never fails the scrape."""
        from handoff.queries import queue_depth     # imported here: the metrics module stays light to import
        from rag.generations import last_rebuild

        try:
            with pool.connection(timeout=2.0) as conn:
                depth = queue_depth(conn)
                last = last_rebuild(conn)
        except Exception as exc:  # noqa: BLE001 - a scrape must not fail because of the database
            log.warning("metrics: database gauges not refreshed: %s", type(exc).__name__)
            return
        seen = {(row["kind"], row["priority"]): row["n"] for row in depth}
        for sample in self.queue_depth.collect()[0].samples:   # series that drained to zero
            seen.setdefault((sample.labels["kind"], sample.labels["priority"]), 0)
        for (kind, priority), n in seen.items():
            self.queue_depth.labels(kind, priority).set(n)
        if last is not None:
            self.rebuild_seconds.set(last["seconds"])
            self.rebuild_chunks.set(last["chunks"])

    def render(self) -> bytes:
        """This process's metrics; under several workers (``PROMETHEUS_MULTIPROC_DIR`` set by ``switchboard
        serve``) every worker's, so a scrape that lands on any one of them sees the whole gateway."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)

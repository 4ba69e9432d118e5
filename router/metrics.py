"""Prometheus metrics. One registry per app instance, so several apps (tests) never collide."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

STAGES = ("harness", "rules", "embedding", "retrieval", "rerank", "answer", "handoff", "total")
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.http_requests = Counter(
            "switchboard_http_requests", "HTTP requests by route and status", ["method", "route", "status"], registry=r
        )
        self.messages = Counter("switchboard_messages", "Inbound messages by channel", ["channel"], registry=r)
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
        self.queue_depth = Gauge("switchboard_queue_depth", "Open tickets", ["kind", "priority"], registry=r)
        self.sla_breaches = Counter("switchboard_sla_breaches", "Tickets past their SLA", ["kind"], registry=r)
        self.rebuild_seconds = Gauge("switchboard_rebuild_seconds", "Duration of the last index rebuild", registry=r)
        self.rebuild_chunks = Gauge("switchboard_rebuild_chunks", "Chunks in the last index rebuild", registry=r)
        self.outbox = Counter("switchboard_outbox", "Outbound deliveries by channel and result", ["channel", "result"], registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)

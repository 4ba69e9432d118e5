"""Prometheus metrics. One registry per app instance, so several apps (tests) never collide."""

from __future__ import annotations

import logging
import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

log = logging.getLogger(__name__)

STAGES = ("prepare", "harness", "rules", "embedding", "retrieval", "rerank", "answer", "handoff", "outside", "total")
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


OTHER = "other"
TIERS = ("L1", "L2", "L3", "none")
DECIDED_BY = ("harness", "rules", "embeddings", "state", "none")
HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


class ClosedLabels:
    """A metric whose label values come from closed sets: anything else is counted as ``other``.

    Every distinct label value is a permanent series; values that clients choose (a channel name, an
    intent) would let anyone grow /metrics without bound. ``None`` for a label means the set is open
    (values the code itself chooses, e.g. a stage name).
    """

    def __init__(self, metric, *allowed):
        self.metric = metric
        self.allowed = list(allowed)   # per label: None (open), a set, or a predicate

    def labels(self, *values):
        closed = [v if allowed is None or (allowed(v) if callable(allowed) else v in allowed) else OTHER
                  for v, allowed in zip(values, self.allowed, strict=True)]
        return self.metric.labels(*closed)

    def __getattr__(self, name):
        return getattr(self.metric, name)


# what happened to workflow instances (label values of switchboard_flows; cancelled = abandoned)
FLOW_EVENTS = ("started", "completed", "cancelled", "escalated")

# what a turn did for the customer, and the languages replies are in: closed label sets shared by the
# decider (router.turn), /metrics and the report
TURN_OUTCOMES = ("resolved", "clarified", "ticketed", "held", "none")
REPLY_LANGUAGES = ("en", "zh")


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None, *, channels=()):
        """``channels``: the channel registry (the composition root passes it; unknown names count as other)."""
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.channels = set(channels)
        self.intents: set[str] = {"none", "oos"}        # + the loaded intents file's (allow_intents)
        self._classifier = None                          # its current config's intents count too (reloads)
        self._intents_of: tuple[object, frozenset[str]] = (None, frozenset())
        self.escalation_rules: set[str] | None = None    # the policy's rule names, when known
        self.http_requests = Counter(
            "switchboard_http_requests", "HTTP requests by route and status", ["method", "route", "status"], registry=r
        )
        self.messages = Counter("switchboard_messages", "Inbound messages committed, by channel", ["channel"],
                                registry=r)
        self.turn_failures = Counter(
            "switchboard_turn_failures", "Failed turn attempts (rolled back) by cause: pool_timeout, connection_lost, deadline, "
            "server_shutdown, connect_failed, deadlock, error", ["cause"], registry=r)
        self.refused = Counter(
            "switchboard_messages_refused", "Messages refused with nothing stored, by reason: conversation_owner (409), "
            "quota_customer, quota_key, quota_total, concurrent (429)", ["reason"], registry=r)
        self.duplicates = Counter(
            "switchboard_duplicate_messages", "Retried deliveries answered from the stored turn", ["channel"], registry=r
        )
        self.decisions = Counter(
            "switchboard_decisions", "Routing decisions", ["tier", "intent", "decided_by"], registry=r
        )
        self.escalations = Counter("switchboard_escalations", "Escalations by rule", ["rule"], registry=r)
        self.l1_resolved = Counter("switchboard_l1_auto_resolved", "L1 turns answered from the KB", registry=r)
        # closed label sets: TURN_OUTCOMES and REPLY_LANGUAGES (below)
        self.deflection = Counter("switchboard_turn_outcomes", "Routed turns by outcome (resolved by the bot, "
                                  "clarified, ticketed, held by a person, none), channel and reply language",
                                  ["outcome", "channel", "lang"], registry=r)
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
        self.index_refused = Gauge("switchboard_index_refused_total", "Index rebuilds and syncs refused because the "
                                   "result was empty or much smaller than the serving knowledge base", registry=r,
                                   multiprocess_mode="mostrecent")
        self.outbox = Counter("switchboard_outbox", "Outbound deliveries by channel and result", ["channel", "result"], registry=r)
        self.csat = Counter("switchboard_csat_ratings", "CSAT ratings received, by score", ["score"], registry=r)

        self.flows = Counter("switchboard_flows", "Workflow instances by workflow and event: started, completed, "
                             "cancelled (abandoned by the customer, or rejected), escalated (to a person)",
                             ["workflow", "event"], registry=r)
        self._flow_engine = None                         # the loaded workflows' names are the label values

        self.http_requests = ClosedLabels(self.http_requests, set(HTTP_METHODS), None, None)  # route: templates
        self.flows = ClosedLabels(self.flows, self._known_workflow, set(FLOW_EVENTS))
        self.messages = ClosedLabels(self.messages, self.channels)
        self.duplicates = ClosedLabels(self.duplicates, self.channels)
        self.decisions = ClosedLabels(self.decisions, set(TIERS), self._known_intent, set(DECIDED_BY))
        self.outbox = ClosedLabels(self.outbox, self.channels, None)

    def allow_intents(self, names) -> None:
        """These intent names become label values."""
        self.intents.update(names)

    def allow_intents_of(self, classifier) -> None:
        """The intents of ``classifier``'s loaded file, whatever it is reloaded to, become label values."""
        self._classifier = classifier

    def _known_intent(self, name: str) -> bool:
        if name in self.intents:
            return True
        config = getattr(self._classifier, "config", None)
        seen, names = self._intents_of
        if config is not seen:
            names = frozenset(i.name for i in getattr(config, "intents", ()))
            self._intents_of = (config, names)
        return name in names

    def allow_workflows_of(self, engine) -> None:
        """The workflows ``engine`` has loaded (whatever it is reloaded to) become label values; their
        series start at zero so a dashboard sees every workflow before its first flow."""
        self._flow_engine = engine
        for name in engine.workflows.names():
            for event in FLOW_EVENTS:
                self.flows.labels(name, event)

    def _known_workflow(self, name: str) -> bool:
        engine = self._flow_engine
        return engine is not None and name in engine.workflows

    def count_flow(self, workflow: str, event: str) -> None:
        self.flows.labels(workflow, event).inc()

    def refresh_from_database(self, pool) -> None:
        """Set the gauges whose truth is shared by every pod and lives in Postgres: queue depth and the
        last knowledge rebuild (it runs in its own process, e.g. the nightly CronJob). Called per scrape;
        a database problem leaves the last values and never fails the scrape."""
        from handoff.queries import queue_depth     # imported here: the metrics module stays light to import
        from rag.generations import index_refusals, last_rebuild

        try:
            with pool.connection(timeout=2.0) as conn:
                depth = queue_depth(conn)
                last = last_rebuild(conn)
                refused = index_refusals(conn)["total"]
        except Exception as exc:  # noqa: BLE001 - a scrape must not fail because of the database
            log.warning("metrics: database gauges not refreshed: %s", type(exc).__name__)
            return
        seen = {(row["kind"], row["priority"]): row["n"] for row in depth}
        for sample in self.queue_depth.collect()[0].samples:   # series that drained to zero
            seen.setdefault((sample.labels["kind"], sample.labels["priority"]), 0)
        for (kind, priority), n in seen.items():
            self.queue_depth.labels(kind, priority).set(n)
        self.index_refused.set(refused)
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

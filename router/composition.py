"""Wiring of the gateway's components onto :class:`router.services.Services`.

Kept apart from ``services.py`` so each capability (encoder, classifier, retrieval,
handoff) adds its own small wiring function here without touching the plumbing.
"""

from __future__ import annotations

import logging

from router.services import Services

log = logging.getLogger(__name__)


def wire_encoder(services: Services) -> None:
    from rag.encoder import Encoder

    services.encoder = Encoder.from_name(services.settings.embedding_model, services.settings.models_dir,
                                         threads=services.settings.torch_threads)


def wire_classifier(services: Services) -> None:
    """The intent classifier from settings.intents_file (or the bundled sample) and the shared encoder."""
    from router.classify import IntentClassifier
    from router.intents import BUNDLED_INTENTS, load_intents

    path = services.settings.intents_file or BUNDLED_INTENTS
    if services.settings.intents_file is None and not BUNDLED_INTENTS.is_file():
        log.warning("no intents file configured and no bundled sample: the classifier is not wired")
        return
    config = load_intents(path)
    services.classifier = IntentClassifier.from_config(config, services.encoder)
    services.readiness["classifier"] = lambda: (True, f"{len(config.intents)} intents from {path}")


def wire_handoff(services: Services) -> None:
    """The L2/L3 queue (policy from SWITCHBOARD_HANDOFF_*), its conversation-state port and the sweeper loop."""
    from handoff import HandoffConfig, HandoffService
    from handoff.sweeper import SweeperLoop
    from router.state import ConversationStatePort

    metrics = services.metrics

    def count(name: str, labels: dict[str, str], value: float) -> None:
        if name == "ticket_event":
            metrics.tickets.labels(labels["kind"], labels["event"]).inc(value)
            if labels["event"] == "sla_breached":
                metrics.sla_breaches.labels(labels["kind"]).inc(value)
        elif name == "queue_depth":
            metrics.queue_depth.labels(labels["kind"], labels["priority"]).set(value)

    config = HandoffConfig()
    services.handoff = HandoffService(services.pool, ConversationStatePort(), config, metrics_hook=count)
    sweeper = SweeperLoop(services.handoff, config.sweep_interval_seconds).start()
    services.closers.append(sweeper.stop)


def wire_router(services: Services) -> None:
    """The routing pipeline: harness, classifier, escalation, state machine, then rag / handoff by tier."""
    from router.decide import Router
    from router.escalation import load_policy
    from router.pipeline import Pipeline

    if services.classifier is None:
        log.error("no classifier is wired: messages are stored but not routed")
        return
    policy = load_policy(services.settings.policy_file)
    decider = Router(policy=policy, classifier=services.classifier, rag=services.rag, handoff=services.handoff,
                     encoder=services.encoder, metrics=services.metrics)
    services.pipeline = Pipeline(services.pool, services.metrics, decider)


def wire_dispatcher(services: Services) -> None:
    """The outbox dispatcher as a leader-elected background loop (off with SWITCHBOARD_DISPATCHER_ENABLED=false)."""
    from router.dispatch import DispatcherLoop, build_dispatcher

    s = services.settings
    if not s.dispatcher_enabled:
        return
    dispatcher = build_dispatcher(s, services.pool, services.metrics)
    loop = DispatcherLoop(services.dsn, dispatcher, poll_seconds=s.outbox_poll_seconds)
    services.dispatcher = loop
    services.readiness["dispatcher"] = lambda: (True, "leader" if loop.is_leader else "standby")
    loop.start()

    def stop() -> None:
        loop.stop()
        dispatcher.close()

    services.closers.append(stop)


def wire_components(services: Services) -> None:
    wire_encoder(services)
    wire_classifier(services)
    wire_handoff(services)
    wire_router(services)  # keep last: it composes the parts wired above
    wire_dispatcher(services)

"""Wiring of the gateway's components onto :class:`router.services.Services`.

Kept apart from ``services.py`` so each capability (encoder, classifier, retrieval,
handoff) adds its own small wiring function here without touching the plumbing.
"""

from __future__ import annotations

import logging

from router.services import Services

log = logging.getLogger(__name__)


def wire_encoder(services: Services) -> None:
    from rag.encoder import Encoder, resolve_model_path

    path = resolve_model_path(services.settings.embedding_model, services.settings.models_dir)
    services.encoder = Encoder(path, threads=services.settings.torch_threads)


def wire_components(services: Services) -> None:
    wire_encoder(services)

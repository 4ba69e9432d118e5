"""What answers without authentication, and whether the gateway may serve it on the address it binds.

Every webhook is signed or off, the direct API needs an integration key and the agents' API a token. What
can still be open is chosen explicitly: an unsigned web webhook (``SWITCHBOARD_WEB_UNSIGNED``), the
development key of ``make run`` (a key kept in a file and printed), public API docs or metrics. Each is
logged as a warning at start-up; on an address other than loopback the gateway refuses to start with any of
the first two unless ``SWITCHBOARD_ALLOW_UNAUTHENTICATED`` (``serve --allow-unauthenticated``) says so.
"""

from __future__ import annotations

import ipaddress
import logging

from router.channels.settings import secret

log = logging.getLogger(__name__)


class ExposureRefused(RuntimeError):
    """The configuration would serve something unauthenticated beyond loopback without being told to."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def open_surfaces(settings) -> list[tuple[str, bool]]:
    """(what is open, whether it blocks a public bind) for the configuration."""
    found: list[tuple[str, bool]] = []
    if settings.web_unsigned and secret(settings.web_hmac_secret) is None:
        found.append(("the web webhook accepts unsigned requests for any customer id (SWITCHBOARD_WEB_UNSIGNED)",
                      True))
    if settings.dev_key:
        found.append(("the development integration key is on (--dev-key, SWITCHBOARD_DEV_KEY)", True))
    if getattr(settings, "api_docs", "authenticated") == "public":
        found.append(("/docs, /redoc and /openapi.json are public (SWITCHBOARD_API_DOCS=public)", False))
    if getattr(settings, "metrics_access", "authenticated") == "public":
        found.append(("/metrics is public (SWITCHBOARD_METRICS_ACCESS=public)", False))
    return found


def refusal(settings) -> str | None:
    """Why the gateway must not serve this configuration on its address, or None."""
    if is_loopback(settings.host) or settings.allow_unauthenticated:
        return None
    blocking = [what for what, blocks in open_surfaces(settings) if blocks]
    if not blocking:
        return None
    return (f"refusing to serve on {settings.host}: {'; '.join(blocking)}. Bind 127.0.0.1, configure the secret "
            "or key, or pass --allow-unauthenticated (SWITCHBOARD_ALLOW_UNAUTHENTICATED=true) if this is meant")


def check(settings) -> None:
    """Warn about each open surface; raise :class:`ExposureRefused` when the bind address forbids them."""
    for what, _ in open_surfaces(settings):
        log.warning("unauthenticated: %s", what, extra={"fields": {"host": settings.host}})
    why = refusal(settings)
    if why is not None:
        raise ExposureRefused(why)

"""Queue policy: SLA per priority, lease length, approval tiers for money, priority floors.

Read from the environment with the prefix ``SWITCHBOARD_HANDOFF_`` (maps and lists as JSON,
e.g. ``SWITCHBOARD_HANDOFF_SLA_SECONDS='{"urgent": 120}'``) so operators tune the queue
without code. It is handoff's part of the gateway's settings tree: the app's ``Settings`` composes it
(``Settings.handoff_config()``) and the composition root passes it to :class:`HandoffService`.
"""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from handoff.models import APPROVAL_LEVELS, PRIORITIES, level_rank


class ApprovalTier(BaseModel):
    """Amounts up to ``max_amount`` need at least ``level``; ``max_amount`` None = everything above."""

    model_config = ConfigDict(extra="forbid")
    level: str
    max_amount: Decimal | None = None


DEFAULT_SLA_SECONDS = {"urgent": 5 * 60, "high": 15 * 60, "normal": 60 * 60, "low": 4 * 60 * 60}


def _default_tiers() -> list[ApprovalTier]:
    return [
        ApprovalTier(level="auto", max_amount=Decimal(50)),
        ApprovalTier(level="supervisor", max_amount=Decimal(500)),
        ApprovalTier(level="manager", max_amount=Decimal(2000)),
        ApprovalTier(level="director", max_amount=None),
    ]


class HandoffConfig(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SWITCHBOARD_HANDOFF_", extra="ignore")

    sla_seconds: dict[str, int] = Field(
        default_factory=lambda: dict(DEFAULT_SLA_SECONDS),
        description="Time for a human to pick a ticket up, by priority (the ones not given keep their default).",
    )
    lease_seconds: float = Field(default=90.0, gt=0, description="A claim lapses unless heartbeated within this.")
    default_team: str = Field(default="general", description="Team of tickets opened without one.")
    approval_tiers: list[ApprovalTier] = Field(default_factory=_default_tiers)
    reason_priority: dict[str, str] = Field(
        default_factory=lambda: {"crisis": "urgent", "account_security": "urgent", "security": "urgent",
                                 "complaint": "high"},
        description="Priority floor by escalation reason (an exact reason or its part before ':').",
    )
    max_message_chars: int = Field(default=4000, gt=0, description="Agent messages above this get 413.")
    sweep_interval_seconds: float = Field(default=5.0, ge=0, description="Lease/SLA sweeps; 0 = no background loop.")
    page_size: int = Field(default=50, gt=0, le=500)
    stream_recheck_seconds: float = Field(default=2.0, gt=0, le=4.5, description="An open event stream re-checks "
                                          "its token this often: a revoked token or disabled agent ends it within 5 s.")
    max_streams_per_token: int = Field(default=4, ge=1, le=100, description="Open event streams one token may hold "
                                       "in one process; beyond that 429.")

    @field_validator("sla_seconds")
    @classmethod
    def _all_priorities(cls, v: dict[str, int]) -> dict[str, int]:
        unknown = set(v) - set(PRIORITIES)
        if unknown:
            raise ValueError(f"unknown priorities: {sorted(unknown)}")
        merged = {**DEFAULT_SLA_SECONDS, **v}
        if any(s <= 0 for s in merged.values()):
            raise ValueError("SLA seconds must be positive")
        return merged

    @field_validator("reason_priority")
    @classmethod
    def _known_priorities(cls, v: dict[str, str]) -> dict[str, str]:
        bad = {k: p for k, p in v.items() if p not in PRIORITIES}
        if bad:
            raise ValueError(f"unknown priorities: {bad}")
        return {k.lower(): p for k, p in v.items()}

    @model_validator(mode="after")
    def _tiers_ordered(self) -> HandoffConfig:
        tiers = self.approval_tiers
        if not tiers or tiers[-1].max_amount is not None:
            raise ValueError("the last approval tier must have no max_amount (it covers everything above)")
        for t in tiers:
            if t.level not in APPROVAL_LEVELS:
                raise ValueError(f"unknown approval level {t.level!r}")
        limits = [t.max_amount for t in tiers[:-1]]
        if any(a is None for a in limits) or limits != sorted(a for a in limits if a is not None):
            raise ValueError("approval tiers must be ordered by max_amount")
        ranks = [level_rank(t.level) for t in tiers]
        if ranks != sorted(ranks):
            raise ValueError("approval tiers must climb in level")
        return self

    def required_level(self, amount: Decimal | float | int | None) -> str | None:
        """The lowest approval level allowed to approve ``amount`` (None when there is no amount)."""
        if amount is None:
            return None
        value = Decimal(str(amount))
        for tier in self.approval_tiers:
            if tier.max_amount is None or value <= tier.max_amount:
                return tier.level
        return self.approval_tiers[-1].level  # pragma: no cover - the last tier is unbounded

    def priority_floor(self, reason: str) -> str | None:
        key = (reason or "").strip().lower()
        return self.reason_priority.get(key) or self.reason_priority.get(key.split(":", 1)[0])

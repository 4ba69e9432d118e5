"""The queue's vocabulary: kinds, statuses, priorities, roles, approval levels, and the agent."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

KINDS = ("assist", "handoff", "approval")   # L2: a draft awaits a human; L3: a human takes over; approval: a workflow waits
STATUSES = ("queued", "claimed", "resolved", "returned_to_bot", "cancelled")
OPEN_STATUSES = ("queued", "claimed")
PRIORITIES = ("urgent", "high", "normal", "low")    # queue order, most pressing first
ROLES = ("agent", "supervisor", "admin")
APPROVAL_LEVELS = ("auto", "supervisor", "manager", "director")
DEFAULT_APPROVAL = {"agent": "auto", "supervisor": "supervisor", "admin": "director"}


def priority_rank(priority: str) -> int:
    return PRIORITIES.index(priority)


def level_rank(level: str | None) -> int:
    return -1 if level is None else APPROVAL_LEVELS.index(level)


@dataclass(frozen=True)
class Agent:
    """Who is calling: an authenticated agent (from a token) or a system actor."""

    id: str | None
    name: str
    role: str
    teams: tuple[str, ...] = ()
    skills: tuple[str, ...] = ()
    approval_level: str = "auto"
    display_name: str | None = None
    can_reveal: bool = False
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def actor(self) -> str:
        return f"agent:{self.name}" if self.id else self.name

    @property
    def sees_all_teams(self) -> bool:
        """Supervisors and admins work across teams; agents only in their own."""
        return self.role in ("supervisor", "admin")

    def may_see(self, team: str | None) -> bool:
        return self.sees_all_teams or team in self.teams

    def has_skills(self, required: Iterable[str] | None) -> bool:
        return self.sees_all_teams or set(required or ()) <= set(self.skills)

    @property
    def may_reveal(self) -> bool:
        """May see one masked personal value in clear (for a reason, recorded): supervisors, admins, granted agents."""
        return self.sees_all_teams or self.can_reveal

    def may_approve(self, level: str | None) -> bool:
        return level_rank(self.approval_level) >= level_rank(level)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Agent:
        return cls(
            id=str(row["id"]), name=row["name"], role=row["role"], teams=tuple(row["teams"] or ()),
            skills=tuple(row["skills"] or ()), approval_level=row["approval_level"],
            display_name=row.get("display_name"), can_reveal=bool(row.get("can_reveal")),
        )

    def public(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "display_name": self.display_name, "role": self.role,
                "teams": list(self.teams), "skills": list(self.skills), "approval_level": self.approval_level,
                "can_reveal": self.may_reveal}


def one(row: dict[str, Any] | None) -> dict[str, Any]:
    """The row a statement always returns (an aggregate, ``INSERT ... RETURNING``), typed as present."""
    if row is None:
        raise LookupError("the statement returned no row")
    return row

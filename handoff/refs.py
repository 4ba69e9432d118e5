"""The references of masked personal values, as the agent view lists them (``m<message id>:<start>-<end>``).

A leaf of handoff (it needs only ``text.personal``): the ticket store annotates a context package with
these references when it stores it, and the reveal (``handoff.reveal``) reads them back; neither imports
the other.
"""

import re
from typing import Any

from text import personal

REF = re.compile(r"^m([0-9]{1,18}):([0-9]{1,7})-([0-9]{1,7})$")


def refs(text: str | None, message_id: Any, *, allow: Any = ()) -> list[dict[str, str]]:
    """The masked values of one message as the agent view lists them: reference, label, what is shown."""
    if not text or message_id is None:
        return []
    return [{"ref": f"m{int(message_id)}:{sp.start}-{sp.end}", "label": sp.label, "shown": personal.partial_value(sp)}
            for sp in personal.find(text, allow=allow)]


def annotate_transcript(pkg: dict[str, Any], allow: Any) -> None:
    """Give every transcript message that names its ``message_id`` the references of its masked values."""
    transcript = pkg.get("transcript")
    if isinstance(transcript, list):
        pkg["transcript"] = [
            {**m, "personal": refs(m["text"], m["message_id"], allow=allow)}
            if isinstance(m, dict) and m.get("message_id") is not None and isinstance(m.get("text"), str) else m
            for m in transcript]

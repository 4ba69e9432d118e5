"""Text every package handles: one normalisation and one personal-data detector.

A leaf package: it imports nothing of router, rag, handoff or automation, so each of them can use
it and every sink folds and masks text the same way.
"""

from text.normalise import Mapped, normalise, normalise_mapped

__all__ = ["Mapped", "normalise", "normalise_mapped"]

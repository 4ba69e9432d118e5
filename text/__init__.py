"""Text every package handles: one normalisation and one personal-data detector.

A leaf package: it imports nothing of router, rag, handoff or automation, so each of them can use
it and every sink folds and masks text the same way.
"""

from text.normalise import Mapped, normalise, normalise_mapped

#: from this many characters on a message is "long": its encoding, detector scan and context cost enough that
#: the pipeline bounds how many run at once, the decider encodes it before taking a connection, and the
#: query cache sends it through its own lane. One figure, so the three agree on which messages they mean.
LONG_MESSAGE_CHARS = 160

__all__ = ["LONG_MESSAGE_CHARS", "Mapped", "normalise", "normalise_mapped"]

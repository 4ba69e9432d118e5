"""Intent classification: rules first, embeddings second, a fitted threshold, an explanation always."""

from router.classify.base import EMBEDDINGS, RULES, Classification, IntentClassifier
from router.classify.entities import extract_entities

__all__ = ["EMBEDDINGS", "RULES", "Classification", "IntentClassifier", "extract_entities"]

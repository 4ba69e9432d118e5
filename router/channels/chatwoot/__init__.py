"""Chatwoot: signed webhooks in, the conversation messages API out."""

"""Telegram Bot API: secret-token webhooks in, sendMessage out."""

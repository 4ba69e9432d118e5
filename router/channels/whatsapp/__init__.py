"""WhatsApp Cloud API: signed webhooks in, Graph API messages and delivery receipts."""

"""SMS through Twilio: signed form posts in, the Messages API out."""

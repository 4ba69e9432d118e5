"""The web widget channel (signed JSON in, signed JSON out to the site's callback)."""

"""Tools and workflows: the tool gateway and the SOP engine. Imports neither router nor handoff."""

"""Choosing a backend from published evidence; ``table.load()`` reads the published dispatch table."""

"""Assembles the code location's assets and resources (empty until the sweep lands)."""

import dagster as dg

defs = dg.Definitions()

"""The Dagster code location: references, per-backend measurement partitions and the merged report."""

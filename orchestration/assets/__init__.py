"""The sweep's assets, one module per asset (or per asset and the checks on it)."""

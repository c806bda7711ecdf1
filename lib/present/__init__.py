"""Showing results: `plots`, `widgets` (live and static sliders), `exercises` (checkers).  No training, no
measurement."""

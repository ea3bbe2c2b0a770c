"""Known-positive proofs: verify and its evidence files."""

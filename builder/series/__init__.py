"""The patch series: its files, the work repository, apply, refresh, rebase and status."""

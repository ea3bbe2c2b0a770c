"""The pinned upstream: the pin file, verified fetch, and the sdist mirror."""

"""patchset: keep a fork's fixes as a patch series on a pinned llama.cpp, build, test and prove them."""

__version__ = "0.1.0"

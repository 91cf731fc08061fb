"""Static topics: the mapping model (seed 001, ../shared/STATIC_TOPIC.md). Pure code, no I/O."""

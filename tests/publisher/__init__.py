"""HeartbeatPublisher, its scheduler's threads, and the health checks it runs."""

"""HeartbeatMonitor: its API, events, feeds, grace, stop, metrics, wall times, the local-pause
guard through it, and the event feed.
"""

"""The command line (publish, watch, demo) and publisher and monitor end to end."""

"""heartwire.reliable: senders, consumers and transactions on the embedded broker and on real
brokers (reconnections, crashes).
"""

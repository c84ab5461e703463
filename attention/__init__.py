"""What needs a person: one attention list derived from what the daemon knows, and signed webhooks through a
durable outbox (issue 31)."""

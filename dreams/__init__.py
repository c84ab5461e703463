"""Dream sessions (docs/reference/memory.md §4): daemon-managed `dream` sessions, always approve-all, that read
recent sessions and memory and propose promotions, merges and deletions. Above the sessions app (a dream is a
session), beside tasks and health; the records and the write path are memory's (memory/dreams.py)."""

"""Git plumbing for worktree sessions (docs/architecture.md §Worktree sessions): a worktree per session, checkpoints
through a temporary index, diffs, commit and merge without touching the user's checkout, and the journal that lets
boot repair finish or roll back an operation a crash cut short.

A floor of its own beside `sessions.acp`, standing on the store's paths and `sessions.core`: every function here
is synchronous and blocking (git subprocesses with a timeout); the service layer calls them off the event loop."""

"""Coordinated work (docs/reference/sessions.md §16): a task's plan of steps run by the workspace's one
`coordinator` session, each runnable step in a `spawned` child of it. Above tasks (it makes tasks and settles
them), below attention."""

"""Supervised work: tasks bound to sessions, run leases, and recovery of silent or orphaned runs.

A task is a prompt to hand an agent; each attempt at it is a run. Runs, not sessions, own the work: a run is
claimed with a compare-and-set (ClaimNextRun) and kept by lease heartbeats (HeartbeatRunLease) from the daemon
whose SessionManager runs its session. Session health never decides who owns a run.
"""

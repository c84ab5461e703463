"""The base every layer stands on (docs/architecture.md §Layers): paths under COMPOZY_HOME, the daemon record, the
token, the error shape, the metric objects. It imports nothing of ours."""

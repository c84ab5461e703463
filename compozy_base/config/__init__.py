"""The daemon's configuration: `config.toml` read, checked and typed once, for every app and layer to read.

It sits in the base layer because the sessions runtime, health, tasks, the API and the CLI all read it; it reads
nothing from them. `loader` holds the typed `Config` and `load_config`; the other modules parse one table each."""

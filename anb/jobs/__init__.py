"""A shared job queue: (architecture, device, stage) jobs on SQLite or PostgreSQL
(:mod:`.queue`), stage handlers (:mod:`.stages`), workers (:mod:`.worker`), the CLI
(:mod:`.cli`)."""

"""A shared job queue: (architecture, device, stage) jobs on SQLite or PostgreSQL
(:mod:`.queue`), the stage registry (:mod:`.stages`), workers (:mod:`.worker`). Infrastructure
below the stages: it imports none of them; they register their handlers here."""

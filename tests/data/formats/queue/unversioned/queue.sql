BEGIN TRANSACTION;
CREATE TABLE anb_jobs (
                id INTEGER PRIMARY KEY,
                arch TEXT NOT NULL, device TEXT NOT NULL, stage TEXT NOT NULL,
                priority INTEGER NOT NULL, state TEXT NOT NULL DEFAULT 'queued',
                attempts INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL,
                payload TEXT NOT NULL, next_stages TEXT NOT NULL,
                worker TEXT, lease_token TEXT, lease_until REAL, last_error TEXT,
                result TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL,
                UNIQUE (arch, device, stage),
                CHECK (state IN ('queued', 'leased', 'done', 'failed', 'cancelled')));
INSERT INTO "anb_jobs" VALUES(1,'e1k3l2-e4k3l1se-e1k3l2se-e6k5l1-e6k5l2se-e4k3l3se-e6k3l1se','cpu-ort','measure',30,'queued',0,3,'{"device_config": {"backend": "onnxruntime", "clock": "wall", "latency": {"batch": 1}, "layout": "nchw", "name": "cpu-ort", "pinned": true, "precision": "fp32", "resolution": 224, "stopping": {"budget_seconds": 5.0, "confidence": 0.95, "max_reps": 1000, "min_rep_seconds": 0.05, "min_reps": 10, "rel_ci": 0.01, "trim": 0.1}, "threads": 1, "throughput": {"batch": 8}, "warmup": {"max_seconds": 20.0, "max_steps": 100, "min_steps": 3, "tolerance": 0.05, "window": 3}}}','[]',NULL,NULL,NULL,NULL,NULL,1.79586320582999277111e+09,1.79586320582999277111e+09);
INSERT INTO "anb_jobs" VALUES(2,'e4k5l2se-e4k3l2se-e6k5l2-e1k3l2-e1k3l2se-e6k5l4se-e6k5l2se','cpu-ort','measure',30,'queued',0,3,'{"device_config": {"backend": "onnxruntime", "clock": "wall", "latency": {"batch": 1}, "layout": "nchw", "name": "cpu-ort", "pinned": true, "precision": "fp32", "resolution": 224, "stopping": {"budget_seconds": 5.0, "confidence": 0.95, "max_reps": 1000, "min_rep_seconds": 0.05, "min_reps": 10, "rel_ci": 0.01, "trim": 0.1}, "threads": 1, "throughput": {"batch": 8}, "warmup": {"max_seconds": 20.0, "max_steps": 100, "min_steps": 3, "tolerance": 0.05, "window": 3}}}','[]',NULL,NULL,NULL,NULL,NULL,1.79586320582999277111e+09,1.79586320582999277111e+09);
CREATE INDEX anb_jobs_open ON anb_jobs (priority, id) WHERE state IN ('queued', 'leased');
COMMIT;

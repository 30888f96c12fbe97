-- schema version 2
BEGIN TRANSACTION;
CREATE TABLE buffered_signals (
        id INTEGER PRIMARY KEY,
        token TEXT NOT NULL,
        payload TEXT NOT NULL
    );
CREATE TABLE checkpoints (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        input TEXT,
        output TEXT,
        error TEXT,
        errors TEXT,
        attempts INTEGER NOT NULL,
        worker_group TEXT,
        child_id TEXT,
        compensation TEXT,
        parallel_group INTEGER,
        parallel_size INTEGER,
        parallel_mode TEXT,
        wake_at REAL,
        enqueued_at REAL,
        started_at REAL,
        finished_at REAL,
        PRIMARY KEY (run_id, seq)
    );
INSERT INTO "checkpoints" VALUES('counted-0',1,'add_one','local','completed','[0]','1',NULL,NULL,1,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1.79666601118113231656e+09,1.79666601118113231656e+09,1.7966660111811795235e+09);
INSERT INTO "checkpoints" VALUES('counted-1',1,'add_one','local','completed','[1]','2',NULL,NULL,1,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1.79666601118380641938e+09,1.79666601118380641938e+09,1.79666601118384909631e+09);
INSERT INTO "checkpoints" VALUES('counted-2',1,'add_one','local','completed','[2]','3',NULL,NULL,1,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1.79666601118531584738e+09,1.79666601118531584738e+09,1.79666601118535089499e+09);
INSERT INTO "checkpoints" VALUES('waiting',1,'go','signal','pending','{"timeout": null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1.79666601118678379055e+09,NULL,NULL);
CREATE TABLE queue_slots (
        queue TEXT NOT NULL,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        PRIMARY KEY (queue, run_id, seq)
    );
CREATE TABLE queue_waiters (
        id INTEGER PRIMARY KEY,
        queue TEXT NOT NULL,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        priority INTEGER NOT NULL,
        at REAL NOT NULL,
        UNIQUE (queue, run_id, seq)
    );
CREATE TABLE run_inputs (
        run_id TEXT PRIMARY KEY,
        input TEXT NOT NULL
    );
INSERT INTO "run_inputs" VALUES('counted-0','[0]');
INSERT INTO "run_inputs" VALUES('counted-1','[1]');
INSERT INTO "run_inputs" VALUES('counted-2','[2]');
INSERT INTO "run_inputs" VALUES('waiting','[]');
CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        workflow TEXT NOT NULL,
        version TEXT NOT NULL,
        namespace TEXT NOT NULL,
        status TEXT NOT NULL,
        output TEXT,
        error TEXT,
        tags TEXT NOT NULL,
        parent_id TEXT,
        parent_seq INTEGER,
        lease_owner TEXT,
        lease_expiry REAL,
        wake_at REAL,
        compensate INTEGER NOT NULL,
        recoveries INTEGER NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        due_at REAL
    );
INSERT INTO "runs" VALUES('counted-0','counted','1','default','completed','1',NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1796666011.18007,1.79666601118160772316e+09,NULL);
INSERT INTO "runs" VALUES('counted-1','counted','1','default','completed','2',NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1.79666601118293738363e+09,1.79666601118397879603e+09,NULL);
INSERT INTO "runs" VALUES('counted-2','counted','1','default','completed','3',NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1.79666601118477034567e+09,1.79666601118556571001e+09,NULL);
INSERT INTO "runs" VALUES('waiting','waits','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1.79666601118623161311e+09,1.79666601118691325188e+09,NULL);
CREATE TABLE signal_waiters (
        token TEXT PRIMARY KEY,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL
    );
INSERT INTO "signal_waiters" VALUES('["waiting","go"]','waiting',1);
CREATE INDEX runs_due ON runs (due_at, id) WHERE due_at IS NOT NULL;
CREATE INDEX runs_created ON runs (created_at, id);
CREATE INDEX runs_waiting ON runs (created_at, id)
    WHERE status = 'suspended' AND wake_at IS NULL
    ;
CREATE INDEX runs_parent ON runs (parent_id, created_at, id)
    WHERE parent_id IS NOT NULL
    ;
CREATE INDEX checkpoints_status ON checkpoints (run_id, status, seq);
CREATE INDEX buffered_signals_token ON buffered_signals (token, id);
CREATE INDEX queue_waiters_line ON queue_waiters (queue, priority DESC, at, id);
COMMIT;

-- schema version 8
BEGIN TRANSACTION;
CREATE TABLE announcements (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        workflow TEXT,
        version TEXT,
        origin TEXT NOT NULL
    );
INSERT INTO "announcements" VALUES(1,'done-t','values','target','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(2,'done-t','stream','target','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(3,'done-t','wake','target','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(4,'done-t','values','target','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(5,'done-s','end','sender','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(6,'done-t','end','target','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(7,'done-single','end','single','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(8,'done-dedup','end','deduped','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(9,'done-pay','end','paying','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(10,'done-fan','values','stuck_fan','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(11,'done-fan','end','stuck_fan','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(12,'done-fan.all.2.0','end','waiting_kid','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(13,'e-1.on_order','end','on_order','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(14,'event-82e2e662f728b4fa.on_burst','due','on_burst','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(15,'event-82e2e662f728b4fa.on_burst','end','on_burst','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(16,'live-t','values','target','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(17,'live-t','stream','target','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(18,'live-t','wake','target','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(19,'live-t','values','target','1','engine-d82c07cd');
CREATE TABLE breakpoints (
        id TEXT PRIMARY KEY,
        workflow TEXT NOT NULL,
        step TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL
    );
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
        executions TEXT,
        rerun INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (run_id, seq)
    );
INSERT INTO "checkpoints" VALUES('done-t',1,'event:ready','signal','completed','"done"',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.0,1700000000.0,1700000000.0,NULL,0);
INSERT INTO "checkpoints" VALUES('done-t',999999960,'stream','local','completed',NULL,'1',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.0,1700000000.0,1700000000.0,NULL,0);
INSERT INTO "checkpoints" VALUES('done-t',2,'go','signal','completed','{"timeout": null}','1',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.0,NULL,1700000000.0,NULL,0);
INSERT INTO "checkpoints" VALUES('done-t',999999970,'updates','signal','completed',NULL,'[{"id":"update-c2094cac629f6fbe","name":"bump","args":"[2]","at":2,"ok":true}]',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('done-s',1,'send:go','signal','completed','1','{"to":"done-t","key":"key-done-t","delivered":true}',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.0,1700000000.0,1700000000.0,NULL,0);
INSERT INTO "checkpoints" VALUES('done-single',999999990,'admission','local','completed','{"queue":"wf:single:k1","limit":1,"rate":null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.0,NULL,1700000000.0,NULL,0);
INSERT INTO "checkpoints" VALUES('done-single',1,'done','signal','completed','{"timeout": null}','null',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.0,NULL,1700000000.0,NULL,0);
INSERT INTO "checkpoints" VALUES('done-dedup',1,'done','signal','completed','{"timeout": null}','null',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.0,NULL,1700000000.0,NULL,0);
INSERT INTO "checkpoints" VALUES('done-pay',1,'charge','remote','completed','[1]','2',NULL,NULL,1,'values-remote',NULL,NULL,NULL,NULL,NULL,NULL,1700000000.0,1700000000.0,1700000000.0,'["42485e3a0a5d2f346baa9455e3e70682"]',0);
INSERT INTO "checkpoints" VALUES('done-fan',1,'event:fanning','signal','completed','1',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.0,1700000000.0,1700000000.0,NULL,0);
INSERT INTO "checkpoints" VALUES('done-fan',2,'waiting_kid','child','failed','[1]','{"ok":false,"error":"cancelled","code":"cancelled","details":null}','{"message":"cancelled","code":"cancelled"}',NULL,0,NULL,'done-fan.all.2.0',NULL,2,3,'fail_fast',NULL,1700000000.0,1700000000.0,1700000000.0,NULL,0);
INSERT INTO "checkpoints" VALUES('done-fan',3,'waiting_kid','child','failed','[2]','{"ok":false,"error":"cancelled","code":"cancelled","details":null}','{"message":"cancelled","code":"cancelled"}',NULL,0,NULL,'done-fan.all.2.1',NULL,2,3,'fail_fast',NULL,1700000000.0,NULL,1700000000.0,NULL,0);
INSERT INTO "checkpoints" VALUES('done-fan',4,'waiting_kid','child','failed','[3]','{"ok":false,"error":"cancelled","code":"cancelled","details":null}','{"message":"cancelled","code":"cancelled"}',NULL,0,NULL,'done-fan.all.2.2',NULL,2,3,'fail_fast',NULL,1700000000.0,NULL,1700000000.0,NULL,0);
INSERT INTO "checkpoints" VALUES('done-fan.all.2.0',1,'never','signal','pending','{"timeout": null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.0,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('live-t',1,'event:ready','signal','completed','"live"',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000005.0,1700000005.0,1700000005.0,NULL,0);
INSERT INTO "checkpoints" VALUES('live-t',999999960,'stream','local','completed',NULL,'1',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000005.0,1700000005.0,1700000005.0,NULL,0);
INSERT INTO "checkpoints" VALUES('live-t',2,'go','signal','pending','{"timeout": null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000005.0,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('live-t',999999970,'updates','signal','completed',NULL,'[{"id":"update-67a9c3787c65c1e5","name":"bump","args":"[2]","at":2,"ok":true}]',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('live-single',999999990,'admission','local','pending','{"queue":"wf:single:k2","limit":1,"rate":null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000005.0,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('live-single',1,'done','signal','pending','{"timeout": null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000005.0,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('live-dedup',1,'done','signal','pending','{"timeout": null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000005.0,NULL,NULL,NULL,0);
CREATE TABLE durable_values (
        scope TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        version INTEGER NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (scope, key)
    );
INSERT INTO "durable_values" VALUES('run-event:done-t','ready','"done"',1,1700000000.0);
INSERT INTO "durable_values" VALUES('stream:done-t','000000000000','"done"',1,1700000000.0);
INSERT INTO "durable_values" VALUES('update:done-t','record/update-c2094cac629f6fbe','{"name": "bump", "args": "[2]", "status": "completed", "result": "2"}',2,1700000000.0);
INSERT INTO "durable_values" VALUES('signal-key','key-done-t','{"from": "done-s", "seq": 1, "to": "done-t", "name": "go"}',1,1700000000.0);
INSERT INTO "durable_values" VALUES('singleton:single','default:k1','{"run_id": "done-single"}',1,1700000000.0);
INSERT INTO "durable_values" VALUES('dedup:deduped','default:d1','{"run_id": "done-dedup"}',1,1700000000.0);
INSERT INTO "durable_values" VALUES('step-dedup:pay-q','default:p1','{"run_id": "done-pay", "seq": 1}',1,1700000000.0);
INSERT INTO "durable_values" VALUES('run-event:done-fan','fanning','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('fan-window','done-fan#2','{"concurrency": 1, "inflight": [0], "namespace": "default", "next": 1, "version": "1", "workflow": "stuck_fan"}',1,1700000000.0);
INSERT INTO "durable_values" VALUES('event','e-1','{"name":"order","key":null,"payload":1,"runs":["e-1.on_order"]}',1,1700000000.0);
INSERT INTO "durable_values" VALUES('debounce:on_burst','"b"','{"run":"event-82e2e662f728b4fa.on_burst","until":1700000005.0,"stamp":1700000000.0,"events":1}',1,1700000000.0);
INSERT INTO "durable_values" VALUES('event','event-82e2e662f728b4fa','{"name":"burst","key":"b","payload":1,"runs":["event-82e2e662f728b4fa.on_burst"]}',1,1700000000.0);
INSERT INTO "durable_values" VALUES('run-event:live-t','ready','"live"',1,1700000005.0);
INSERT INTO "durable_values" VALUES('stream:live-t','000000000000','"live"',1,1700000005.0);
INSERT INTO "durable_values" VALUES('update:live-t','record/update-67a9c3787c65c1e5','{"name": "bump", "args": "[2]", "status": "completed", "result": "2"}',2,1700000005.0);
INSERT INTO "durable_values" VALUES('singleton:single','default:k2','{"run_id": "live-single"}',1,1700000005.0);
INSERT INTO "durable_values" VALUES('dedup:deduped','default:d2','{"run_id": "live-dedup"}',1,1700000005.0);
CREATE TABLE paused_steps (
        run_id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        workflow TEXT NOT NULL,
        step TEXT NOT NULL,
        breakpoint_id TEXT NOT NULL,
        paused_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
CREATE TABLE queue_slots (
        queue TEXT NOT NULL,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        PRIMARY KEY (queue, run_id, seq)
    );
INSERT INTO "queue_slots" VALUES('wf:single:k2','live-single',999999990);
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
INSERT INTO "run_inputs" VALUES('done-t','["done"]');
INSERT INTO "run_inputs" VALUES('done-s','["done-t"]');
INSERT INTO "run_inputs" VALUES('done-single','[1]');
INSERT INTO "run_inputs" VALUES('done-dedup','[1]');
INSERT INTO "run_inputs" VALUES('done-pay','[1]');
INSERT INTO "run_inputs" VALUES('done-fan','[1]');
INSERT INTO "run_inputs" VALUES('done-fan.all.2.0','[1]');
INSERT INTO "run_inputs" VALUES('e-1.on_order','[1]');
INSERT INTO "run_inputs" VALUES('event-82e2e662f728b4fa.on_burst','[1]');
INSERT INTO "run_inputs" VALUES('live-t','["live"]');
INSERT INTO "run_inputs" VALUES('live-single','[2]');
INSERT INTO "run_inputs" VALUES('live-dedup','[2]');
CREATE TABLE run_search (
        name TEXT NOT NULL,
        value_text TEXT,
        value_int BIGINT,
        value_real DOUBLE PRECISION,
        created_at DOUBLE PRECISION NOT NULL,
        run_id TEXT NOT NULL
    );
CREATE TABLE run_tags (
        tag TEXT NOT NULL,
        created_at REAL NOT NULL,
        run_id TEXT NOT NULL,
        PRIMARY KEY (tag, created_at, run_id)
    ) WITHOUT ROWID
    ;
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
        due_at REAL,
        search_attributes TEXT NOT NULL DEFAULT '{}'
    );
INSERT INTO "runs" VALUES('done-t','target','1','default','completed','3',NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000000.0,1700000000.0,NULL,'{}');
INSERT INTO "runs" VALUES('done-s','sender','1','default','completed','null',NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000000.0,1700000000.0,NULL,'{}');
INSERT INTO "runs" VALUES('done-single','single','1','default','completed','1',NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000000.0,1700000000.0,NULL,'{}');
INSERT INTO "runs" VALUES('done-dedup','deduped','1','default','completed','1',NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000000.0,1700000000.0,NULL,'{}');
INSERT INTO "runs" VALUES('done-pay','paying','1','default','completed','2',NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000000.0,1700000000.0,NULL,'{}');
INSERT INTO "runs" VALUES('done-fan','stuck_fan','1','default','cancelled',NULL,'{"message":"cancelled","code":"cancelled"}','[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000000.0,1700000000.0,NULL,'{}');
INSERT INTO "runs" VALUES('done-fan.all.2.0','waiting_kid','1','default','cancelled',NULL,'{"message":"cancelled","code":"cancelled"}','[]','done-fan',2,NULL,NULL,NULL,0,0,1700000000.0,1700000000.0,NULL,'{}');
INSERT INTO "runs" VALUES('e-1.on_order','on_order','1','default','completed','1',NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000000.0,1700000000.0,NULL,'{}');
INSERT INTO "runs" VALUES('event-82e2e662f728b4fa.on_burst','on_burst','1','default','completed','1',NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000000.0,1700000005.0,NULL,'{}');
INSERT INTO "runs" VALUES('live-t','target','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000005.0,1700000005.0,NULL,'{}');
INSERT INTO "runs" VALUES('live-single','single','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000005.0,1700000005.0,NULL,'{}');
INSERT INTO "runs" VALUES('live-dedup','deduped','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000005.0,1700000005.0,NULL,'{}');
CREATE TABLE signal_waiters (
        token TEXT PRIMARY KEY,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL
    );
INSERT INTO "signal_waiters" VALUES('["live-t","go"]','live-t',2);
INSERT INTO "signal_waiters" VALUES('["live-single","done"]','live-single',1);
INSERT INTO "signal_waiters" VALUES('["live-dedup","done"]','live-dedup',1);
CREATE TABLE store_settings (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
CREATE TABLE webhooks (
        token_hash TEXT PRIMARY KEY,
        run_id TEXT NOT NULL,
        name TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        used_at DOUBLE PRECISION
    );
CREATE INDEX runs_due ON runs (due_at, id) WHERE due_at IS NOT NULL;
CREATE INDEX runs_created ON runs (created_at, id);
CREATE INDEX runs_waiting ON runs (created_at, id)
    WHERE status = 'suspended' AND wake_at IS NULL
    ;
CREATE INDEX runs_parent ON runs (parent_id, created_at, id)
    WHERE parent_id IS NOT NULL
    ;
CREATE INDEX runs_status ON runs (status, created_at, id);
CREATE INDEX runs_workflow ON runs (workflow, created_at, id);
CREATE INDEX runs_namespace ON runs (namespace, created_at, id);
CREATE INDEX runs_ended ON runs (status, updated_at, id)
    WHERE status IN ('cancelled', 'completed', 'dead', 'failed')
    ;
CREATE INDEX run_tags_run ON run_tags (run_id);
CREATE TRIGGER runs_tags_insert AFTER INSERT ON runs
    WHEN new.tags <> '[]' BEGIN
        INSERT OR IGNORE INTO run_tags (tag, created_at, run_id)
        SELECT value, new.created_at, new.id FROM json_each(new.tags);
    END;
CREATE TRIGGER runs_tags_update AFTER UPDATE OF tags ON runs BEGIN
        DELETE FROM run_tags WHERE run_id = old.id;
        INSERT OR IGNORE INTO run_tags (tag, created_at, run_id)
        SELECT value, new.created_at, new.id FROM json_each(new.tags);
    END;
CREATE TRIGGER runs_tags_delete AFTER DELETE ON runs
    WHEN old.tags <> '[]' BEGIN
        DELETE FROM run_tags WHERE run_id = old.id;
    END;
CREATE INDEX checkpoints_status ON checkpoints (run_id, status, seq, attempts, enqueued_at, started_at, finished_at);
CREATE INDEX buffered_signals_token ON buffered_signals (token, id);
CREATE INDEX queue_waiters_line ON queue_waiters (queue, priority DESC, at, id);
CREATE INDEX webhooks_run ON webhooks (run_id);
CREATE INDEX run_search_text ON run_search (name, value_text, created_at, run_id) WHERE value_text IS NOT NULL;
CREATE INDEX run_search_int ON run_search (name, value_int, created_at, run_id) WHERE value_int IS NOT NULL;
CREATE INDEX run_search_real ON run_search (name, value_real, created_at, run_id) WHERE value_real IS NOT NULL;
CREATE INDEX run_search_run ON run_search (run_id, name);
CREATE TRIGGER runs_search_insert AFTER INSERT ON runs
    WHEN new.search_attributes <> '{}' BEGIN
        
    INSERT INTO run_search (name, value_text, value_int, value_real, created_at, run_id)
    SELECT a.key,
        CASE WHEN json_extract(a.value, '$[0]') = 'str' THEN json_extract(a.value, '$[1]') END,
        CASE WHEN json_extract(a.value, '$[0]') IN ('int', 'bool', 'datetime')
            THEN json_extract(a.value, '$[1]') END,
        CASE WHEN json_extract(a.value, '$[0]') = 'float' THEN json_extract(a.value, '$[1]') END,
        new.created_at, new.id
    FROM json_each(new.search_attributes) a
    WHERE json_extract(a.value, '$[0]') <> 'keywords'
    UNION ALL
    SELECT a.key, k.value, NULL, NULL, new.created_at, new.id
    FROM json_each(new.search_attributes) a, json_each(a.value, '$[1]') k
    WHERE json_extract(a.value, '$[0]') = 'keywords';

    END;
CREATE TRIGGER runs_search_update AFTER UPDATE OF search_attributes ON runs
    BEGIN
        DELETE FROM run_search WHERE run_id = old.id;
        
    INSERT INTO run_search (name, value_text, value_int, value_real, created_at, run_id)
    SELECT a.key,
        CASE WHEN json_extract(a.value, '$[0]') = 'str' THEN json_extract(a.value, '$[1]') END,
        CASE WHEN json_extract(a.value, '$[0]') IN ('int', 'bool', 'datetime')
            THEN json_extract(a.value, '$[1]') END,
        CASE WHEN json_extract(a.value, '$[0]') = 'float' THEN json_extract(a.value, '$[1]') END,
        new.created_at, new.id
    FROM json_each(new.search_attributes) a
    WHERE json_extract(a.value, '$[0]') <> 'keywords'
    UNION ALL
    SELECT a.key, k.value, NULL, NULL, new.created_at, new.id
    FROM json_each(new.search_attributes) a, json_each(a.value, '$[1]') k
    WHERE json_extract(a.value, '$[0]') = 'keywords';

    END;
CREATE TRIGGER runs_search_delete AFTER DELETE ON runs
    WHEN old.search_attributes <> '{}' BEGIN
        DELETE FROM run_search WHERE run_id = old.id;
    END;
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('announcements',19);
COMMIT;

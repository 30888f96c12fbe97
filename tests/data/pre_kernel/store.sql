-- schema version 9
BEGIN TRANSACTION;
CREATE TABLE announcements (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        workflow TEXT,
        version TEXT,
        origin TEXT NOT NULL
    );
INSERT INTO "announcements" VALUES(1,'adm-hold','values','gate','1','recorder');
INSERT INTO "announcements" VALUES(2,'rate-first','end','limited','1','recorder');
INSERT INTO "announcements" VALUES(3,'remote-done','end','remote_quick','1','recorder');
INSERT INTO "announcements" VALUES(4,'remote-failed','end','remote_quick','1','recorder');
INSERT INTO "announcements" VALUES(5,'deadline-done','values','sleeper','1','recorder');
INSERT INTO "announcements" VALUES(6,'deadline-done','end','sleeper','1','recorder');
INSERT INTO "announcements" VALUES(7,'deadline','values','sleeper','1','recorder');
INSERT INTO "announcements" VALUES(8,'deadline-fire','values','sleeper','1','recorder');
INSERT INTO "announcements" VALUES(9,'chain','end','chain','1','recorder');
INSERT INTO "announcements" VALUES(10,'chain.gen.2','end','chain','1','recorder');
INSERT INTO "announcements" VALUES(11,'chain.gen.3','values','chain','1','recorder');
INSERT INTO "announcements" VALUES(12,'checked','values','checked','1','recorder');
INSERT INTO "announcements" VALUES(13,'cleanup','values','cleanup','1','recorder');
INSERT INTO "announcements" VALUES(14,'updated','values','updated','1','recorder');
INSERT INTO "announcements" VALUES(15,'updated','wake','updated','1','recorder');
INSERT INTO "announcements" VALUES(16,'updated','values','updated','1','recorder');
INSERT INTO "announcements" VALUES(17,'streamed','stream','streamed','1','recorder');
INSERT INTO "announcements" VALUES(18,'streamed','values','streamed','1','recorder');
INSERT INTO "announcements" VALUES(19,'fork-source','end','forkable','1','recorder');
INSERT INTO "announcements" VALUES(20,'handed-off.onError.0','values','mender','1','recorder');
INSERT INTO "announcements" VALUES(21,'retired.onError.0','values','mender','1','recorder');
INSERT INTO "announcements" VALUES(22,'retired.onError.0','end','mender','1','recorder');
INSERT INTO "announcements" VALUES(23,'retired','end','fragile','1','recorder');
INSERT INTO "announcements" VALUES(24,'retired.onError.1','values','mender','1','recorder');
INSERT INTO "announcements" VALUES(25,'resend-step.child.1','end','stepper','1','recorder');
INSERT INTO "announcements" VALUES(26,'resend-step','end','resender','1','recorder');
INSERT INTO "announcements" VALUES(27,'bp-1d71b3764d723622','breakpoints',NULL,NULL,'recorder');
INSERT INTO "announcements" VALUES(28,'patched','values','patched','1','recorder');
INSERT INTO "announcements" VALUES(29,'published','values','published','1','recorder');
INSERT INTO "announcements" VALUES(30,'done','end','simple','1','recorder');
INSERT INTO "announcements" VALUES(31,'failed','end','simple','1','recorder');
INSERT INTO "announcements" VALUES(32,'cancel-asked','values','published','1','recorder');
INSERT INTO "announcements" VALUES(33,'update-asked','values','updated','1','recorder');
INSERT INTO "announcements" VALUES(34,'rl-first','wake','stepper','1','recorder');
INSERT INTO "announcements" VALUES(35,'q-hold','wake','stepper','1','recorder');
INSERT INTO "announcements" VALUES(36,'out-step','wake','stepper','1','recorder');
INSERT INTO "announcements" VALUES(37,'remote-cancel','wake','remote_cleanup','1','recorder');
INSERT INTO "announcements" VALUES(38,'remote-out','wake','remote_later','1','recorder');
INSERT INTO "announcements" VALUES(39,'continued-step','wake','pausing','1','client-19154fac77d42abd');
INSERT INTO "announcements" VALUES(40,'cancel-asked','cancel','published','1','client-19154fac77d42abd');
INSERT INTO "announcements" VALUES(41,'resend-step.child.1','wake','stepper','1','client-19154fac77d42abd');
INSERT INTO "announcements" VALUES(42,'resend-step','wake','resender','1','client-19154fac77d42abd');
INSERT INTO "announcements" VALUES(43,'update-asked','wake','updated','1','client-19154fac77d42abd');
CREATE TABLE breakpoints (
        id TEXT PRIMARY KEY,
        workflow TEXT NOT NULL,
        step TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL
    );
INSERT INTO "breakpoints" VALUES('bp-1d71b3764d723622','pausing','tool',1700000002.5);
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
INSERT INTO "checkpoints" VALUES('adm-hold',999999990,'admission','local','pending','{"queue":"wf:gate:k","limit":1,"rate":null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.0,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('adm-hold',1,'event:admitted','signal','completed','true',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.0,1700000000.0,1700000000.0,NULL,0);
INSERT INTO "checkpoints" VALUES('adm-hold',2,'go','signal','pending','{"timeout": null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.0,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('adm-wait',999999990,'admission','local','pending','{"queue":"wf:gate:k","limit":1,"rate":null}',NULL,'{"message":"waiting for a slot of queue ''wf:gate:k''","code":"queued"}',NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,1700000005.0,1700000000.0,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('rate-first',999999990,'admission','local','completed','{"queue":null,"limit":1,"rate":[1,3600.0]}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.0,NULL,1700000000.0,NULL,0);
INSERT INTO "checkpoints" VALUES('rate-wait',999999990,'admission','local','pending','{"queue":null,"limit":1,"rate":[1,3600.0]}','{"rate_at": 1700003600.0}','{"message":"waiting for the rate limit of ''wf:limited''","code":"rate_limited"}',NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,1700003600.0,1700000000.0,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('remote-done',999999999,'remote_quick','decision','completed',NULL,NULL,NULL,NULL,1,'decide',NULL,NULL,NULL,NULL,NULL,NULL,1700000000.05,1700000000.05,1700000000.05,'["e3e70682c2094cac629f6fbed82c07cd"]',0);
INSERT INTO "checkpoints" VALUES('remote-done',1,'add','local','completed','[1]','2',NULL,NULL,1,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.05,1700000000.05,1700000000.05,NULL,0);
INSERT INTO "checkpoints" VALUES('remote-failed',999999999,'remote_quick','decision','completed',NULL,NULL,NULL,NULL,1,'decide',NULL,NULL,NULL,NULL,NULL,NULL,1700000000.05,1700000000.05,1700000000.05,'["f728b4fa42485e3a0a5d2f346baa9455"]',0);
INSERT INTO "checkpoints" VALUES('remote-failed',1,'add','local','completed','[-1]','0',NULL,NULL,1,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.05,1700000000.05,1700000000.05,NULL,0);
INSERT INTO "checkpoints" VALUES('deadline-done',999999991,'deadline','timer','pending','{"timeout": 100000.0}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,1700100000.05,1700000000.05,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('deadline-done',1,'event:sleeping','signal','completed','true',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.05,1700000000.05,1700000000.05,NULL,0);
INSERT INTO "checkpoints" VALUES('deadline-done',2,'sleep','timer','completed',NULL,NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.05,1700000000.05,NULL,1700000001.05,NULL,0);
INSERT INTO "checkpoints" VALUES('deadline',999999991,'deadline','timer','pending','{"timeout": 100000.0}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,1700100001.05,1700000001.05,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('deadline-fire',999999991,'deadline','timer','pending','{"timeout": 5000.0}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,1700005001.05,1700000001.05,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('deadline',1,'event:sleeping','signal','completed','true',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.05,1700000001.05,1700000001.05,NULL,0);
INSERT INTO "checkpoints" VALUES('deadline',2,'sleep','timer','pending',NULL,NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,1700005001.05,1700000001.05,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('deadline-fire',1,'event:sleeping','signal','completed','true',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.05,1700000001.05,1700000001.05,NULL,0);
INSERT INTO "checkpoints" VALUES('deadline-fire',2,'sleep','timer','pending',NULL,NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,1701000001.05,1700000001.05,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('chain',999999992,'chain','child','completed','[1]','"chain.gen.2"',NULL,NULL,0,NULL,'chain.gen.2',NULL,NULL,NULL,NULL,NULL,1700000001.05,1700000001.05,1700000001.05,NULL,0);
INSERT INTO "checkpoints" VALUES('chain.gen.2',999999993,'continued_from','local','completed','{"root": "chain", "generation": 2}','"chain"',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.05,1700000001.05,1700000001.05,NULL,0);
INSERT INTO "checkpoints" VALUES('chain.gen.2',999999992,'chain','child','completed','[2]','"chain.gen.3"',NULL,NULL,0,NULL,'chain.gen.3',NULL,NULL,NULL,NULL,NULL,1700000001.05,1700000001.05,1700000001.05,NULL,0);
INSERT INTO "checkpoints" VALUES('chain.gen.3',999999993,'continued_from','local','completed','{"root": "chain", "generation": 3}','"chain.gen.2"',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.05,1700000001.05,1700000001.05,NULL,0);
INSERT INTO "checkpoints" VALUES('chain.gen.3',1,'event:last','signal','completed','2',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.05,1700000001.05,1700000001.05,NULL,0);
INSERT INTO "checkpoints" VALUES('chain.gen.3',2,'sleep','timer','pending',NULL,NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,1700005001.05,1700000001.05,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('checked',999999980,'check_arguments','local','completed',NULL,'1',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.1,1700000001.1,1700000001.1,NULL,0);
INSERT INTO "checkpoints" VALUES('checked',1,'add','local','completed','[1]','2',NULL,NULL,1,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.1,1700000001.1,1700000001.1,NULL,0);
INSERT INTO "checkpoints" VALUES('checked',2,'add','local','completed','[2]','3',NULL,NULL,1,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.1,1700000001.1,1700000001.1,NULL,0);
INSERT INTO "checkpoints" VALUES('checked',3,'event:stepped','signal','completed','3',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.1,1700000001.1,1700000001.1,NULL,0);
INSERT INTO "checkpoints" VALUES('checked',4,'go','signal','pending','{"timeout": null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.1,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('cleanup',1,'never','signal','pending','{"timeout": null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.1,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('cleanup',999999981,'cancelled_at','local','completed',NULL,'1',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1.70000000114999985697e+09,1.70000000114999985697e+09,1.70000000114999985697e+09,NULL,0);
INSERT INTO "checkpoints" VALUES('cleanup',2,'event:cleaning','signal','completed','true',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1.70000000114999985697e+09,1.70000000114999985697e+09,1.70000000114999985697e+09,NULL,0);
INSERT INTO "checkpoints" VALUES('cleanup',3,'sleep','timer','pending',NULL,NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,1.7000050011499998569e+09,1.70000000114999985697e+09,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('remote-out',999999999,'remote_later','decision','pending',NULL,NULL,'{"message":"out on RefusingBroker, closed since","code":"out","details":{"broker":"RefusingBroker","durable":false,"closed":"vm/1976/1840079/1"}}',NULL,1,'decide-later',NULL,NULL,NULL,NULL,NULL,NULL,1.70000000114999985697e+09,1.70000000114999985697e+09,NULL,'["eb1167b367a9c3787c65c1e582e2e662"]',0);
INSERT INTO "checkpoints" VALUES('remote-waits',999999999,'remote_sleeper','decision','completed','{"waits": [1, 1], "settled": 0}',NULL,NULL,NULL,1,'decide',NULL,NULL,NULL,NULL,NULL,NULL,1700000001.2,1700000001.2,1700000001.2,'["f7c1bd874da5e709d4713d60c8a70639"]',0);
INSERT INTO "checkpoints" VALUES('remote-waits',1,'sleep','timer','pending',NULL,NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,1700005001.2,1700000001.2,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('remote-cancel',999999999,'remote_cleanup','decision','pending',NULL,NULL,'{"message":"out on RefusingBroker, closed since","code":"out","details":{"broker":"RefusingBroker","durable":false,"closed":"vm/1976/1840079/1"}}',NULL,2,'decide-cancel',NULL,NULL,NULL,NULL,NULL,NULL,1700000001.3,1700000001.3,NULL,'["23a7711a8133287637ebdcd9e87a1613"]',0);
INSERT INTO "checkpoints" VALUES('remote-cancel',1,'never','signal','pending','{"timeout": null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.25,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('remote-cancel',999999982,'cancel_sent','local','completed',NULL,NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.3,1700000001.3,1700000001.3,NULL,0);
INSERT INTO "checkpoints" VALUES('updated',1,'event:ready','signal','completed','true',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.35,1700000001.35,1700000001.35,NULL,0);
INSERT INTO "checkpoints" VALUES('updated',2,'go','signal','pending','{"timeout": null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.35,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('updated',999999970,'updates','signal','completed',NULL,'[{"id":"bump-1","name":"bump","args":"[2]","at":2,"ok":true}]',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('streamed',999999960,'stream','local','completed',NULL,'3',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.35,1700000001.35,1700000001.35,NULL,0);
INSERT INTO "checkpoints" VALUES('streamed',1,'event:emitted','signal','completed','3',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.35,1700000001.35,1700000001.35,NULL,0);
INSERT INTO "checkpoints" VALUES('streamed',2,'go','signal','pending','{"timeout": null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.35,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('fork-source',1,'add','local','completed','[1]','2',NULL,NULL,1,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.35,1700000001.35,1700000001.35,NULL,0);
INSERT INTO "checkpoints" VALUES('fork-source',2,'add','local','completed','[2]','3',NULL,NULL,1,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.35,1700000001.35,1700000001.35,NULL,0);
INSERT INTO "checkpoints" VALUES('fork-source',3,'go','signal','completed','{"timeout": null}','10',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.35,NULL,1.70000000139999985697e+09,NULL,0);
INSERT INTO "checkpoints" VALUES('forked',999999950,'forked_from','local','completed','{"run_id": "fork-source", "from_seq": 2}','"fork-source"',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1.70000000139999985697e+09,1.70000000139999985697e+09,1.70000000139999985697e+09,NULL,0);
INSERT INTO "checkpoints" VALUES('forked',1,'add','local','completed','[1]','2',NULL,NULL,1,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.35,1700000001.35,1700000001.35,NULL,0);
INSERT INTO "checkpoints" VALUES('forked',2,'add','local','completed','[2]','3',NULL,NULL,1,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1.70000000139999985697e+09,1.70000000139999985697e+09,1.70000000139999985697e+09,NULL,0);
INSERT INTO "checkpoints" VALUES('forked',3,'go','signal','pending','{"timeout": null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1.70000000139999985697e+09,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('handed-off',1,'fail','signal','completed','{"timeout": null}','true',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.45,NULL,1700000001.5,NULL,0);
INSERT INTO "checkpoints" VALUES('handed-off',1000000000,'mender','child','pending','[{"run_id":"handed-off","workflow":"fragile","input":[],"error":{"message":"broken on purpose","code":"broken","type":"FatalError","traceback":"Traceback (most recent call last):\n  File \"/work/wt/kernel-0a/src/trio_durable/_turn.py\", line 214, in _run_body\n    value = await wf.fn(ctx, *args)\n            ^^^^^^^^^^^^^^^^^^^^^^^\n  File \"/work/wt/kernel-0a/tests/pre_kernel_app.py\", line 276, in fragile\n    raise td.FatalError(\"broken on purpose\", code=\"broken\")\ntrio_durable._exceptions.FatalError: broken on purpose\n"}}]',NULL,'{"message":"broken on purpose","code":"broken","type":"FatalError","traceback":"Traceback (most recent call last):\n  File \"/work/wt/kernel-0a/src/trio_durable/_turn.py\", line 214, in _run_body\n    value = await wf.fn(ctx, *args)\n            ^^^^^^^^^^^^^^^^^^^^^^^\n  File \"/work/wt/kernel-0a/tests/pre_kernel_app.py\", line 276, in fragile\n    raise td.FatalError(\"broken on purpose\", code=\"broken\")\ntrio_durable._exceptions.FatalError: broken on purpose\n"}',NULL,0,NULL,'handed-off.onError.0',NULL,NULL,NULL,NULL,NULL,1700000001.5,1700000001.5,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('handed-off.onError.0',1,'event:mending','signal','completed','"broken"',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.5,1700000001.5,1700000001.5,NULL,0);
INSERT INTO "checkpoints" VALUES('handed-off.onError.0',2,'go','signal','pending','{"timeout": null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.5,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('retired',1,'fail','signal','completed','{"timeout": null}','true',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.55,NULL,1700000001.6,NULL,0);
INSERT INTO "checkpoints" VALUES('retired',1000000000,'onError:retried:retired.onError.0','child','failed','[{"run_id":"retired","workflow":"fragile","input":[],"error":{"message":"broken on purpose","code":"broken","type":"FatalError","traceback":"Traceback (most recent call last):\n  File \"/work/wt/kernel-0a/src/trio_durable/_turn.py\", line 214, in _run_body\n    value = await wf.fn(ctx, *args)\n            ^^^^^^^^^^^^^^^^^^^^^^^\n  File \"/work/wt/kernel-0a/tests/pre_kernel_app.py\", line 276, in fragile\n    raise td.FatalError(\"broken on purpose\", code=\"broken\")\ntrio_durable._exceptions.FatalError: broken on purpose\n"}}]','{"ok":false,"error":"gave up mending","code":"gave_up","details":null}','{"message":"gave up mending","code":"gave_up","type":"FatalError","traceback":"Traceback (most recent call last):\n  File \"/work/wt/kernel-0a/src/trio_durable/_turn.py\", line 214, in _run_body\n    value = await wf.fn(ctx, *args)\n            ^^^^^^^^^^^^^^^^^^^^^^^\n  File \"/work/wt/kernel-0a/tests/pre_kernel_app.py\", line 285, in mender\n    raise td.FatalError(\"gave up mending\", code=\"gave_up\")\ntrio_durable._exceptions.FatalError: gave up mending\n"}',NULL,0,NULL,'retired.onError.0',NULL,NULL,NULL,NULL,NULL,1700000001.6,1700000001.6,1.70000000164999985697e+09,NULL,0);
INSERT INTO "checkpoints" VALUES('retired.onError.0',1,'event:mending','signal','completed','"broken"',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.6,1700000001.6,1700000001.6,NULL,0);
INSERT INTO "checkpoints" VALUES('retired.onError.0',2,'go','signal','completed','{"timeout": null}','"give up"',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.6,NULL,1.70000000164999985697e+09,NULL,0);
INSERT INTO "checkpoints" VALUES('retired',1000000001,'mender','child','pending','[{"run_id":"retired","workflow":"fragile","input":[],"error":{"message":"broken on purpose","code":"broken","type":"FatalError","traceback":"Traceback (most recent call last):\n  File \"/work/wt/kernel-0a/src/trio_durable/_turn.py\", line 214, in _run_body\n    value = await wf.fn(ctx, *args)\n            ^^^^^^^^^^^^^^^^^^^^^^^\n  File \"/work/wt/kernel-0a/tests/pre_kernel_app.py\", line 276, in fragile\n    raise td.FatalError(\"broken on purpose\", code=\"broken\")\ntrio_durable._exceptions.FatalError: broken on purpose\n"}}]',NULL,'{"message":"broken on purpose","code":"broken","type":"FatalError","traceback":"Traceback (most recent call last):\n  File \"/work/wt/kernel-0a/src/trio_durable/_turn.py\", line 214, in _run_body\n    value = await wf.fn(ctx, *args)\n            ^^^^^^^^^^^^^^^^^^^^^^^\n  File \"/work/wt/kernel-0a/tests/pre_kernel_app.py\", line 276, in fragile\n    raise td.FatalError(\"broken on purpose\", code=\"broken\")\ntrio_durable._exceptions.FatalError: broken on purpose\n"}',NULL,0,NULL,'retired.onError.1',NULL,NULL,NULL,NULL,NULL,1.70000000164999985697e+09,1.70000000164999985697e+09,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('retired.onError.1',1,'event:mending','signal','completed','"broken"',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1.70000000164999985697e+09,1.70000000164999985697e+09,1.70000000164999985697e+09,NULL,0);
INSERT INTO "checkpoints" VALUES('retired.onError.1',2,'go','signal','pending','{"timeout": null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1.70000000164999985697e+09,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('out-step',1,'held','remote','pending','[1]',NULL,'{"message":"out on RefusingBroker, closed since","code":"out","details":{"broker":"RefusingBroker","durable":false,"closed":"vm/1976/1840079/1"}}',NULL,1,'held',NULL,NULL,NULL,NULL,NULL,NULL,1700000001.7,1700000001.7,NULL,'["1846d424c17c627923c6612f48268673"]',0);
INSERT INTO "checkpoints" VALUES('q-hold',1,'in_line','remote','pending','[2]',NULL,'{"message":"out on RefusingBroker, closed since","code":"out","details":{"broker":"RefusingBroker","durable":false,"closed":"vm/1976/1840079/1"}}',NULL,1,'held',NULL,NULL,NULL,NULL,NULL,NULL,1700000001.75,1700000001.75,NULL,'["fcbd04c340212ef7cca5a5a19e4d6e3c"]',0);
INSERT INTO "checkpoints" VALUES('q-step',1,'in_line','remote','pending','[3]',NULL,'{"message":"waiting for a slot of queue ''line''","code":"queued"}',NULL,1,'held',NULL,NULL,NULL,NULL,NULL,1700000006.8,1700000001.8,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('rl-first',1,'metered','remote','pending','[4]',NULL,'{"message":"out on RefusingBroker, closed since","code":"out","details":{"broker":"RefusingBroker","durable":false,"closed":"vm/1976/1840079/1"}}',NULL,1,'held',NULL,NULL,NULL,NULL,NULL,NULL,1700000001.85,1700000001.85,NULL,'["b4862b21fb97d43588561712e8e5216a"]',0);
INSERT INTO "checkpoints" VALUES('rl-step',1,'metered','remote','pending','[5]',NULL,'{"message":"waiting for the rate limit of queue ''metered''","code":"rate_limited"}',NULL,1,'held',NULL,NULL,NULL,NULL,NULL,1700003601.85,1.70000000189999985692e+09,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('blocked-step',1,'render','remote','pending','[6]',NULL,'{"message":"blocked: no live worker of group ''gpu-steps'' offers gpu","code":"blocked"}',NULL,1,'gpu-steps',NULL,NULL,NULL,NULL,NULL,1700000006.95,1700000001.95,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('wait-step',1,'refused','remote','pending','[7]',NULL,'{"message":"waiting for the broker (RefusingBroker): the broker refuses the queue of ''refused''","code":"broker_unavailable","details":{"broker":"RefusingBroker"}}',NULL,1,'refused',NULL,NULL,NULL,NULL,NULL,1.70000000336425399782e+09,1700000002.0,NULL,NULL,'["259f4329e6f4590b9a164106cf6a659e"]',0);
INSERT INTO "checkpoints" VALUES('resend-step',1,'stepper','child','pending','["held",8]',NULL,NULL,NULL,0,NULL,'resend-step.child.1',NULL,NULL,NULL,NULL,NULL,1700000002.45,1700000002.45,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('resend-step.child.1',1,'held','remote','pending','[8]',NULL,'{"message":"to be sent again: its run was retried","code":"resend"}','[{"message":"attempt 1 was out when the run was cancelled; its result was dropped","code":"cancelled"}]',2,'held',NULL,NULL,NULL,NULL,NULL,NULL,1700000002.45,NULL,NULL,'["5a92118719c78df48f4ff31e78de5857"]',0);
INSERT INTO "checkpoints" VALUES('paused-step',1,'tool','local','pending','[0]',NULL,'{"message":"paused at breakpoint bp-1d71b3764d723622","code":"paused"}',NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000002.5,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('continued-step',1,'tool','local','pending','[1]',NULL,'{"message":"continued past breakpoint bp-1d71b3764d723622","code":"continued"}',NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000002.55,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('patched',1,'patch:v2','local','completed',NULL,'true',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000002.6,1700000002.6,1700000002.6,NULL,0);
INSERT INTO "checkpoints" VALUES('patched',2,'event:patched','signal','completed','true',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000002.6,1700000002.6,1700000002.6,NULL,0);
INSERT INTO "checkpoints" VALUES('patched',3,'go','signal','pending','{"timeout": null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000002.6,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('published',1,'event:value','signal','completed','"v"',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000002.6,1700000002.6,1700000002.6,NULL,0);
INSERT INTO "checkpoints" VALUES('published',2,'go','signal','pending','{"timeout": null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000002.6,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('done',1,'add','local','completed','[1]','2',NULL,NULL,1,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000002.6,1700000002.6,1700000002.6,NULL,0);
INSERT INTO "checkpoints" VALUES('cancel-asked',1,'event:value','signal','completed','"c"',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000002.6,1700000002.6,1700000002.6,NULL,0);
INSERT INTO "checkpoints" VALUES('cancel-asked',2,'go','signal','pending','{"timeout": null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000002.6,NULL,NULL,NULL,0);
INSERT INTO "checkpoints" VALUES('update-asked',1,'event:ready','signal','completed','true',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000002.6,1700000002.6,1700000002.6,NULL,0);
INSERT INTO "checkpoints" VALUES('update-asked',2,'go','signal','pending','{"timeout": null}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000002.6,NULL,NULL,NULL,0);
CREATE TABLE durable_values (
        scope TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        version INTEGER NOT NULL,
        updated_at REAL NOT NULL,
        run_id TEXT,
        PRIMARY KEY (scope, key)
    );
INSERT INTO "durable_values" VALUES('run-event:adm-hold','admitted','true',1,1700000000.0,'adm-hold');
INSERT INTO "durable_values" VALUES('rate:wf:limited','window','[1700003600.0]',2,1700000000.0,NULL);
INSERT INTO "durable_values" VALUES('run-event:deadline-done','sleeping','true',1,1700000000.05,'deadline-done');
INSERT INTO "durable_values" VALUES('run-event:deadline','sleeping','true',1,1700000001.05,'deadline');
INSERT INTO "durable_values" VALUES('run-event:deadline-fire','sleeping','true',1,1700000001.05,'deadline-fire');
INSERT INTO "durable_values" VALUES('run-event:chain.gen.3','last','2',1,1700000001.05,'chain.gen.3');
INSERT INTO "durable_values" VALUES('run-event:checked','stepped','3',1,1700000001.1,'checked');
INSERT INTO "durable_values" VALUES('run-event:cleanup','cleaning','true',1,1.70000000114999985697e+09,'cleanup');
INSERT INTO "durable_values" VALUES('run-event:updated','ready','true',1,1700000001.35,'updated');
INSERT INTO "durable_values" VALUES('update:updated','record/bump-1','{"name": "bump", "args": "[2]", "status": "completed", "result": "2"}',2,1700000001.35,'updated');
INSERT INTO "durable_values" VALUES('stream:streamed','000000000000','0',1,1700000001.35,'streamed');
INSERT INTO "durable_values" VALUES('stream:streamed','000000000001','1',1,1700000001.35,'streamed');
INSERT INTO "durable_values" VALUES('stream:streamed','000000000002','2',1,1700000001.35,'streamed');
INSERT INTO "durable_values" VALUES('run-event:streamed','emitted','3',1,1700000001.35,'streamed');
INSERT INTO "durable_values" VALUES('run-event:handed-off.onError.0','mending','"broken"',1,1700000001.5,'handed-off.onError.0');
INSERT INTO "durable_values" VALUES('run-event:retired.onError.0','mending','"broken"',1,1700000001.6,'retired.onError.0');
INSERT INTO "durable_values" VALUES('run-event:retired.onError.1','mending','"broken"',1,1.70000000164999985697e+09,'retired.onError.1');
INSERT INTO "durable_values" VALUES('rate:metered','window','[1700003601.85]',2,1.70000000189999985692e+09,NULL);
INSERT INTO "durable_values" VALUES('run-event:patched','patched','true',1,1700000002.6,'patched');
INSERT INTO "durable_values" VALUES('run-event:published','value','"v"',1,1700000002.6,'published');
INSERT INTO "durable_values" VALUES('run-event:cancel-asked','value','"c"',1,1700000002.6,'cancel-asked');
INSERT INTO "durable_values" VALUES('run-event:update-asked','ready','true',1,1700000002.6,'update-asked');
INSERT INTO "durable_values" VALUES('update:update-asked','record/bump-2','{"name": "bump", "args": "[5]", "at": 1700000002.6, "status": "accepted"}',1,1700000002.6,'update-asked');
INSERT INTO "durable_values" VALUES('update:update-asked','inbox/bump-2','{"name": "bump", "args": "[5]", "at": 1700000002.6}',1,1700000002.6,'update-asked');
CREATE TABLE paused_steps (
        run_id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        workflow TEXT NOT NULL,
        step TEXT NOT NULL,
        breakpoint_id TEXT NOT NULL,
        paused_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
INSERT INTO "paused_steps" VALUES('paused-step',1,'pausing','tool','bp-1d71b3764d723622',1700000002.5);
CREATE TABLE queue_slots (
        queue TEXT NOT NULL,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        PRIMARY KEY (queue, run_id, seq)
    );
INSERT INTO "queue_slots" VALUES('wf:gate:k','adm-hold',999999990);
INSERT INTO "queue_slots" VALUES('line','q-hold',1);
INSERT INTO "queue_slots" VALUES('metered','rl-first',1);
INSERT INTO "queue_slots" VALUES('metered','rl-step',1);
CREATE TABLE queue_waiters (
        id INTEGER PRIMARY KEY,
        queue TEXT NOT NULL,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        priority INTEGER NOT NULL,
        at REAL NOT NULL,
        UNIQUE (queue, run_id, seq)
    );
INSERT INTO "queue_waiters" VALUES(1,'wf:gate:k','adm-wait',999999990,0,1700000000.0);
INSERT INTO "queue_waiters" VALUES(2,'line','q-step',1,0,1700000001.8);
CREATE TABLE run_inputs (
        run_id TEXT PRIMARY KEY,
        input TEXT NOT NULL
    );
INSERT INTO "run_inputs" VALUES('adm-hold','["k"]');
INSERT INTO "run_inputs" VALUES('adm-wait','["k"]');
INSERT INTO "run_inputs" VALUES('rate-first','[1]');
INSERT INTO "run_inputs" VALUES('rate-wait','[2]');
INSERT INTO "run_inputs" VALUES('remote-done','[1]');
INSERT INTO "run_inputs" VALUES('remote-failed','[-1]');
INSERT INTO "run_inputs" VALUES('deadline-done','[1.0]');
INSERT INTO "run_inputs" VALUES('deadline','[5000.0]');
INSERT INTO "run_inputs" VALUES('deadline-fire','[1000000.0]');
INSERT INTO "run_inputs" VALUES('chain','[0]');
INSERT INTO "run_inputs" VALUES('chain.gen.2','[1]');
INSERT INTO "run_inputs" VALUES('chain.gen.3','[2]');
INSERT INTO "run_inputs" VALUES('checked','[1]');
INSERT INTO "run_inputs" VALUES('cleanup','[]');
INSERT INTO "run_inputs" VALUES('remote-out','[1]');
INSERT INTO "run_inputs" VALUES('remote-waits','[1]');
INSERT INTO "run_inputs" VALUES('remote-cancel','[]');
INSERT INTO "run_inputs" VALUES('updated','[]');
INSERT INTO "run_inputs" VALUES('streamed','[]');
INSERT INTO "run_inputs" VALUES('fork-source','[1]');
INSERT INTO "run_inputs" VALUES('forked','[1]');
INSERT INTO "run_inputs" VALUES('handed-off','[]');
INSERT INTO "run_inputs" VALUES('handed-off.onError.0','[{"run_id":"handed-off","workflow":"fragile","input":[],"error":{"message":"broken on purpose","code":"broken","type":"FatalError","traceback":"Traceback (most recent call last):\n  File \"/work/wt/kernel-0a/src/trio_durable/_turn.py\", line 214, in _run_body\n    value = await wf.fn(ctx, *args)\n            ^^^^^^^^^^^^^^^^^^^^^^^\n  File \"/work/wt/kernel-0a/tests/pre_kernel_app.py\", line 276, in fragile\n    raise td.FatalError(\"broken on purpose\", code=\"broken\")\ntrio_durable._exceptions.FatalError: broken on purpose\n"}}]');
INSERT INTO "run_inputs" VALUES('retired','[]');
INSERT INTO "run_inputs" VALUES('retired.onError.0','[{"run_id":"retired","workflow":"fragile","input":[],"error":{"message":"broken on purpose","code":"broken","type":"FatalError","traceback":"Traceback (most recent call last):\n  File \"/work/wt/kernel-0a/src/trio_durable/_turn.py\", line 214, in _run_body\n    value = await wf.fn(ctx, *args)\n            ^^^^^^^^^^^^^^^^^^^^^^^\n  File \"/work/wt/kernel-0a/tests/pre_kernel_app.py\", line 276, in fragile\n    raise td.FatalError(\"broken on purpose\", code=\"broken\")\ntrio_durable._exceptions.FatalError: broken on purpose\n"}}]');
INSERT INTO "run_inputs" VALUES('retired.onError.1','[{"run_id":"retired","workflow":"fragile","input":[],"error":{"message":"broken on purpose","code":"broken","type":"FatalError","traceback":"Traceback (most recent call last):\n  File \"/work/wt/kernel-0a/src/trio_durable/_turn.py\", line 214, in _run_body\n    value = await wf.fn(ctx, *args)\n            ^^^^^^^^^^^^^^^^^^^^^^^\n  File \"/work/wt/kernel-0a/tests/pre_kernel_app.py\", line 276, in fragile\n    raise td.FatalError(\"broken on purpose\", code=\"broken\")\ntrio_durable._exceptions.FatalError: broken on purpose\n"}}]');
INSERT INTO "run_inputs" VALUES('out-step','["held",1]');
INSERT INTO "run_inputs" VALUES('q-hold','["line",2]');
INSERT INTO "run_inputs" VALUES('q-step','["line",3]');
INSERT INTO "run_inputs" VALUES('rl-first','["metered",4]');
INSERT INTO "run_inputs" VALUES('rl-step','["metered",5]');
INSERT INTO "run_inputs" VALUES('blocked-step','["render",6]');
INSERT INTO "run_inputs" VALUES('wait-step','["refused",7]');
INSERT INTO "run_inputs" VALUES('resend-step','[8]');
INSERT INTO "run_inputs" VALUES('resend-step.child.1','["held",8]');
INSERT INTO "run_inputs" VALUES('paused-step','[0]');
INSERT INTO "run_inputs" VALUES('continued-step','[1]');
INSERT INTO "run_inputs" VALUES('patched','[]');
INSERT INTO "run_inputs" VALUES('published','["v"]');
INSERT INTO "run_inputs" VALUES('done','[1]');
INSERT INTO "run_inputs" VALUES('failed','[-1]');
INSERT INTO "run_inputs" VALUES('cancel-asked','["c"]');
INSERT INTO "run_inputs" VALUES('update-asked','[]');
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
INSERT INTO "run_tags" VALUES('onError:*',1700000001.45,'handed-off');
INSERT INTO "run_tags" VALUES('onError:*',1700000001.55,'retired');
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
INSERT INTO "runs" VALUES('adm-hold','gate','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000000.0,1700000000.0,NULL,'{}');
INSERT INTO "runs" VALUES('adm-wait','gate','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,1700000005.0,0,0,1700000000.0,1700000000.0,1700000005.0,'{}');
INSERT INTO "runs" VALUES('rate-first','limited','1','default','completed','1',NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000000.0,1700000000.0,NULL,'{}');
INSERT INTO "runs" VALUES('rate-wait','limited','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,1700003600.0,0,0,1700000000.0,1700000000.0,1700003600.0,'{}');
INSERT INTO "runs" VALUES('remote-done','remote_quick','1','default','completed','2',NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000000.05,1700000000.05,NULL,'{}');
INSERT INTO "runs" VALUES('remote-failed','remote_quick','1','default','failed',NULL,'{"message":"negative","code":"negative","type":"FatalError","traceback":"Traceback (most recent call last):\n  File \"/work/wt/kernel-0a/src/trio_durable/_decide.py\", line 178, in decide\n    value = await wf.fn(Context(replay), *args)\n            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n  File \"/work/wt/kernel-0a/tests/pre_kernel_app.py\", line 224, in remote_quick\n    raise td.FatalError(\"negative\", code=\"negative\")\ntrio_durable._exceptions.FatalError: negative\n"}','[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000000.05,1700000000.05,NULL,'{}');
INSERT INTO "runs" VALUES('deadline-done','sleeper','1','default','completed','"slept 1"',NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000000.05,1700000001.05,NULL,'{}');
INSERT INTO "runs" VALUES('deadline','sleeper','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,1700005001.05,0,0,1700000001.05,1700000001.05,1700005001.05,'{}');
INSERT INTO "runs" VALUES('deadline-fire','sleeper','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,1700005001.05,0,0,1700000001.05,1700000001.05,1700005001.05,'{}');
INSERT INTO "runs" VALUES('chain','chain','1','default','completed',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000001.05,1700000001.05,NULL,'{}');
INSERT INTO "runs" VALUES('chain.gen.2','chain','1','default','completed',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000001.05,1700000001.05,NULL,'{}');
INSERT INTO "runs" VALUES('chain.gen.3','chain','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,1700005001.05,0,0,1700000001.05,1700000001.05,1700005001.05,'{}');
INSERT INTO "runs" VALUES('checked','checked','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000001.1,1700000001.1,NULL,'{}');
INSERT INTO "runs" VALUES('cleanup','cleanup','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,1.7000050011499998569e+09,0,0,1700000001.1,1.70000000114999985697e+09,1.7000050011499998569e+09,'{}');
INSERT INTO "runs" VALUES('remote-out','remote_later','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1.70000000114999985697e+09,1.70000000114999985697e+09,NULL,'{}');
INSERT INTO "runs" VALUES('remote-waits','remote_sleeper','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,1700005001.2,0,0,1700000001.2,1700000001.2,1700005001.2,'{}');
INSERT INTO "runs" VALUES('remote-cancel','remote_cleanup','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000001.25,1700000001.3,NULL,'{}');
INSERT INTO "runs" VALUES('updated','updated','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000001.35,1700000001.35,NULL,'{}');
INSERT INTO "runs" VALUES('streamed','streamed','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000001.35,1700000001.35,NULL,'{}');
INSERT INTO "runs" VALUES('fork-source','forkable','1','default','completed','13',NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000001.35,1.70000000139999985697e+09,NULL,'{}');
INSERT INTO "runs" VALUES('forked','forkable','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1.70000000139999985697e+09,1.70000000139999985697e+09,NULL,'{}');
INSERT INTO "runs" VALUES('handed-off','fragile','1','default','suspended',NULL,NULL,'["onError:*"]',NULL,NULL,NULL,NULL,NULL,0,0,1700000001.45,1700000001.5,NULL,'{}');
INSERT INTO "runs" VALUES('handed-off.onError.0','mender','1','default','suspended',NULL,NULL,'[]','handed-off',1000000000,NULL,NULL,NULL,0,0,1700000001.5,1700000001.5,NULL,'{}');
INSERT INTO "runs" VALUES('retired','fragile','1','default','suspended',NULL,NULL,'["onError:*"]',NULL,NULL,NULL,NULL,NULL,0,0,1700000001.55,1.70000000164999985697e+09,NULL,'{}');
INSERT INTO "runs" VALUES('retired.onError.0','mender','1','default','failed',NULL,'{"message":"gave up mending","code":"gave_up","type":"FatalError","traceback":"Traceback (most recent call last):\n  File \"/work/wt/kernel-0a/src/trio_durable/_turn.py\", line 214, in _run_body\n    value = await wf.fn(ctx, *args)\n            ^^^^^^^^^^^^^^^^^^^^^^^\n  File \"/work/wt/kernel-0a/tests/pre_kernel_app.py\", line 285, in mender\n    raise td.FatalError(\"gave up mending\", code=\"gave_up\")\ntrio_durable._exceptions.FatalError: gave up mending\n"}','[]','retired',NULL,NULL,NULL,NULL,0,0,1700000001.6,1.70000000164999985697e+09,NULL,'{}');
INSERT INTO "runs" VALUES('retired.onError.1','mender','1','default','suspended',NULL,NULL,'[]','retired',1000000001,NULL,NULL,NULL,0,0,1.70000000164999985697e+09,1.70000000164999985697e+09,NULL,'{}');
INSERT INTO "runs" VALUES('out-step','stepper','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000001.7,1700000001.7,NULL,'{}');
INSERT INTO "runs" VALUES('q-hold','stepper','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000001.75,1700000001.75,NULL,'{}');
INSERT INTO "runs" VALUES('q-step','stepper','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,1700000006.8,0,0,1700000001.8,1700000001.8,1700000006.8,'{}');
INSERT INTO "runs" VALUES('rl-first','stepper','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000001.85,1700000001.85,NULL,'{}');
INSERT INTO "runs" VALUES('rl-step','stepper','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,1700003601.85,0,0,1.70000000189999985692e+09,1.70000000189999985692e+09,1700003601.85,'{}');
INSERT INTO "runs" VALUES('blocked-step','stepper','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,1700000006.95,0,0,1700000001.95,1700000001.95,1700000006.95,'{}');
INSERT INTO "runs" VALUES('wait-step','stepper','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,1.70000000336425399782e+09,0,0,1700000002.0,1.70000000244325804709e+09,1.70000000336425399782e+09,'{}');
INSERT INTO "runs" VALUES('resend-step','resender','1','default','pending',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000002.45,1700000002.6,1700000002.6,'{}');
INSERT INTO "runs" VALUES('resend-step.child.1','stepper','1','default','pending',NULL,NULL,'[]','resend-step',1,NULL,NULL,NULL,0,0,1700000002.45,1700000002.6,1700000002.6,'{}');
INSERT INTO "runs" VALUES('paused-step','pausing','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000002.5,1700000002.5,NULL,'{}');
INSERT INTO "runs" VALUES('continued-step','pausing','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,1700000002.6,0,0,1700000002.55,1700000002.55,1700000002.6,'{}');
INSERT INTO "runs" VALUES('patched','patched','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000002.6,1700000002.6,NULL,'{}');
INSERT INTO "runs" VALUES('published','published','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000002.6,1700000002.6,NULL,'{}');
INSERT INTO "runs" VALUES('done','simple','1','default','completed','2',NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000002.6,1700000002.6,NULL,'{}');
INSERT INTO "runs" VALUES('failed','simple','1','default','failed',NULL,'{"message":"negative","code":"negative","type":"FatalError","traceback":"Traceback (most recent call last):\n  File \"/work/wt/kernel-0a/src/trio_durable/_turn.py\", line 214, in _run_body\n    value = await wf.fn(ctx, *args)\n            ^^^^^^^^^^^^^^^^^^^^^^^\n  File \"/work/wt/kernel-0a/tests/pre_kernel_app.py\", line 325, in simple\n    raise td.FatalError(\"negative\", code=\"negative\")\ntrio_durable._exceptions.FatalError: negative\n"}','[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000002.6,1700000002.6,NULL,'{}');
INSERT INTO "runs" VALUES('cancel-asked','published','1','default','cancelling',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000002.6,1700000002.6,1700000002.6,'{}');
INSERT INTO "runs" VALUES('update-asked','updated','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000002.6,1700000002.6,NULL,'{}');
CREATE TABLE signal_waiters (
        token TEXT PRIMARY KEY,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL
    );
INSERT INTO "signal_waiters" VALUES('["adm-hold","go"]','adm-hold',2);
INSERT INTO "signal_waiters" VALUES('["checked","go"]','checked',4);
INSERT INTO "signal_waiters" VALUES('["cleanup","never"]','cleanup',1);
INSERT INTO "signal_waiters" VALUES('["remote-cancel","never"]','remote-cancel',1);
INSERT INTO "signal_waiters" VALUES('["updated","go"]','updated',2);
INSERT INTO "signal_waiters" VALUES('["streamed","go"]','streamed',2);
INSERT INTO "signal_waiters" VALUES('["forked","go"]','forked',3);
INSERT INTO "signal_waiters" VALUES('["handed-off.onError.0","go"]','handed-off.onError.0',2);
INSERT INTO "signal_waiters" VALUES('["retired.onError.1","go"]','retired.onError.1',2);
INSERT INTO "signal_waiters" VALUES('["patched","go"]','patched',3);
INSERT INTO "signal_waiters" VALUES('["published","go"]','published',2);
INSERT INTO "signal_waiters" VALUES('["cancel-asked","go"]','cancel-asked',2);
INSERT INTO "signal_waiters" VALUES('["update-asked","go"]','update-asked',2);
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
CREATE INDEX durable_values_run ON durable_values (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX durable_values_age ON durable_values (scope, updated_at) WHERE run_id IS NULL;
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('announcements',43);
COMMIT;

-- schema version 6
BEGIN TRANSACTION;
CREATE TABLE announcements (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        workflow TEXT,
        version TEXT,
        origin TEXT NOT NULL
    );
INSERT INTO "announcements" VALUES(1,'done-1','end','checkout','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(2,'failed-1','end','declined','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(3,'entity:wallet-c2094cac629f6fbe','end','entity:wallet','1','engine-d82c07cd');
INSERT INTO "announcements" VALUES(4,'plain-1','wake','plain','','client-ee671fbd9851a426');
INSERT INTO "announcements" VALUES(5,'bare-1','wake','plain','','client-534e843fb5a00b61');
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
INSERT INTO "buffered_signals" VALUES(1,'["waiting-1","second"]','{"$blob":"sha256-37e2291c69d3f533509adcd4c7e8df83d6e024bcc7cc97928e4785a9a8231fe4","size":224}');
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
INSERT INTO "checkpoints" VALUES('done-1',1,'charge','local','completed','{"$blob":"sha256-dc05394f28f850b807ffbdead967501cd3207f706a3a748a1156fd371b1d18f6","size":284}','{"$blob":"sha256-86a45872f7d4093def016dd0b155d2ad2d1669f242fbfda891888725b82c3f0a","size":272}',NULL,NULL,1,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.0,1700000000.0,1700000000.0);
INSERT INTO "checkpoints" VALUES('done-1',2,'approved','signal','completed','{"$blob":"sha256-3790c1280bad81d04c540e19e08a7ec3ff4e33da2fe1b3a617bc5c218503e3c5","size":80}','{"$blob":"sha256-33b15bbfcc57ee454a6ace2f1ca935e0d5ef85f67eb82b2affbd0a000266c604","size":216}',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.0,NULL,1700000000.0);
INSERT INTO "checkpoints" VALUES('waiting-1',1,'first','signal','pending','{"$blob":"sha256-69c31f3fb6736616f1b661430d0425f5c28b2b7db61c81faba5460df66fdc0bf","size":80}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.0,NULL,NULL);
INSERT INTO "checkpoints" VALUES('failed-1',1,'refuse','local','failed','{"$blob":"sha256-de63757686696e77609581d7366a9b2eec3365dcae24da8045b17067fb2abe64","size":84}',NULL,'{"message":"encrypted with k1","code":"declined","details":{"$enc":"k1","d":"/DzhwjDhCIXW6ucSsKf5jkAK5Y6ENqI3KjUdU40x+UpL0lSM7ArHTc2RecAHJS3RW0kJjvAla3ptz3T6+1QQejkiLzOX7sG4dkNakONhwRCxA/VrtY9JFKx/yryLT6l7Vvn6TSd/nzXr6YDCTKDZvHf0YPh83ZSL0zVhZKTdkpQf1kpUJdhth8hhKm2oMqjsBo/5zPFEzNP4dX23fctzfkaTPhINGt3rmRKDJyhTaBLpMK+dqAXRaaqq+D0l/v1k5IY4BlMpWk6myfyVlAm3FgAI21mGLOokPdGli9MyyGfM5PyPgVeD7XQeVx2iTWT+xAiGX9y02/QJZFjIu6GPe27NAz4XI5kZfkYAy2+Yu24W8aUXfcXi/yhVWoTKC9Fg7DSmiacrq7kYvIz8TRA/UGXkwa+4XVLAIF+5qEuSie3uIc6nFjysc/65/BetAI+S5zug9YHgC1h1yUWMnhOckyThcbwloRZ8SRB672XzBf4IKsqSINWX+cWyLd0L6Dqgjd+Onots0pFdL4naMs7VmUD2UtcZLnZLgsIni3nuk6CIRhVABSR6SfC/7ilfVAr8a7XhaiGVtK3WvkiMgCuz2364P8QM4Al4wIXmSoz00PUiN1SiL2Fr3GfytXPf/Aw3JxrpCg6fR0j2POXo+gf6wiUjlYyfNxJ5EcVNw6sG43XYTLR8GKYuPbZCIZotDqwawBUBTcDDEmNINPkT4EUw4+9C15AsNWjeJtCik2gNr4zSiiOgTQ/ZKD74vwBcVud9TJ/+VO0xpL1jSk32fdc7PDmFhKQMlfdFqbwoy/9S4mrMhHU+VI4AAX7WROxTKSFoI3BVyvoILYhIYUcsznyJyNpiD4DkqFuORcMJ6Jj3Qi5ujnZWZvGqf6BmGM+UzjLZkZq1cK5lT+sZoM29EfPCsMVKmQHUoFEBgDQLj2Y5U0XGrdvMD4RREdWpRh5Omiv6QYC6XSw8hpwWvVdpn1UQX1C9ESK/1ng2cMkyqPHTsvM8LNvUY9Y1n5pw9Hn51+KWQHhLLRrhkufTL3rzatiNrcDHULwUVBgCxVzDwcOFCEA="},"type":"FatalError","step":"refuse"}','[{"message":"encrypted with k1","details":{"$enc":"k1","d":"wiYSpTEquGb7ZPIhom3GiTw8x4K8cBkpf/p3AtxvWZnrNBhNwpQp3lIVZrbxTAwbCgp8C7WDNY1oY4nZ6qBto8gTLJlmas2lxgX50KkBtO3tkTTS1Yn9LBPDTyTDG59sQkzr50cxgiqJBJHV2SLRHQnb6ZZiCgmhNmG4YX14+HCZJmfMpCscQnoG7/b0xHSyG/iF3KFV20qGdqhAyr4zyRFfomV7Wfj7RvajNxt04yRYEyAQz6H0+T3AFsD3vAGyJrd3vpvZynhsYmU4XwNb4MhAI+qY9UHJ/oWxFX+YTs/rRu4LOy97iKL2TO/HQgzb8e6NHYKGxcAhVG90bHhQvF/eId9JP865X/udzxlfIzXrOIlyg+6NA/dS3Z33/cmnKDdwGweAUcoZvnxvzMcNozHRwz4T2xl6Blwo98iUGklXzk0R1fkbLSDsI8NYUhSt/O8+6LwltZmn4r/oD7ZpKJthXy5jLApP49KJcSKx2AlBUOEUx3SfMi4trlKfKp8T06fDbmmliSMxOGE8uJ0ruDUMr1WbVumKqtCzkslclM4SiliTuWoZlRwDhvj2g6oeNnGdxaju7+2LBI6LdMsbYXbYMYA/2eCYqdOJxCl1Qr2UfQbtZDVFXZvOftfri0RgTsI4bI2f7wpKOAUa5hgyIWdT33JTHYdJnOIviNlDNz5PjALaW/EfKjfmOtRfGXPaZRK3gRGLlZGKLDtsUgbxFvuw/g/XQabqKoP7U8/gsa2cK7UDU4uWdUwF+P2glJKxk5vG4xA0kbO68gAwwaGqo8tWJ8wFxiCOuUQTNRsxS0J9gSayJRmwQv1+Zcq2IcA16MEpKjZfNeg+5DlOaP/K5ugOqN1Fd7Vyui6StDPs/ed+nWYBBpwgR0uKVgnEjwk9LKYfKplPAJZRNUr8NQoJmlVMqVY9TJ0Fq5NCAQ3NVnfLvOsA6n+BPXIFX3KaxLRSLKMq47yiXBq+L4E5sWnRGvXX+SfL0Olde1h2loZd6p4FzDA1F9TVZ6cbcZz1UBBKDR8+lmmZtI8u7+7IvQvWpp7emiYOFjLH1QBri5eJ7YdSxvmJJ4wpJpBwQKWtaPVP9kkukFaF2DiqM2SoXKcR6a9PHDb3SYySQ/wygajNYwlkz9xnhqqd5azsUYHqp6RRHQ=="},"type":"ValueError","step":"refuse"},{"message":"encrypted with k1","code":"declined","details":{"$enc":"k1","d":"fWLS/ox7bXXd6JD7ctL/WcIy6H8zpraFB2Jenz5GV5bPggFFMoku/BJ5Q/AbAqnhPlGgD2FL9oV21UqzyVh4oFjETVGCSUf0utAqD8KvjWSFYMTb7jBTrXk0223zMQMhuVmO9zX1OdLQm++CHMsfvWo9ixld8WnQuvskHII1fMMtyL7gsrrqFMJPg1KCGQElWUDpBwuQuipBIEuKT/INMVG7hofzBASkVmaRoFDVvhcPaHEe5wNzKpBt1SDIh5UJ53/9wl5AJjiyjSoV5826vCaWbpaOFEGL6vzw+pbU9CYSF5sZs9TCUtgW9O7+af82qKVvmJF1YbVx5dsVFkYTBCXTeSIjeUATDv/kA3QHllWCrhf0iQenoqISkHdr+Dl+d45Qlv/J8SJ7ZfuayzPR95mBaXVAbgVgrU3MJ4wD9MVbkrzxMsR0lySNAG8CUZUx1+dzgNgkUEjveqf3r7EuwdGf/i6T6gTFZUU+c3iOnW/UYDW2/3ZqWjbVzbzr6N5FsIAJB9d0Nm0D+dkY+BhJ68fGKUm1MpXd83Tvn2CBpHYuoxY3dzP4RbRp8U7kzVzFZ5UGK7/PS3TrnZJtyrQpuEAK1ZX07h6PumGSJnzMdr/vV1+A5dFqdx7tQIMNLHk9WlprgOySFATcKHVPgRWnOoRkYwDFjathDKWR9zQqJcZ5WUlkTztRD7QDd1KtJrOhfha9cB3ZaGp2ZBz7zg80uhUWMy8Xj7hReWyWQMh42QwcJZkHiu/YBQCNIrwRi+b/oXKQtza0gCPfoESNCor0XO565h84HdSj0yH3AwLy/31AcbGeeH/VxECJ6t7yJDDKYn8rV1WY1RGFZgAR/3gjkAp9+w1NxVOSc0ARFxNmGx40qN40Y7MdSVFTsru+lVy/Lz3WmXQLRmoTtXVW1zd4ea0K7VZuvmbbuHuwEvGhp7LJ6ShBdH9YdMlNq832PWhDKnP008/0hV1SaFaYDpVSE3A4DyJpZlJKoxKVEo8qi9LUGXLldwcB57UmoCFvOwkNaJGBxFKDd7pG+qfSZbP+C8zyMZ5DO3+m5p5nsExm2P4="},"type":"FatalError","step":"refuse"}]',2,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000000.0,1700000000.0,1700000001.0);
INSERT INTO "checkpoints" VALUES('entity:wallet-c2094cac629f6fbe',999999990,'admission','local','completed','{"$blob":"sha256-fc72f9a4db080973f7ce0448bb2213ed581945cb8da0cb27345642a98e60dc8b","size":128}',NULL,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1700000001.0,NULL,1700000001.0);
CREATE TABLE durable_values (
        scope TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        version INTEGER NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (scope, key)
    );
INSERT INTO "durable_values" VALUES('blob','r/sha256-b48c8490673449b05f3e7b9bf12872c4ee876333d461ef4553e88e082be843ab/done-1','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','o/["done-1","sha256-b48c8490673449b05f3e7b9bf12872c4ee876333d461ef4553e88e082be843ab"]','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','r/sha256-33b15bbfcc57ee454a6ace2f1ca935e0d5ef85f67eb82b2affbd0a000266c604/done-1','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','o/["done-1","sha256-33b15bbfcc57ee454a6ace2f1ca935e0d5ef85f67eb82b2affbd0a000266c604"]','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','r/sha256-dc05394f28f850b807ffbdead967501cd3207f706a3a748a1156fd371b1d18f6/done-1','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','o/["done-1","sha256-dc05394f28f850b807ffbdead967501cd3207f706a3a748a1156fd371b1d18f6"]','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','r/sha256-86a45872f7d4093def016dd0b155d2ad2d1669f242fbfda891888725b82c3f0a/done-1','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','o/["done-1","sha256-86a45872f7d4093def016dd0b155d2ad2d1669f242fbfda891888725b82c3f0a"]','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','r/sha256-3790c1280bad81d04c540e19e08a7ec3ff4e33da2fe1b3a617bc5c218503e3c5/done-1','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','o/["done-1","sha256-3790c1280bad81d04c540e19e08a7ec3ff4e33da2fe1b3a617bc5c218503e3c5"]','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','r/sha256-ad0163373b654b3ce1e58f36997eaa0adc9dd3c9ecc00b766e8b014c36434231/done-1','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','o/["done-1","sha256-ad0163373b654b3ce1e58f36997eaa0adc9dd3c9ecc00b766e8b014c36434231"]','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','r/sha256-5658bef4543f5f7ff259bbfc52c98397b18919c37b8a5a7be2ae51d3d63e2e0e/waiting-1','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','o/["waiting-1","sha256-5658bef4543f5f7ff259bbfc52c98397b18919c37b8a5a7be2ae51d3d63e2e0e"]','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','r/sha256-37e2291c69d3f533509adcd4c7e8df83d6e024bcc7cc97928e4785a9a8231fe4/waiting-1','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','o/["waiting-1","sha256-37e2291c69d3f533509adcd4c7e8df83d6e024bcc7cc97928e4785a9a8231fe4"]','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','r/sha256-69c31f3fb6736616f1b661430d0425f5c28b2b7db61c81faba5460df66fdc0bf/waiting-1','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','o/["waiting-1","sha256-69c31f3fb6736616f1b661430d0425f5c28b2b7db61c81faba5460df66fdc0bf"]','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','r/sha256-0d64bf0669d180dbbb229331eb6875bfca8a21e58477e6bb118968860cca418f/failed-1','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','o/["failed-1","sha256-0d64bf0669d180dbbb229331eb6875bfca8a21e58477e6bb118968860cca418f"]','1',1,1700000000.0);
INSERT INTO "durable_values" VALUES('blob','r/sha256-de63757686696e77609581d7366a9b2eec3365dcae24da8045b17067fb2abe64/failed-1','1',1,1700000001.0);
INSERT INTO "durable_values" VALUES('blob','o/["failed-1","sha256-de63757686696e77609581d7366a9b2eec3365dcae24da8045b17067fb2abe64"]','1',1,1700000001.0);
INSERT INTO "durable_values" VALUES('blob','r/sha256-208782eccf674810b842511e8f002ac5ecdd95d3253e66a937b54d4360a71b22/entity:wallet-c2094cac629f6fbe','1',1,1700000001.0);
INSERT INTO "durable_values" VALUES('blob','o/["entity:wallet-c2094cac629f6fbe","sha256-208782eccf674810b842511e8f002ac5ecdd95d3253e66a937b54d4360a71b22"]','1',1,1700000001.0);
INSERT INTO "durable_values" VALUES('blob','r/sha256-fc72f9a4db080973f7ce0448bb2213ed581945cb8da0cb27345642a98e60dc8b/entity:wallet-c2094cac629f6fbe','1',1,1700000001.0);
INSERT INTO "durable_values" VALUES('blob','o/["entity:wallet-c2094cac629f6fbe","sha256-fc72f9a4db080973f7ce0448bb2213ed581945cb8da0cb27345642a98e60dc8b"]','1',1,1700000001.0);
INSERT INTO "durable_values" VALUES('entity:wallet','w-1','{"$enc":"k1","d":"pLEuqq/sFvX6a7twKtkvSb78Lode/zVpxENi26zyAdnWpfVSYzeArZMSlGBHVBQOc6CTGblhARzHMdU62q1xwA27o66UftIjGQkMa+dXuhxcq/0Kb0NttgBNiMf2WomoMCqjR70h35CUMWhO1xwkcg/+d2nXYLkZyoMT6TqGkDz7yeV3fXpaF2BQhGikOsvyExbWqeAe8HI5XjYOZzEG50XhBspGHBzbcasC3sgnAIhnKuH+12WDSqgBL/M="}',1,1700000001.0);
INSERT INTO "durable_values" VALUES('blob','r/sha256-feb3cc3aab715db870f28669c9f9c7973bc2b1a6b2ca6817140093ca09b91970/plain-1','1',1,1700000001.0);
INSERT INTO "durable_values" VALUES('blob','o/["plain-1","sha256-feb3cc3aab715db870f28669c9f9c7973bc2b1a6b2ca6817140093ca09b91970"]','1',1,1700000001.0);
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
INSERT INTO "run_inputs" VALUES('done-1','{"$blob":"sha256-b48c8490673449b05f3e7b9bf12872c4ee876333d461ef4553e88e082be843ab","size":284}');
INSERT INTO "run_inputs" VALUES('waiting-1','{"$blob":"sha256-5658bef4543f5f7ff259bbfc52c98397b18919c37b8a5a7be2ae51d3d63e2e0e","size":236}');
INSERT INTO "run_inputs" VALUES('failed-1','{"$blob":"sha256-0d64bf0669d180dbbb229331eb6875bfca8a21e58477e6bb118968860cca418f","size":84}');
INSERT INTO "run_inputs" VALUES('entity:wallet-c2094cac629f6fbe','{"$blob":"sha256-208782eccf674810b842511e8f002ac5ecdd95d3253e66a937b54d4360a71b22","size":276}');
INSERT INTO "run_inputs" VALUES('plain-1','{"$blob":"sha256-feb3cc3aab715db870f28669c9f9c7973bc2b1a6b2ca6817140093ca09b91970","size":138}');
INSERT INTO "run_inputs" VALUES('bare-1','["bare"]');
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
INSERT INTO "runs" VALUES('done-1','checkout','1','default','completed','{"$blob":"sha256-ad0163373b654b3ce1e58f36997eaa0adc9dd3c9ecc00b766e8b014c36434231","size":460}',NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000000.0,1700000000.0,NULL,'{}');
INSERT INTO "runs" VALUES('waiting-1','two_signals','1','default','suspended',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000000.0,1700000000.0,NULL,'{}');
INSERT INTO "runs" VALUES('failed-1','declined','1','default','failed',NULL,'{"message":"encrypted with k1","code":"declined","details":{"$enc":"k1","d":"mNKAx6e88w+tws4F3gWdhnxJXmRGyQsPpVCiOo2Xyv7/5qdcswjCAS2Ge3d0SErYRZNd78FzqrbOkshdae3gGKuODS9Vjk59CMCKjy6jg58jJewvdcmziT7wgOA3d+gVOQaAr4W10cxzVv3WrZ7yfuArySwPSnXhWBJNKanvULO6HKbxlUvyN+pVJVyfNNWp9E/SWox3ucnR2PBO+ukHdg1h9Cx0j3tacBAZzFKyx80uDETqKTKONNyxtuo7qTkO1cE/foi8QKRaU35k8Zz8ArVz6pDOwjVNyhTN6R6klBawVF5vm1xZ87Xj6At9MyTdYzRJ7N3XwX0BodjkbwoEizUQ70L9ozSiYpm3r60+E23Aeq/mUzgW6jF3SqFzCuDlIU92CAxuEd3H6RX67HZVlabHBx9g7QXwu0Wo8qupCIAhNupshAo51/T5hRCRZ30a0c/whGmg+vpsTMVNrEPfJ3gEkbaT1YOEWQ6Z8LzHEXZjvJg7EiR43YC5u5dWI8WV98nBxDjNYP3qKujLL4kp8TwcUlwuKnJRzkgfkS2Bz2alrSFkSwikLb2xwELcTtvZBPdkshoq5PNHUx5Ovu8w9GmzGc6BhjM4VIKUTq4fF5wzS6VIPfCYC/m6y+d37U934RGJL4oKut6edsLBEVfgHYNFSqutX6MWX+4lK0ED1XdF+7V8FROsPX0gInAHM0eqO5DWPYIDZi6MWPZNiWZyqfC3HW+bxAw0bPAwkGeRyQC7oujdvXqUFHGohMSYWUPqo48Q3bwywM2FZWn0Kx5VynCEK1F0z3aUZQEHF8f67m6WnlHnM1t+IgSayCDD/0tVu4P0N8UFAP0LvkJr2d2PQz3NAxja8jx/J6xBsZHxhBrIPcXDPMVJ1ECZl8+MLBZVugQYh/ofPd2CSC4Jzqs0VD67ET7KCajwvRcPkr8ALSF3R/pRWvhrXjVKKFO0TPbwqW19vGfgTOzf1udtNo5H5s0gfSY/BzzsIHDyxUyz20DBrq3agd5g+ldDKF425b6Qm4SXSER8ztYmS+xbz9PBiwELChlHju9okOn/gb+GW2EtnYiwcl8sQszdohnwXF1Sis3xKImtWBbDHPzxDzjj78mSNPxg9fpeBXPe+iA6w10mGFlr/U8Hr4YIob11gv15zDwn07fjhalq+wW1nIU7K7sr26Wx+dh21Ax6LPVAqwtMUXqKHn/7Ta9Hia9JsJPTvi/yGjbHLMY92HszXc2CEIck0WJC9fJiATjTaaBduT76rtIMkps7ieyHWPRuZN0U9Rj2VlUehwdc1P1s8EOifNhr1jd6fpOHhzps5+TbX+sHPCbY67a61T/5L3HI7zyyQIZrr5H2StlR4jf3I+QDFTCvk63qzDv/jUzgfJs+dCB9D14q24BAwnGxblhssZ38mzSsmVSfSNwqZodqpmIq5281gN4xRxoqX7HFdboxKNavcz6+c+KYYka1dMl3Y8Dw4cT1l5oxPpjMEXOgVNtkfOqH6XE0G6uSsAtlhuqksj+htaKl2WwclYla5r2QKog4EdtQ5iANt0iLjsTFutuYdh05DL/OynH+Y8ZODnGl1IUwzYcme0j4Jpxfo8l8SJ5wt1cDYbpcWJNJhszVZukCiLWtmP5QfVIOX8/n0wSU3bbit7BHL39D/LOtbYcI1ApsYocewE2iWjG+bqc6IhY96AyRaXKxDf/qVHEbcEwCNykUZprBj34QNiniUA4nO/5C9O3n6+XF/vL8MAqOwpIr+hZL6/QP0Dmj6EB7wSH3pqje8EED8A2pi8Aiw4eceVDSitmLDx/llp1aKtXd25Rt2FXFaGtQimrKuMog6horR18tuSoxwVbg+y5RXkNX/ugmKjChmLMxXCCujPNtGj997RoM6wUNF3W33izP7nRpzEXaqkD3rJ2lN9hcYmQ9Kj/+XcDV3VKiG9sFnCRfUm2dEB3acJ6mtPOprllqpubZgLIsxV9Fm7JXe8BZVsjE8qKhHRGvkLe6nxKJ9/cCg1QsDfdZd1Ffp+ph11GejgFtk5kgdsgxqUULjJqRaKhqkbxidGyhNM9ReB71qOogGA342LcJ8ZAybdvooWNCAuWec4WeWEXfvfQiFER3IA2qX8XnenHV/Gd3RgAkcAa89C2g4MXSOS0Pr455hCO6G/rb4FvWVfostX2LM+Gl9Ujm5VwJs3xw2O1proJa1PufpU/tJnRZuSrUbZZd73wO/4gVZJkD0zZzk5rBX+XRbVEgQCJZrGeMcY0KB/mAH1bU7A/HPACJI1kU/4FfP4afLFu3zF8EReD64Lt5BuKh71TfqCmVYTK6zJt/iUA8FBsCEiF/lqHDCaXYgptriOojdTVa+DLSOwog8JiYMTo23NFQD/orj633Q9KdcxYWALMDccsaGyIPWNNWYNIOb3tpXTAF+hsxmrMiw9DUDj8MkYRtN2gbc7+mfU4USOGMczVEoCbkivW/j+HTc/K1J6wm47jgrQHBB/xgpubvJ7hcGGfalm2v5n1qRxrtWXBgclM2b6g3Hvnijmjf6eADq+OD1KP9xa1Nvfv+yXYpJLJeflsqGhQReirdcCq6nJlyOzz0PPHUvF0DrGVJ8Yb1xkXG"},"type":"StepFailed","step":"refuse"}','[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000000.0,1700000001.0,NULL,'{}');
INSERT INTO "runs" VALUES('entity:wallet-c2094cac629f6fbe','entity:wallet','1','default','completed','{"$enc":"k1","d":"FHQVg4aU6tYjtEmUJ0Dn7fXOqO4fesCN9NVxciQ="}',NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000001.0,1700000001.0,NULL,'{}');
INSERT INTO "runs" VALUES('plain-1','plain','','default','pending',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000001.0,1700000001.0,1700000001.0,'{}');
INSERT INTO "runs" VALUES('bare-1','plain','','default','pending',NULL,NULL,'[]',NULL,NULL,NULL,NULL,NULL,0,0,1700000001.0,1700000001.0,1700000001.0,'{}');
CREATE TABLE signal_waiters (
        token TEXT PRIMARY KEY,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL
    );
INSERT INTO "signal_waiters" VALUES('["waiting-1","first"]','waiting-1',1);
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
INSERT INTO "sqlite_sequence" VALUES('announcements',5);
COMMIT;

-- pgbench script: the PostgreSQL anchor, a durable insert-if-absent of a random 64-hex key.
INSERT INTO bench_claims (id) VALUES (md5(random()::text) || md5(random()::text)) ON CONFLICT DO NOTHING;

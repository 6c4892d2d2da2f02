-- The CDC role and a sample schema for the compose deployment's PostgreSQL source (runs once,
-- on an empty volume). wal_level=logical is a server option (compose.yaml, `command:`).
CREATE ROLE dblog LOGIN REPLICATION PASSWORD 'dblog';
GRANT CREATE ON DATABASE shop TO dblog;
CREATE SCHEMA shop AUTHORIZATION dblog;
SET ROLE dblog;
-- owned by dblog, so the source can create its publication for them
CREATE TABLE shop.customers (id bigint PRIMARY KEY, name text, email text, since date);
CREATE TABLE shop.orders (id bigint PRIMARY KEY, customer_id bigint, amount numeric(10,2), status text,
  created timestamptz DEFAULT now());
INSERT INTO shop.customers SELECT g, 'customer ' || g, 'c' || g || '@example.com', date '2020-01-01' + (g % 1000)
  FROM generate_series(1, 1000) g;
INSERT INTO shop.orders SELECT g, 1 + g % 1000, (g % 10000) / 100.0, 'new', now() FROM generate_series(1, 5000) g;
RESET ROLE;

-- The CDC user and a sample database for the compose deployment (runs once, on an empty volume).
-- The binlog settings themselves are server options (compose.yaml, `command:`).
CREATE USER IF NOT EXISTS 'dblog'@'%' IDENTIFIED BY 'dblog';
-- binlog: REPLICATION SLAVE + BINLOG MONITOR (MariaDB's REPLICATION CLIENT); the watermark
-- table lives in database `dblog`, created by the source on first start.
GRANT REPLICATION SLAVE, BINLOG MONITOR, RELOAD ON *.* TO 'dblog'@'%';
GRANT SELECT ON *.* TO 'dblog'@'%';
GRANT ALL PRIVILEGES ON dblog.* TO 'dblog'@'%';
CREATE DATABASE IF NOT EXISTS shop;
CREATE TABLE IF NOT EXISTS shop.customers (id bigint PRIMARY KEY, name varchar(100), email varchar(100), since date);
CREATE TABLE IF NOT EXISTS shop.orders (id bigint PRIMARY KEY, customer_id bigint, amount decimal(10,2),
  status varchar(20), created timestamp(6) DEFAULT CURRENT_TIMESTAMP(6));
INSERT IGNORE INTO shop.customers
  SELECT seq, CONCAT('customer ', seq), CONCAT('c', seq, '@example.com'), DATE('2020-01-01') + INTERVAL (seq % 1000) DAY
  FROM seq_1_to_1000;
INSERT IGNORE INTO shop.orders (id, customer_id, amount, status)
  SELECT seq, 1 + seq % 1000, (seq % 10000) / 100, 'new' FROM seq_1_to_5000;

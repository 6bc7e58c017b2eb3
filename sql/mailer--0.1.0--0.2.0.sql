-- mailer 0.1.0 -> 0.2.0: upgrade script.
-- Every change to the catalog or the SQL surface in 0.2.0 is made here too,
-- so that ALTER EXTENSION mailer UPDATE gives what a fresh install has.
\echo Use "ALTER EXTENSION mailer UPDATE TO '0.2.0'" to load this file. \quit

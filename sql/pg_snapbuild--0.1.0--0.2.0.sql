-- pg_snapbuild 0.1.0 -> 0.2.0 (ALTER EXTENSION pg_snapbuild UPDATE TO '0.2.0').
--
-- Nothing to change in the database. 0.2.0 only moved the REVOKE/GRANT block from src/lib.rs
-- to sql/privileges.sql and started versioned install scripts. The install scripts that
-- `cargo pgrx schema` generates for 0.1.0 (frozen as sql/pg_snapbuild--0.1.0.sql) and for 0.2.0
-- differ in comments only: the same 11 functions with the same signatures, defaults, result
-- columns, attributes, C symbols and privileges. pgrx-tests/regress/sql/upgrade.sql checks that
-- an updated 0.1.0 equals a fresh 0.2.0 install.
\echo Use "ALTER EXTENSION pg_snapbuild UPDATE TO '0.2.0'" to load this file. \quit

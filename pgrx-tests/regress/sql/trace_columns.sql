-- snapbuild_trace (a slot) and snapbuild_trace_range (an LSN range) return the same
-- rows: their OUT columns must agree in order, name and type.
CREATE TEMP VIEW trace_out_columns AS
SELECT p.proname, row_number() OVER (PARTITION BY p.oid ORDER BY a.ord) AS n,
       a.name, format_type(a.typ, NULL) AS type
FROM pg_proc p,
     LATERAL unnest(p.proargnames, p.proallargtypes, p.proargmodes)
             WITH ORDINALITY AS a(name, typ, mode, ord)
WHERE p.proname IN ('snapbuild_trace', 'snapbuild_trace_range')
  AND a.mode IN ('t', 'o');
-- columns of one that the other lacks (position, name, type): none
(SELECT n, name, type FROM trace_out_columns WHERE proname = 'snapbuild_trace'
 EXCEPT
 SELECT n, name, type FROM trace_out_columns WHERE proname = 'snapbuild_trace_range')
UNION ALL
(SELECT n, name, type FROM trace_out_columns WHERE proname = 'snapbuild_trace_range'
 EXCEPT
 SELECT n, name, type FROM trace_out_columns WHERE proname = 'snapbuild_trace');
-- and the number of columns of each
SELECT proname, count(*) AS columns FROM trace_out_columns GROUP BY proname ORDER BY proname;

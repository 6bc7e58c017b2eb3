/*
 * job_topology.h
 *		A job's topology for /api/jobs/<name>: its stages (source, steps,
 *		key_by, window, aggregate, sink) with a label each and their in/out
 *		counters, as one SQL expression over the job's row of mailer.jobs j
 *		and of mailer.metrics m.
 *
 * A stage is there only when the spec has it.  The counters follow from
 * records_in = accepted + filtered + dead_lettered + skipped + late: the
 * stateless steps pass records_in − filtered − dead_lettered − skipped,
 * the window drops the late ones, and the aggregate and the sink write
 * records_out.  Labels name the source's topics, the steps, the key's
 * fields, the window, the aggregates' functions and the sink's table or
 * topic: never a secret, which the stored spec has masked anyway.
 */
#ifndef JOB_TOPOLOGY_H
#define JOB_TOPOLOGY_H

#define TOPOLOGY_SQL \
	"(WITH c AS (SELECT j.spec AS spec, m.records_in AS rin, m.records_late AS late, " \
	"                   m.records_out AS rout, " \
	"                   m.records_in - m.records_filtered - m.records_dead_lettered " \
	"                     - m.records_skipped AS steps_out, " \
	"                   (SELECT count(*) FROM mailer.partition_metrics p " \
	"                     WHERE p.name = j.name) AS npartitions), " \
	"      steps AS (SELECT e.ord, k.key AS kind, k.value AS def " \
	"                  FROM c, jsonb_array_elements(c.spec -> 'steps') WITH ORDINALITY e(step, ord), " \
	"                       jsonb_each(e.step) k), " \
	"      stages AS ( " \
	"        SELECT 1 AS ord, json_build_object('stage', 'source', 'label', " \
	"                 CASE c.spec -> 'source' ->> 'type' " \
	"                   WHEN 'kafka' THEN 'kafka: ' || coalesce(c.spec -> 'source' ->> 'topic', " \
	"                     (SELECT string_agg(t, ', ') FROM jsonb_array_elements_text(c.spec -> 'source' -> 'topics') t)) " \
	"                     || CASE WHEN c.npartitions > 0 THEN ' (' || c.npartitions || ' partitions)' ELSE '' END " \
	"                   ELSE c.spec -> 'source' ->> 'type' END, " \
	"                 'in', NULL, 'out', c.rin) AS stage FROM c " \
	"        UNION ALL " \
	"        SELECT 2, json_build_object('stage', 'steps', 'label', string_agg(s.kind, ', ' ORDER BY s.ord), " \
	"                 'in', min(c.rin), 'out', min(c.steps_out), 'dropped', min(c.rin - c.steps_out)) " \
	"          FROM c, steps s WHERE s.kind IN ('filter', 'map', 'flat_map') HAVING count(*) > 0 " \
	"        UNION ALL " \
	"        SELECT 3, json_build_object('stage', 'key_by', " \
	"                 'label', (SELECT string_agg(f, ', ') FROM jsonb_object_keys(s.def) f), " \
	"                 'in', c.steps_out, 'out', c.steps_out) " \
	"          FROM c, steps s WHERE s.kind = 'key_by' " \
	"        UNION ALL " \
	"        SELECT 4, json_build_object('stage', 'window', " \
	"                 'label', concat_ws(' ', s.def ->> 'type', coalesce(s.def ->> 'size', s.def ->> 'gap'), " \
	"                                    'slide ' || (s.def ->> 'slide')), " \
	"                 'in', c.steps_out, 'out', c.steps_out - c.late, 'late', c.late) " \
	"          FROM c, steps s WHERE s.kind = 'window' " \
	"        UNION ALL " \
	"        SELECT 5, json_build_object('stage', 'aggregate', " \
	"                 'label', (SELECT string_agg(DISTINCT lower(substring(a.value FROM '^\\s*(\\w+)')), ', ') " \
	"                             FROM jsonb_each_text(s.def) a), " \
	"                 'in', c.steps_out - c.late, 'out', c.rout) " \
	"          FROM c, steps s WHERE s.kind = 'aggregate' " \
	"        UNION ALL " \
	"        SELECT 6, json_build_object('stage', 'sink', 'label', " \
	"                 concat_ws(' ', c.spec -> 'sink' ->> 'type', " \
	"                           coalesce(c.spec -> 'sink' ->> 'table', c.spec -> 'sink' ->> 'topic'), " \
	"                           '(' || (c.spec -> 'sink' ->> 'mode') || ')'), " \
	"                 'in', c.rout, 'out', c.rout) FROM c) " \
	"  SELECT json_agg(stage ORDER BY ord) FROM stages)"

#endif							/* JOB_TOPOLOGY_H */

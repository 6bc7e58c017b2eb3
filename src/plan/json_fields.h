/*
 * json_fields.h
 *		Reading a JSON message's top-level fields without building jsonb:
 *		the plan's side.
 *
 * When a job uses its jsonb value only as value->>'key' and value->'key',
 * those expressions are replaced by fields filled straight from the JSON
 * text (json_scan.h): one pass that validates the whole message (so
 * invalid JSON is still a decode error) and copies out only the fields the
 * job reads.  Results are those of the jsonb operators.
 */
#ifndef JSON_FIELDS_H
#define JSON_FIELDS_H

#include "plan/json_scan.h"
#include "plan/plan.h"

/*
 * If every use of the jsonb value in the plan is a field access by a
 * constant key, rewrite them into fields and return what to extract;
 * otherwise NULL and the plan is unchanged.
 */
extern JsonFields *json_fields_plan(JobPlan *plan);

#endif							/* JSON_FIELDS_H */

/*
 * job_counters.c
 *		A job's counters as jsonb (job_counters.h).
 */
#include "postgres.h"

#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "base/jsonb_build.h"
#include "jobs/job_counters.h"

const char *const job_counter_names[JC_NUM_COUNTERS] = {
	"records_in",
	"records_accepted",
	"records_filtered",
	"records_dead_lettered",
	"records_skipped",
	"records_late",
	"records_out",
	"checkpoints",
	"last_cut_epoch",
	"cut_decided_epoch",
	"cuts_skipped",
	"cut_held_ms",
	"cut_rewinds",
	"cuts_partial",
	"cut_records_malformed",
	"cut_holding_epoch"
};

Datum
job_counters_jsonb(const uint64 *counters)
{
	JsonbParseState *state = NULL;
	JsonbValue	v;

	(void) pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	for (int c = 0; c < JC_NUM_COUNTERS; c++)
	{
		jsonb_push_key(&state, job_counter_names[c]);
		/* A numeric read from the counter's digits, as jsonb_in would. */
		v.type = jbvNumeric;
		v.val.numeric = DatumGetNumeric(DirectFunctionCall3(numeric_in,
															CStringGetDatum(psprintf(UINT64_FORMAT, counters[c])),
															ObjectIdGetDatum(InvalidOid),
															Int32GetDatum(-1)));
		(void) pushJsonbValue(&state, WJB_VALUE, &v);
	}
	return JsonbPGetDatum(JsonbValueToJsonb(pushJsonbValue(&state, WJB_END_OBJECT, NULL)));
}

/*
 * agg_general.c
 *		Any aggregate, run by its own transition, combine, serialize and
 *		final functions (agg_general.h).
 *
 * The functions are called the way nodeAgg.c calls them: in the context
 * of an AggState (a stand-in of our own, whose aggregate memory is this
 * file's), with the strictness rules of advance_transition_function, so
 * that the functions that modify their state in place or keep it in
 * "internal" memory work unchanged.  The state between calls is kept in
 * one of the forms aggregate_call.h names (docs/ARCHITECTURE.md, "Any
 * aggregate"):
 *
 *	value	the transition value itself, owned by the AggValue;
 *	serial	an internal state's serialfn bytes: each record deserializes,
 *			advances and serializes again;
 *	inputs	the key's inputs (an InputLog): replayed, sorted and made
 *			distinct as the call asks, when the result is made.
 *
 * A record's change is computed apart from the state (next, merge) and
 * kept by store, which does not fail: a record that fails changes nothing.
 */
#include "postgres.h"

#include "access/transam.h"
#include "catalog/pg_type.h"
#include "executor/nodeAgg.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/expandeddatum.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/sortsupport.h"

#include "base/mailer.h"
#include "operators/agg_general.h"
#include "plan/aggregate_call.h"
#include "state/serial.h"

/* The inputs a key has given (AGG_FORM_INPUTS), each a packed bytea. */
typedef struct InputLog
{
	int			n;
	int			cap;
	Size		bytes;			/* of the entries, as the state limit counts them */
	struct varlena **entries;
} InputLog;

/* What running one aggregate needs in this process, made at its first use. */
typedef struct AggRun
{
	AggState   *aggstate;		/* the stand-in the functions see as fcinfo->context */
	MemoryContext trans_ctx;	/* the aggregate memory: the state being worked on */
	MemoryContext call_ctx;		/* one call's garbage */
	int16		result_typlen;
	bool		result_typbyval;
	SortSupportData *sort;		/* per sort key */
	/* a record's values, unpacked */
	Datum	   *values;
	bool	   *nulls;
	StringInfoData pack;		/* agg_general_pack's buffer */
} AggRun;

/* A kept input and its place in the log: equal ones keep their arrival order when sorted. */
typedef struct SortedInput
{
	struct varlena *entry;
	int			place;
} SortedInput;

/* A transition state being worked on, as nodeAgg.c's pergroup state. */
typedef struct TransState
{
	Datum		value;
	bool		isnull;
	bool		no_value;		/* a strict transition function's null initial value: the first input is it */
} TransState;

static AggRun *agg_run(AggregateDef *agg);
static void trans_begin(GeneralAggDef *g, AggRun *run, const AggValue *value, TransState *ts);
static void validate_input(GeneralAggDef *g, AggRun *run, struct varlena *entry);
static void result_error_context(void *arg);
static void trans_advance(GeneralAggDef *g, AggRun *run, TransState *ts, Datum *args, bool *nulls);
static void trans_end(AggregateDef *agg, AggRun *run, TransState *ts, AggValue *next);
static Datum trans_final(GeneralAggDef *g, AggRun *run, TransState *ts, bool *isnull);
static void trans_combine(GeneralAggDef *g, AggRun *run, TransState *into, TransState *from);
static void unpack(GeneralAggDef *g, AggRun *run, struct varlena *packed, int upto);
static int	entry_cmp(GeneralAggDef *g, AggRun *run, struct varlena *a, struct varlena *b);
static int	sorted_input_cmp(const void *a, const void *b, void *arg);
static int	log_find(GeneralAggDef *g, AggRun *run, InputLog *log, struct varlena *entry, bool *found);
static void log_insert(InputLog *log, int pos, struct varlena *entry, MemoryContext ctx);
static InputLog *log_copy(const InputLog *log, MemoryContext ctx);
static void log_free(InputLog *log);
static void check_limit(AggregateDef *agg, Size bytes);

Datum
agg_general_pack(AggregateDef *agg, ExprRuntime *rt, Record *rec, bool *isnull)
{
	GeneralAggDef *g = agg->general;
	StringInfo	buf;
	char	   *packed;

	if (g->filter)
	{
		bool		fnull;
		Datum		pass = expr_eval(g->filter, rt, rec, &fnull);

		if (fnull || !DatumGetBool(pass))
		{
			*isnull = true;
			return (Datum) 0;
		}
	}
	/* built in the run's buffer, returned as a copy of its size */
	buf = &agg_run(agg)->pack;
	resetStringInfo(buf);
	appendStringInfoSpaces(buf, VARHDRSZ);
	for (int i = 0; i < g->ninputs; i++)
	{
		bool		null;
		Datum		d = expr_eval(g->inputs[i], rt, rec, &null);
		char		flag = null ? 1 : 0;

		serial_put(buf, &flag, 1);
		if (!null)
			serial_put_datum(buf, d, g->input_typlen[i], g->input_typbyval[i]);
	}
	SET_VARSIZE(buf->data, buf->len);
	packed = palloc(buf->len);
	memcpy(packed, buf->data, buf->len);
	*isnull = false;
	return PointerGetDatum(packed);
}

void
agg_general_next(AggregateDef *agg, const AggValue *value, AggValue *next, Datum packed)
{
	GeneralAggDef *g = agg->general;
	AggRun	   *run = agg_run(agg);
	struct varlena *entry = (struct varlena *) DatumGetPointer(packed);
	TransState	ts;

	*next = *value;
	/* A strict transition function never sees a null argument: the record is skipped. */
	unpack(g, run, entry, g->ninputs);
	if (g->transfn.fn_strict)
		for (int i = 0; i < g->ntransargs; i++)
			if (run->nulls[i])
				return;

	if (g->form == AGG_FORM_INPUTS)
	{
		InputLog   *log = (InputLog *) DatumGetPointer(value->v.datum);
		int			pos = log ? log->n : 0;

		if (g->distinct && log)
		{
			bool		found;

			pos = log_find(g, run, log, entry, &found);
			if (found)
				return;
		}
		check_limit(agg, (log ? log->bytes : 0) + VARSIZE(entry));
		validate_input(g, run, entry);
		next->pending = entry;
		next->scale = pos;		/* where store puts it */
		next->count = value->count + 1;
		return;
	}

	MemoryContextReset(run->trans_ctx);
	trans_begin(g, run, value, &ts);
	trans_advance(g, run, &ts, run->values, run->nulls);
	trans_end(agg, run, &ts, next);
	next->count = value->count + 1;
}

/*
 * Kept inputs meet the transition function only when a result is made, at
 * a checkpoint or a window's end, where no record answers for an error: a
 * record a built-in function refuses on its own (jsonb_object_agg's null
 * key, array_agg's null array) must fail now, as the record's own error.
 * So the input goes through the transition function once, from the
 * initial state.  Only a built-in one: a user's may accept an input only
 * after others (ORDER BY makes that meaningful), or do something each time
 * it runs; its errors come at the result (docs/ARCHITECTURE.md, "Any
 * aggregate").
 */
static void
validate_input(GeneralAggDef *g, AggRun *run, struct varlena *entry)
{
	AggValue	empty = {0};
	TransState	ts;

	if (g->transfn.fn_oid >= FirstGenbkiObjectId)
		return;
	unpack(g, run, entry, g->ntransargs);
	MemoryContextReset(run->trans_ctx);
	trans_begin(g, run, &empty, &ts);
	trans_advance(g, run, &ts, run->values, run->nulls);
	MemoryContextReset(run->trans_ctx);
}

void
agg_general_merge(AggregateDef *agg, const AggValue *into, const AggValue *from, AggValue *next)
{
	GeneralAggDef *g = agg->general;
	AggRun	   *run = agg_run(agg);
	AggValue	r = *into;

	if (g->form == AGG_FORM_INPUTS)
	{
		/*
		 * A new log of both sides' inputs (each side's log, then its
		 * pending input), pointing at theirs: neither side is changed, and
		 * store copies what it keeps.
		 */
		const AggValue *sides[2] = {into, from};
		InputLog   *log = palloc0(sizeof(InputLog));

		for (int s = 0; s < 2; s++)
		{
			InputLog   *l = (InputLog *) DatumGetPointer(sides[s]->v.datum);
			int			n = l ? l->n : 0;

			for (int i = 0; i <= n; i++)
			{
				struct varlena *entry = i < n ? l->entries[i] : sides[s]->pending;
				bool		found = false;
				int			pos = log->n;

				if (entry == NULL)
					continue;
				if (g->distinct)
					pos = log_find(g, run, log, entry, &found);
				if (!found)
					log_insert(log, pos, entry, NULL);
			}
		}
		check_limit(agg, log->bytes);
		r.v.datum = PointerGetDatum(log);
		r.pending = NULL;
		r.count = into->count + from->count;
		*next = r;
		return;
	}

	{
		TransState	a;
		TransState	b;

		MemoryContextReset(run->trans_ctx);
		trans_begin(g, run, into, &a);
		trans_begin(g, run, from, &b);
		trans_combine(g, run, &a, &b);
		trans_end(agg, run, &a, &r);
		r.count = into->count + from->count;
		*next = r;
	}
}

/*
 * Keep next in value: by-reference data copied into ctx, the old freed;
 * an input pending (agg_general_next) added to the value's own log.
 */
void
agg_general_store(AggregateDef *agg, AggValue *value, const AggValue *next, MemoryContext ctx)
{
	GeneralAggDef *g = agg->general;
	Datum		old = value->v.datum;
	bool		owned_old = old != (Datum) 0 && !value->transnull &&
		(g->form != AGG_FORM_VALUE || !g->transtypbyval);

	if (g->form == AGG_FORM_INPUTS)
	{
		InputLog   *log = (InputLog *) DatumGetPointer(next->v.datum);

		if (next->v.datum != old)
		{
			/* a merged log, in other memory: the value's own copy */
			log = log ? log_copy(log, ctx) : NULL;
			if (old)
				log_free((InputLog *) DatumGetPointer(old));
		}
		if (next->pending)
		{
			if (log == NULL)
			{
				log = MemoryContextAllocZero(ctx, sizeof(InputLog));
				log_insert(log, 0, next->pending, ctx);
			}
			else
				log_insert(log, Min(next->scale, log->n), next->pending, ctx);
		}
		*value = *next;
		value->v.datum = PointerGetDatum(log);
		value->pending = NULL;
		value->scale = 0;
		return;
	}

	*value = *next;
	if (!next->transnull && next->v.datum != (Datum) 0 &&
		(g->form == AGG_FORM_SERIAL || !g->transtypbyval) && next->v.datum != old)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(ctx);

		value->v.datum = g->form == AGG_FORM_SERIAL ?
			PointerGetDatum(PG_DETOAST_DATUM_COPY(next->v.datum)) :
			datumCopy(next->v.datum, false, g->transtyplen);
		MemoryContextSwitchTo(oldcxt);
	}
	if (owned_old && value->v.datum != old)
		pfree(DatumGetPointer(old));
}

Datum
agg_general_result(AggregateDef *agg, AggValue *value, bool *isnull)
{
	GeneralAggDef *g = agg->general;
	AggRun	   *run = agg_run(agg);
	MemoryContext out = CurrentMemoryContext;
	TransState	ts;
	Datum		result;
	ErrorContextCallback errcallback;

	/* an error here is no record's: say which aggregate it was */
	errcallback.callback = result_error_context;
	errcallback.arg = agg;
	errcallback.previous = error_context_stack;
	error_context_stack = &errcallback;
	MemoryContextReset(run->trans_ctx);
	if (g->form == AGG_FORM_INPUTS)
	{
		InputLog   *log = (InputLog *) DatumGetPointer(value->v.datum);
		int			n = log ? log->n : 0;
		SortedInput *order = MemoryContextAlloc(run->trans_ctx, sizeof(SortedInput) * Max(n, 1));
		AggValue	empty = {0};

		trans_begin(g, run, &empty, &ts);
		for (int i = 0; i < n; i++)
		{
			order[i].entry = log->entries[i];
			order[i].place = i;
		}
		/* DISTINCT logs are kept in order; ORDER BY alone sorts them now */
		if (!g->distinct && g->nsortkeys > 0)
			qsort_arg(order, n, sizeof(SortedInput), sorted_input_cmp, agg);
		for (int i = 0; i < n; i++)
		{
			MemoryContext old = MemoryContextSwitchTo(run->call_ctx);

			CHECK_FOR_INTERRUPTS();
			unpack(g, run, order[i].entry, g->ntransargs);
			MemoryContextSwitchTo(old);
			/* strict: null inputs were never logged */
			trans_advance(g, run, &ts, run->values, run->nulls);
			MemoryContextReset(run->call_ctx);
		}
	}
	else
		trans_begin(g, run, value, &ts);

	result = trans_final(g, run, &ts, isnull);
	if (!*isnull)
	{
		MemoryContext old = MemoryContextSwitchTo(out);

		result = datumCopy(result, run->result_typbyval, run->result_typlen);
		MemoryContextSwitchTo(old);
	}
	MemoryContextReset(run->call_ctx);
	MemoryContextReset(run->trans_ctx);
	error_context_stack = errcallback.previous;
	return result;
}

static void
result_error_context(void *arg)
{
	AggregateDef *agg = arg;

	errcontext("making the result of aggregate \"%s\" (%s) from a key's state", agg->name, agg->text);
}

void
agg_general_serialize(AggregateDef *agg, AggValue *value, StringInfo buf)
{
	GeneralAggDef *g = agg->general;
	char		flag = value->transnull ? 1 : 0;

	Assert(value->pending == NULL);
	serial_put(buf, &value->count, sizeof(int64));
	if (value->count == 0)
		return;
	if (g->form == AGG_FORM_INPUTS)
	{
		InputLog   *log = (InputLog *) DatumGetPointer(value->v.datum);
		int32		n = log ? log->n : 0;

		serial_put(buf, &n, sizeof(int32));
		for (int i = 0; i < n; i++)
			serial_put_datum(buf, PointerGetDatum(log->entries[i]), -1, false);
		return;
	}
	serial_put(buf, &flag, 1);
	if (value->transnull)
		return;
	if (g->form == AGG_FORM_SERIAL)
		serial_put_datum(buf, value->v.datum, -1, false);
	else
	{
		bytea	   *sent = SendFunctionCall(&g->sendfn, value->v.datum);

		serial_put_datum(buf, PointerGetDatum(sent), -1, false);
		pfree(sent);
	}
}

void
agg_general_deserialize(AggregateDef *agg, AggValue *value, const char *data, int len,
						int *pos, MemoryContext ctx)
{
	GeneralAggDef *g = agg->general;
	char		flag;

	memset(value, 0, sizeof(AggValue));
	serial_get(data, len, pos, &value->count, sizeof(int64));
	if (value->count == 0)
		return;
	if (g->form == AGG_FORM_INPUTS)
	{
		int32		n;
		InputLog   *log;

		serial_get(data, len, pos, &n, sizeof(int32));
		if (n < 0 || n > len)
			serial_corrupted(len, *pos, n);
		log = MemoryContextAllocZero(ctx, sizeof(InputLog));
		for (int i = 0; i < n; i++)
		{
			MemoryContext old = MemoryContextSwitchTo(ctx);

			/* read into ctx, kept as it is */
			log_insert(log, log->n,
					   (struct varlena *) DatumGetPointer(serial_get_datum(data, len, pos, -1, false, ctx)),
					   NULL);
			MemoryContextSwitchTo(old);
		}
		value->v.datum = PointerGetDatum(log);
		return;
	}
	serial_get(data, len, pos, &flag, 1);
	value->transnull = flag != 0;
	if (value->transnull)
		return;
	if (g->form == AGG_FORM_SERIAL)
		value->v.datum = serial_get_datum(data, len, pos, -1, false, ctx);
	else
	{
		AggRun	   *run = agg_run(agg);
		MemoryContext old = MemoryContextSwitchTo(run->call_ctx);
		bytea	   *sent = (bytea *) DatumGetPointer(serial_get_datum(data, len, pos, -1, false,
																	 run->call_ctx));
		StringInfoData in;
		Datum		d;

		/* receive functions read a StringInfo ending in a zero byte */
		initStringInfo(&in);
		appendBinaryStringInfo(&in, VARDATA(sent), VARSIZE(sent) - VARHDRSZ);
		d = ReceiveFunctionCall(&g->recvfn, &in, g->recv_ioparam, -1);
		if (in.cursor != in.len)
			serial_corrupted(len, *pos, 0);
		MemoryContextSwitchTo(ctx);
		value->v.datum = datumCopy(d, g->transtypbyval, g->transtyplen);
		MemoryContextSwitchTo(old);
		MemoryContextReset(run->call_ctx);
	}
}

/* ---- calling the aggregate's functions ---- */

static AggRun *
agg_run(AggregateDef *agg)
{
	GeneralAggDef *g = agg->general;
	MemoryContext ctx;
	MemoryContext old;
	AggRun	   *run;
	ExprContext *econtext;
	ExprContext *tmpcontext;

	if (agg->run)
		return (AggRun *) agg->run;
	/* As long as the plan: the plan's memory */
	ctx = GetMemoryChunkContext(g);
	old = MemoryContextSwitchTo(ctx);
	run = palloc0(sizeof(AggRun));
	run->trans_ctx = AllocSetContextCreate(ctx, "mailer aggregate state", ALLOCSET_DEFAULT_SIZES);
	run->call_ctx = AllocSetContextCreate(ctx, "mailer aggregate call", ALLOCSET_DEFAULT_SIZES);
	econtext = makeNode(ExprContext);
	econtext->ecxt_per_tuple_memory = run->trans_ctx;
	econtext->ecxt_per_query_memory = run->trans_ctx;
	tmpcontext = makeNode(ExprContext);
	tmpcontext->ecxt_per_tuple_memory = run->call_ctx;
	tmpcontext->ecxt_per_query_memory = run->call_ctx;
	run->aggstate = makeNode(AggState);
	run->aggstate->aggcontexts = palloc(sizeof(ExprContext *));
	run->aggstate->aggcontexts[0] = econtext;
	run->aggstate->curaggcontext = econtext;
	run->aggstate->tmpcontext = tmpcontext;
	run->aggstate->numaggs = 1;
	run->aggstate->numtrans = 1;
	/* AggGetAggref's answer; not shared (AggStateIsShared): the state is ours alone */
	run->aggstate->curpertrans = palloc0(sizeof(AggStatePerTransData));
	run->aggstate->curpertrans->aggref = g->aggref;
	run->aggstate->curpertrans->aggshared = false;
	get_typlenbyval(agg->result_type, &run->result_typlen, &run->result_typbyval);
	run->values = palloc0(sizeof(Datum) * Max(g->ninputs, 1));
	run->nulls = palloc0(sizeof(bool) * Max(g->ninputs, 1));
	initStringInfo(&run->pack);
	run->sort = palloc0(sizeof(SortSupportData) * Max(g->nsortkeys, 1));
	for (int k = 0; k < g->nsortkeys; k++)
	{
		SortSupport ssup = &run->sort[k];

		ssup->ssup_cxt = ctx;
		ssup->ssup_collation = g->sortkeys[k].collation;
		ssup->ssup_nulls_first = g->sortkeys[k].nulls_first;
		ssup->abbreviate = false;
		PrepareSortSupportFromOrderingOp(g->sortkeys[k].sort_op, ssup);
	}
	MemoryContextSwitchTo(old);
	agg->run = run;
	return run;
}

/*
 * The state of value (or the initial one when it has seen no input), in
 * trans_ctx where the functions may change it in place.
 */
static void
trans_begin(GeneralAggDef *g, AggRun *run, const AggValue *value, TransState *ts)
{
	MemoryContext old = MemoryContextSwitchTo(run->trans_ctx);

	ts->no_value = false;
	if (value->count == 0 || g->form == AGG_FORM_INPUTS)
	{
		ts->isnull = g->initval_text == NULL;
		ts->value = (Datum) 0;
		if (!ts->isnull)
		{
			Oid			typinput;
			Oid			ioparam;

			getTypeInputInfo(g->transtype, &typinput, &ioparam);
			ts->value = OidInputFunctionCall(typinput, g->initval_text, ioparam, -1);
		}
		/* nodeAgg.c's noTransValue: a strict function's first input becomes the state */
		ts->no_value = ts->isnull && g->transfn.fn_strict;
	}
	else if ((ts->isnull = value->transnull))
		ts->value = (Datum) 0;
	else if (g->form == AGG_FORM_SERIAL)
	{
		LOCAL_FCINFO(fcinfo, 2);

		InitFunctionCallInfoData(*fcinfo, (FmgrInfo *) &g->deserialfn, 2, InvalidOid,
								 (Node *) run->aggstate, NULL);
		fcinfo->args[0].value = value->v.datum;
		fcinfo->args[0].isnull = false;
		fcinfo->args[1].value = (Datum) 0;
		fcinfo->args[1].isnull = false;
		ts->value = FunctionCallInvoke(fcinfo);
		ts->isnull = fcinfo->isnull;
	}
	else
		ts->value = datumCopy(value->v.datum, g->transtypbyval, g->transtyplen);
	MemoryContextSwitchTo(old);
}

/* advance_transition_function of nodeAgg.c, for one input */
static void
trans_advance(GeneralAggDef *g, AggRun *run, TransState *ts, Datum *args, bool *nulls)
{
	LOCAL_FCINFO(fcinfo, FUNC_MAX_ARGS);
	MemoryContext old;
	Datum		result;

	if (g->transfn.fn_strict)
	{
		for (int i = 0; i < g->ntransargs; i++)
			if (nulls[i])
				return;
		if (ts->no_value)
		{
			old = MemoryContextSwitchTo(run->trans_ctx);
			ts->value = datumCopy(args[0], g->transtypbyval, g->transtyplen);
			MemoryContextSwitchTo(old);
			ts->isnull = false;
			ts->no_value = false;
			return;
		}
		if (ts->isnull)
			return;
	}
	InitFunctionCallInfoData(*fcinfo, (FmgrInfo *) &g->transfn, g->ntransargs + 1, g->inputcollid,
							 (Node *) run->aggstate, NULL);
	fcinfo->args[0].value = ts->value;
	fcinfo->args[0].isnull = ts->isnull;
	for (int i = 0; i < g->ntransargs; i++)
	{
		fcinfo->args[i + 1].value = args[i];
		fcinfo->args[i + 1].isnull = nulls[i];
	}
	old = MemoryContextSwitchTo(run->call_ctx);
	result = FunctionCallInvoke(fcinfo);
	MemoryContextSwitchTo(old);

	/* A new by-reference value goes to the aggregate memory, the old one is freed. */
	if (!g->transtypbyval && DatumGetPointer(result) != DatumGetPointer(ts->value))
	{
		if (!fcinfo->isnull)
		{
			if (DatumIsReadWriteExpandedObject(result, false, g->transtyplen) &&
				MemoryContextGetParent(DatumGetEOHP(result)->eoh_context) == run->trans_ctx)
				 /* already ours */ ;
			else
			{
				old = MemoryContextSwitchTo(run->trans_ctx);
				result = datumCopy(result, false, g->transtyplen);
				MemoryContextSwitchTo(old);
			}
		}
		if (!ts->isnull)
		{
			if (DatumIsReadWriteExpandedObject(ts->value, false, g->transtyplen))
				DeleteExpandedObject(ts->value);
			else
				pfree(DatumGetPointer(ts->value));
		}
	}
	ts->value = result;
	ts->isnull = fcinfo->isnull;
	MemoryContextReset(run->call_ctx);
}

/* Two states into one, as nodeAgg.c's combine step does (the parallel aggregate's). */
static void
trans_combine(GeneralAggDef *g, AggRun *run, TransState *into, TransState *from)
{
	LOCAL_FCINFO(fcinfo, 2);
	MemoryContext old;
	Datum		result;

	if (g->combinefn.fn_strict)
	{
		if (from->isnull)
			return;
		/* nodeAgg.c calls no strict function with a null state: it stays null */
		if (into->isnull)
			return;
	}
	InitFunctionCallInfoData(*fcinfo, (FmgrInfo *) &g->combinefn, 2, g->inputcollid,
							 (Node *) run->aggstate, NULL);
	fcinfo->args[0].value = into->value;
	fcinfo->args[0].isnull = into->isnull;
	fcinfo->args[1].value = from->value;
	fcinfo->args[1].isnull = from->isnull;
	old = MemoryContextSwitchTo(run->trans_ctx);
	result = FunctionCallInvoke(fcinfo);
	MemoryContextSwitchTo(old);
	into->value = result;
	into->isnull = fcinfo->isnull;
}

/*
 * The state worked on, into next (in the current memory): the value, or
 * serialfn's bytes; ERROR past the state limit.
 */
static void
trans_end(AggregateDef *agg, AggRun *run, TransState *ts, AggValue *next)
{
	GeneralAggDef *g = agg->general;

	next->transnull = ts->isnull;
	next->pending = NULL;
	next->v.datum = (Datum) 0;
	if (ts->isnull)
		return;
	if (g->form == AGG_FORM_SERIAL)
	{
		LOCAL_FCINFO(fcinfo, 1);
		bytea	   *bytes;

		InitFunctionCallInfoData(*fcinfo, (FmgrInfo *) &g->serialfn, 1, InvalidOid,
								 (Node *) run->aggstate, NULL);
		fcinfo->args[0].value = ts->value;
		fcinfo->args[0].isnull = false;
		bytes = DatumGetByteaPP(FunctionCallInvoke(fcinfo));
		if (fcinfo->isnull)
		{
			next->transnull = true;
			return;
		}
		check_limit(agg, VARSIZE_ANY(bytes));
		next->v.datum = PointerGetDatum(PG_DETOAST_DATUM_COPY(PointerGetDatum(bytes)));
	}
	else if (g->transtypbyval)
		next->v.datum = ts->value;
	else
	{
		next->v.datum = datumCopy(ts->value, false, g->transtyplen);
		check_limit(agg, datumGetSize(next->v.datum, false, g->transtyplen));
	}
	MemoryContextReset(run->trans_ctx);
}

/* finalize_aggregate of nodeAgg.c: the final function, or the state itself */
static Datum
trans_final(GeneralAggDef *g, AggRun *run, TransState *ts, bool *isnull)
{
	LOCAL_FCINFO(fcinfo, FUNC_MAX_ARGS);
	int			nargs = 1 + (g->finalextra ? g->ntransargs : 0);
	Datum		result;
	MemoryContext old;

	if (!OidIsValid(g->finalfn.fn_oid))
	{
		*isnull = ts->isnull;
		return ts->value;
	}
	InitFunctionCallInfoData(*fcinfo, (FmgrInfo *) &g->finalfn, nargs, g->inputcollid,
							 (Node *) run->aggstate, NULL);
	fcinfo->args[0].value = ts->value;
	fcinfo->args[0].isnull = ts->isnull;
	for (int i = 1; i < nargs; i++)
	{
		fcinfo->args[i].value = (Datum) 0;
		fcinfo->args[i].isnull = true;
	}
	if (g->finalfn.fn_strict && (ts->isnull || nargs > 1))
	{
		*isnull = true;
		return (Datum) 0;
	}
	old = MemoryContextSwitchTo(run->call_ctx);
	result = FunctionCallInvoke(fcinfo);
	MemoryContextSwitchTo(old);
	*isnull = fcinfo->isnull;
	return result;
}

/* A record's values (the first upto of them), into run->values and nulls, in the current memory. */
static void
unpack(GeneralAggDef *g, AggRun *run, struct varlena *packed, int upto)
{
	const char *data = VARDATA(packed);
	int			len = VARSIZE(packed) - VARHDRSZ;
	int			pos = 0;

	for (int i = 0; i < upto; i++)
	{
		char		flag;

		serial_get(data, len, &pos, &flag, 1);
		run->nulls[i] = flag != 0;
		run->values[i] = run->nulls[i] ? (Datum) 0 :
			serial_get_datum(data, len, &pos, g->input_typlen[i], g->input_typbyval[i],
							 CurrentMemoryContext);
	}
}

/* ---- the inputs of a key (AGG_FORM_INPUTS) ---- */

/* Two inputs in the order of the call's sort keys (DISTINCT or ORDER BY). */
static int
entry_cmp(GeneralAggDef *g, AggRun *run, struct varlena *a, struct varlena *b)
{
	int			cmp = 0;
	MemoryContext old = MemoryContextSwitchTo(run->call_ctx);
	Datum	   *va = palloc(sizeof(Datum) * Max(g->ninputs, 1));
	bool	   *na = palloc(sizeof(bool) * Max(g->ninputs, 1));

	unpack(g, run, a, g->ninputs);
	memcpy(va, run->values, sizeof(Datum) * g->ninputs);
	memcpy(na, run->nulls, sizeof(bool) * g->ninputs);
	unpack(g, run, b, g->ninputs);
	for (int k = 0; k < g->nsortkeys && cmp == 0; k++)
	{
		int			c = g->sortkeys[k].input;

		cmp = ApplySortComparator(va[c], na[c], run->values[c], run->nulls[c], &run->sort[k]);
	}
	MemoryContextSwitchTo(old);
	MemoryContextReset(run->call_ctx);
	return cmp;
}

/* qsort_arg's comparator of SortedInputs (arg: the AggregateDef): stable by place. */
static int
sorted_input_cmp(const void *a, const void *b, void *arg)
{
	AggregateDef *agg = arg;
	const SortedInput *x = a;
	const SortedInput *y = b;
	int			cmp = entry_cmp(agg->general, (AggRun *) agg->run, x->entry, y->entry);

	return cmp != 0 ? cmp : (x->place > y->place) - (x->place < y->place);
}

/* Where entry goes in a DISTINCT log (kept sorted); *found when an equal one is there. */
static int
log_find(GeneralAggDef *g, AggRun *run, InputLog *log, struct varlena *entry, bool *found)
{
	int			lo = 0;
	int			hi = log->n;

	*found = false;
	while (lo < hi)
	{
		int			mid = lo + (hi - lo) / 2;
		int			cmp = entry_cmp(g, run, log->entries[mid], entry);

		if (cmp == 0)
		{
			*found = true;
			return mid;
		}
		if (cmp < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * entry at pos: a copy in ctx, or (ctx NULL) the entry itself, the log's
 * array in the current memory.
 */
static void
log_insert(InputLog *log, int pos, struct varlena *entry, MemoryContext ctx)
{
	struct varlena *copy = entry;

	if (ctx)
	{
		copy = MemoryContextAlloc(ctx, VARSIZE(entry));
		memcpy(copy, entry, VARSIZE(entry));
	}
	if (log->n == log->cap)
	{
		int			cap = Max(8, log->cap * 2);

		log->entries = log->entries ?
			repalloc(log->entries, sizeof(struct varlena *) * cap) :
			MemoryContextAlloc(ctx ? ctx : CurrentMemoryContext, sizeof(struct varlena *) * cap);
		log->cap = cap;
	}
	memmove(log->entries + pos + 1, log->entries + pos, sizeof(struct varlena *) * (log->n - pos));
	log->entries[pos] = copy;
	log->n++;
	log->bytes += VARSIZE(entry);
}

static InputLog *
log_copy(const InputLog *log, MemoryContext ctx)
{
	InputLog   *copy = MemoryContextAllocZero(ctx, sizeof(InputLog));

	for (int i = 0; i < log->n; i++)
		log_insert(copy, copy->n, log->entries[i], ctx);
	return copy;
}

static void
log_free(InputLog *log)
{
	for (int i = 0; i < log->n; i++)
		pfree(log->entries[i]);
	if (log->entries)
		pfree(log->entries);
	pfree(log);
}

/*
 * A state past mailer.aggregate_state_limit is the record's error: a dead
 * letter or the job's failure, per on_error, and the key's state as it was.
 */
static void
check_limit(AggregateDef *agg, Size bytes)
{
	if (bytes <= (Size) mailer_aggregate_state_limit_kb * 1024)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("the state of aggregate \"%s\" for this key would take %zu kB, over mailer.aggregate_state_limit (%d kB)",
					agg->name, (bytes + 1023) / 1024, mailer_aggregate_state_limit_kb),
			 errdetail("The aggregate is %s.", agg->text),
			 errhint("Bound the state (a window, or an approximate aggregate such as hll_add_agg), or raise mailer.aggregate_state_limit.")));
}

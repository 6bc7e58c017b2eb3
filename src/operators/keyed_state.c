/*
 * keyed_state.c
 *		The keyed state's format (keyed_state.h).
 *
 * Format versions.  Every value this release writes starts with one byte,
 * KEYED_STATE_FORMAT; release 0.1.0 wrote the same values without it
 * (format 0).  The byte alone cannot tell the two apart: a 0.1.0 value
 * begins with a count or a time, which may hold any byte.  So the format
 * is recorded per checkpoint, in the first line of its state layout
 * ("format<TAB>1<TAB>..."): 0.1.0 recorded no layout, and layouts before
 * the format line existed none, so a checkpoint without the line holds
 * format 0.  A restore of such a checkpoint rewrites every value of the
 * opened state with the version byte before the stage reads any
 * (keyed_upgrade_state), so that a store never mixes formats: the next
 * checkpoint holds today's format alone, and says so.  Restoring the old
 * checkpoint again upgrades its state again.  Format 2 dropped the timer
 * keys of format 1 (its values are those of format 1): its upgrade deletes
 * them.  From then on, a value whose
 * byte is not 1 or KEYED_STATE_FORMAT (written by a later release, or damaged)
 * is refused with an error naming the job, the key and the version,
 * instead of being read as garbage; so is a checkpoint whose layout names
 * a format this release does not know.  The format covers the keys too: a
 * change to their layout (keyed_state.h) is a new format, with an upgrade
 * step in keyed_upgrade_state.
 *
 * Design: docs/ARCHITECTURE.md, "State and checkpoint formats".
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "base/key_groups.h"
#include "operators/keyed_state.h"
#include "plan/aggregate_call.h"
#include "plan/plan.h"
#include "state/serial.h"

#define LAYOUT_FORMAT_LINE	"format\t"

/* Keys rewritten per scan by keyed_upgrade_state (RocksDB batches them all). */
#define UPGRADE_CHUNK		10000

static void layout_add(StringInfo buf, const char *fingerprint, const char *what, Oid type);
static void entry_read_version(const KeyedCodec *codec, KeyedEntry *e, const char *data,
							   int len, int *pos);

void
keyed_key_append_time(StringInfo buf, TimestampTz t)
{
	uint64		u = ((uint64) t) ^ (UINT64CONST(1) << 63);
	char		b[8];

	for (int i = 7; i >= 0; i--)
	{
		b[i] = (char) (u & 0xFF);
		u >>= 8;
	}
	appendBinaryStringInfo(buf, b, 8);
}

TimestampTz
keyed_key_read_time(const char *p)
{
	uint64		u = 0;

	for (int i = 0; i < 8; i++)
		u = (u << 8) | (unsigned char) p[i];
	return (TimestampTz) (u ^ (UINT64CONST(1) << 63));
}

AggValue *
keyed_values_new(const KeyedCodec *codec)
{
	AggValue   *values = MemoryContextAlloc(codec->ctx, sizeof(AggValue) * Max(codec->naggs, 1));

	for (int a = 0; a < codec->naggs; a++)
		aggregate_init(codec->aggs[a], &values[a]);
	return values;
}

static void
put_values(const KeyedCodec *codec, AggValue *values, StringInfo buf)
{
	for (int a = 0; a < codec->naggs; a++)
		aggregate_serialize(codec->aggs[a], &values[a], buf);
}

static void
get_values(const KeyedCodec *codec, AggValue *values, const char *data, int len, int *pos)
{
	for (int a = 0; a < codec->naggs; a++)
		aggregate_deserialize(codec->aggs[a], &values[a], data, len, pos, codec->ctx);
}

void
keyed_entry_serialize(const KeyedCodec *codec, KeyedEntry *e, StringInfo buf)
{
	char		kind = e->key.data[0];
	uint8		version = KEYED_STATE_FORMAT;
	ListCell   *lc;
	int32		n;

	serial_put(buf, &version, 1);
	if (kind == 'A')
	{
		put_values(codec, e->values, buf);
		return;
	}
	if (kind == 'W' || kind == 'L')
	{
		serial_put(buf, &e->start, sizeof(TimestampTz));
		serial_put(buf, &e->end, sizeof(TimestampTz));
		serial_put(buf, &e->fired, sizeof(bool));
		serial_put(buf, &e->unemitted, sizeof(bool));
		put_values(codec, e->values, buf);
		return;
	}
	n = list_length(e->sessions);
	serial_put(buf, &n, sizeof(int32));
	foreach(lc, e->sessions)
	{
		Session    *s = lfirst(lc);

		serial_put(buf, &s->start, sizeof(TimestampTz));
		serial_put(buf, &s->end, sizeof(TimestampTz));
		serial_put(buf, &s->fired, sizeof(bool));
		serial_put(buf, &s->unemitted, sizeof(bool));
		serial_put(buf, &s->emitted_start, sizeof(TimestampTz));
		put_values(codec, s->values, buf);
	}
}

void
keyed_entry_deserialize(const KeyedCodec *codec, KeyedEntry *e, const char *data, int len)
{
	MemoryContext old = MemoryContextSwitchTo(codec->ctx);
	char		kind = e->key.data[0];
	int			pos = 0;

	entry_read_version(codec, e, data, len, &pos);
	if (kind == 'A')
		get_values(codec, e->values, data, len, &pos);
	else if (kind == 'W' || kind == 'L')
	{
		serial_get(data, len, &pos, &e->start, sizeof(TimestampTz));
		serial_get(data, len, &pos, &e->end, sizeof(TimestampTz));
		serial_get(data, len, &pos, &e->fired, sizeof(bool));
		serial_get(data, len, &pos, &e->unemitted, sizeof(bool));
		/* e->values is the entry's own (keyed_lookup) */
		get_values(codec, e->values, data, len, &pos);
	}
	else
	{
		int32		n;

		serial_get(data, len, &pos, &n, sizeof(int32));
		for (int i = 0; i < n; i++)
		{
			Session    *s = palloc0(sizeof(Session));

			serial_get(data, len, &pos, &s->start, sizeof(TimestampTz));
			serial_get(data, len, &pos, &s->end, sizeof(TimestampTz));
			serial_get(data, len, &pos, &s->fired, sizeof(bool));
			serial_get(data, len, &pos, &s->unemitted, sizeof(bool));
			serial_get(data, len, &pos, &s->emitted_start, sizeof(TimestampTz));
			s->values = keyed_values_new(codec);
			get_values(codec, s->values, data, len, &pos);
			e->sessions = lappend(e->sessions, s);
		}
	}
	serial_check_end(len, pos);
	MemoryContextSwitchTo(old);
}

/* The key as bytea's hex output: it holds binary group keys and times. */
static char *
key_text(const char *key, int klen)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "\\x");
	for (int i = 0; i < klen; i++)
		appendStringInfo(&buf, "%02x", (unsigned char) key[i]);
	return buf.data;
}

static void
entry_read_version(const KeyedCodec *codec, KeyedEntry *e, const char *data, int len, int *pos)
{
	uint8		version;

	serial_get(data, len, pos, &version, 1);
	/* Format 2 changed the keys alone: a value of format 1 reads the same. */
	if (version != KEYED_STATE_FORMAT && version != 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("the state of job \"%s\" holds a value of unknown format version %d",
						codec->job_name, (int) version),
				 errdetail("The value of state key %s has format version %d; this release reads versions 1 to %d.",
						   key_text(e->key.data, e->key.len), (int) version, KEYED_STATE_FORMAT),
				 errhint("Restore the job to an earlier checkpoint with mailer.restore_job, or drop and create the job.")));
}

/*
 * The format line, then one line per key field and aggregate:
 * "fingerprint<TAB>what<TAB>type".  Only the fingerprint is compared; the
 * rest names the entry and its type in an error, as they were when the
 * state was written.
 */
char *
keyed_state_layout(JobPlan *plan)
{
	StringInfoData buf;

	if (!plan->keyed || !plan->aggregated)
		return NULL;
	initStringInfo(&buf);
	appendStringInfo(&buf, LAYOUT_FORMAT_LINE "%d\tmailer keyed state", KEYED_STATE_FORMAT);
	for (int i = 0; i < plan->nkeys; i++)
	{
		RecordField *f = &plan->schema->fields[plan->key_slots[i]];

		layout_add(&buf, psprintf("key %u %d %c", f->type, f->typlen, f->typbyval ? 't' : 'f'),
				   psprintf("key field \"%s\"", f->name), f->type);
	}
	for (int a = 0; a < plan->naggs; a++)
	{
		AggregateDef *agg = plan->aggs[a];
		GeneralAggDef *g = agg->general;

		if (g)
		{
			/* the form, the state's type and the inputs' types make the bytes */
			StringInfoData fp;

			initStringInfo(&fp);
			appendStringInfo(&fp, "aggregate %d %d %u", (int) agg->impl, (int) g->form, g->transtype);
			for (int i = 0; i < g->ninputs; i++)
				appendStringInfo(&fp, " %u", g->inputs[i]->type);
			layout_add(&buf, fp.data, psprintf("aggregate \"%s\" (%s)", agg->name, agg->text),
					   g->transtype);
			continue;
		}
		layout_add(&buf, psprintf("aggregate %d %u %d %c", (int) agg->impl, agg->arg_type,
								  agg->arg_typlen, agg->arg_typbyval ? 't' : 'f'),
				   psprintf("aggregate \"%s\" (%s)", agg->name, agg->text), agg->arg_type);
	}
	return buf.data;
}

static void
layout_add(StringInfo buf, const char *fingerprint, const char *what, Oid type)
{
	char	   *w = pstrdup(what);
	char	   *t = pstrdup(OidIsValid(type) ? format_type_be(type) : "none");

	/* Tabs and newlines separate the layout's fields and lines. */
	for (char *p = w; *p; p++)
		if (*p == '\t' || *p == '\n')
			*p = ' ';
	for (char *p = t; *p; p++)
		if (*p == '\t' || *p == '\n')
			*p = ' ';
	appendStringInfo(buf, "\n%s\t%s\t%s", fingerprint, w, t);
}

/*
 * The number after the format line's prefix, which a tab ends; -1 when it is
 * not a number (a damaged row), which the caller refuses like any unknown
 * format rather than taking it for format 0 and upgrading format-1 values.
 */
static int
layout_format_number(const char *text)
{
	char	   *end;
	long		n;

	errno = 0;
	n = strtol(text, &end, 10);
	if (end == text || *end != '\t' || errno != 0 || n < 0 || n > INT_MAX)
		return -1;
	return (int) n;
}

/* The format of a layout, and where its type lines start. */
static int
layout_format(const char *layout, const char **types)
{
	const char *nl;

	*types = layout;
	if (layout == NULL || strncmp(layout, LAYOUT_FORMAT_LINE, strlen(LAYOUT_FORMAT_LINE)) != 0)
		return 0;
	nl = strchr(layout, '\n');
	*types = nl ? nl + 1 : "";
	return layout_format_number(layout + strlen(LAYOUT_FORMAT_LINE));
}

int
keyed_check_state_layout(const char *job_name, const char *stored, JobPlan *plan)
{
	const char *stored_types;
	const char *now_types;
	int			format = layout_format(stored, &stored_types);

	if (format < 0 || format > KEYED_STATE_FORMAT)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("the state of job \"%s\" has unknown format version %d", job_name, format),
				 errdetail("Its last checkpoint's state is in format version %d; this release reads versions 0 to %d.",
						   format, KEYED_STATE_FORMAT),
				 errhint("Restore the job to an earlier checkpoint with mailer.restore_job, install the release that wrote it, or drop and create the job.")));
	/* 0.1.0 recorded no layout: its types cannot be checked. */
	if (stored != NULL)
	{
		(void) layout_format(keyed_state_layout(plan), &now_types);
		serial_check_state_layout(job_name, stored_types, now_types);
	}
	return format;
}

/*
 * Hand each key in [from, to) and its value to fn, which may put and
 * delete keys of the range.  In chunks of UPGRADE_CHUNK: a chunk is copied
 * out of the iterator before fn sees it, and the next scan starts past its
 * last key (the smallest key greater than it), so that a backend applies
 * its writes as it goes and a large store never sits in memory whole (and
 * a scan from the range's start would walk the tombstones of every chunk
 * deleted before it).  fn
 * allocates in a context reset after each chunk.
 */
void
keyed_state_rewrite_range(StateBackend *state, char from_kind, char to_kind,
						  KeyedRewriteFn fn, void *arg)
{
	StringInfoData from;
	MemoryContext chunk_ctx;
	MemoryContext old;
	bool		more = true;

	initStringInfo(&from);
	appendStringInfoChar(&from, from_kind);
	chunk_ctx = AllocSetContextCreate(CurrentMemoryContext, "mailer state rewrite",
									  ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(chunk_ctx);
	while (more)
	{
		StateIterator *it = state->ops->iterate(state, from.data, from.len, &to_kind, 1);
		List	   *keys = NIL;
		List	   *vals = NIL;
		ListCell   *kc;
		ListCell   *vc;
		const char *key;
		const char *v;
		int			klen;
		int			vlen;

		while ((more = state->ops->next(it, &key, &klen, &v, &vlen)) &&
			   list_length(keys) < UPGRADE_CHUNK)
		{
			StringInfo	k = makeStringInfo();
			StringInfo	val = makeStringInfo();

			/* A large store takes a while: stop_job and shutdown may end it (the next start redoes it). */
			CHECK_FOR_INTERRUPTS();
			appendBinaryStringInfo(k, key, klen);
			appendBinaryStringInfo(val, v, vlen);
			keys = lappend(keys, k);
			vals = lappend(vals, val);
		}
		state->ops->iterate_end(it);
		forboth(kc, keys, vc, vals)
		{
			StringInfo	k = lfirst(kc);
			StringInfo	val = lfirst(vc);

			fn(state, k->data, k->len, val->data, val->len, arg);
		}
		if (more)
		{
			StringInfo	last = llast(keys);

			resetStringInfo(&from);
			appendBinaryStringInfo(&from, last->data, last->len);
			appendStringInfoChar(&from, '\0');
		}
		MemoryContextReset(chunk_ctx);
	}
	MemoryContextSwitchTo(old);
	MemoryContextDelete(chunk_ctx);
	pfree(from.data);
}

/*
 * Format 1 to 2: the timer keys go ('F' and 'P'; the stage keeps its
 * timers in memory and makes them again from the window entries).
 */
static void
delete_key(StateBackend *state, const char *key, int klen, const char *val, int vlen, void *arg)
{
	state->ops->delete(state, key, klen);
}

/*
 * Format 0 to 1: the version byte before the value.  The byte written is
 * today's: values of formats 1 and 2 are alike.
 */
static void
add_version_byte(StateBackend *state, const char *key, int klen, const char *val, int vlen,
				 void *arg)
{
	StringInfoData nv;
	char		version = KEYED_STATE_FORMAT;

	initStringInfo(&nv);
	appendBinaryStringInfo(&nv, &version, 1);
	appendBinaryStringInfo(&nv, val, vlen);
	state->ops->put(state, key, klen, nv.data, nv.len);
}

/*
 * Format 0 to 1 over all the stage's keys (they begin with a capital
 * letter; RocksDB's own "\0epoch" is not one of them), then format 1 to 2:
 * the fire and purge timer keys go.
 */
void
keyed_upgrade_state(StateBackend *state, int format)
{
	if (format == KEYED_STATE_FORMAT)
		return;
	if (format == 0)
		keyed_state_rewrite_range(state, 'A', '[', add_version_byte, NULL);
	keyed_state_rewrite_range(state, 'F', 'G', delete_key, NULL);
	keyed_state_rewrite_range(state, 'P', 'Q', delete_key, NULL);
}

/* Where the group key lies in each kind of key: see keyed_state.h. */
int
keyed_state_key_group(const char *state_key, int len, int key_groups)
{
	int			before;			/* bytes before the group key */
	int			after;			/* bytes after it */

	if (len < 1)
		return -1;
	switch (state_key[0])
	{
		case 'A':
		case 'S':
			before = 1;
			after = 0;
			break;
		case 'W':
		case 'L':
			before = 1;
			after = 8;
			break;
		case 'F':
		case 'P':
			before = 9;
			after = 8;
			break;
		default:
			return -1;
	}
	if (len < before + after)
		return -1;
	return key_group_of(state_key + before, len - before - after, key_groups);
}

/*
 * mailer_state_key_group(key bytea, key_groups integer): the key group of a
 * state key, NULL for a key of none.  Only the update script from 0.1.0
 * calls it, for the memory-state rows of 0.1.0, which carry none; it makes
 * the function and drops it again.
 */
PG_FUNCTION_INFO_V1(mailer_state_key_group);
Datum
mailer_state_key_group(PG_FUNCTION_ARGS)
{
	bytea	   *key = PG_GETARG_BYTEA_PP(0);
	int32		key_groups = PG_GETARG_INT32(1);
	int			g;

	if (key_groups < 1 || key_groups > KEY_GROUPS_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("key_groups must be between 1 and %d, not %d", KEY_GROUPS_MAX, key_groups),
				 errhint("Pass the key_groups of the job's spec.")));
	g = keyed_state_key_group(VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key), key_groups);
	if (g < 0)
		PG_RETURN_NULL();
	PG_RETURN_INT32(g);
}

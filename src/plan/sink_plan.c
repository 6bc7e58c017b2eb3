/*
 * sink_plan.c
 *		Plan the sink table of a job (sink_plan.h): resolve the table, match
 *		its columns to the output fields, find the conflict key of an upsert
 *		and its equality, check the owner's privileges, and build the SQL.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/nbtree.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_index.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "plan/plan.h"
#include "plan/sink_plan.h"
#include "plan/spec_error.h"

static Relation open_sink_table(SinkSpec *spec, SinkPlan *sink);
static char *map_columns(JobPlan *plan, SinkPlan *sink, Relation rel, List *keys);
static void check_keys_fed(SinkPlan *sink, SinkSpec *spec, List *keys);
static void check_outputs_fed(JobPlan *plan, SinkPlan *sink, const char *colnames);
static void check_session_key(JobPlan *plan, SinkPlan *sink);
static void pin_resolved(SinkSpec *spec, SinkPlan *sink);
static List *sink_key_columns(Relation rel, SinkSpec *sink, bool *upsert, Oid *index);
static List *spec_key_columns(Relation rel, SinkSpec *spec, Oid *index);
static Oid	unique_index_on(Relation rel, List *columns, bool *deferrable);
static bool deferrable_primary_key(Relation rel);
static void sink_key_equality(SinkPlan *sink, Relation rel, Oid index, bool refuse_unhashable);
static void check_column_privileges(Oid relid, SinkPlan *sink, const char *relname);
static void build_insert_sql(SinkPlan *sink);
static void build_delete_sql(SinkPlan *sink);
static char *qualified_operator(Oid op);

/* The JSON path of a field of the sink's spec: "sink.table", "sinks[0].key". */
static const char *
sink_path(const char *path, const char *field)
{
	return psprintf("%s.%s", path, field);
}

SinkPlan *
plan_sink(JobPlan *plan, bool refuse_unhashable_keys)
{
	SinkSpec   *spec = &plan->spec->sink;
	SinkPlan   *sink;
	Relation	rel;
	List	   *keys;
	char	   *colnames;

	if (spec->type == SINK_KAFKA || spec->type == SINK_PULSAR)
		return plan_kafka_sink(plan, &spec->kafka);
	sink = palloc0(sizeof(SinkPlan));
	sink->path = spec->path;
	rel = open_sink_table(spec, sink);
	keys = sink_key_columns(rel, spec, &sink->upsert, &sink->key_index);
	colnames = map_columns(plan, sink, rel, keys);
	check_keys_fed(sink, spec, keys);
	check_outputs_fed(plan, sink, colnames);
	check_session_key(plan, sink);
	if (sink->upsert)
		sink_key_equality(sink, rel, sink->key_index, refuse_unhashable_keys);
	check_column_privileges(sink->relid, sink, sink->relname);
	table_close(rel, NoLock);
	build_insert_sql(sink);
	if (sink->upsert)
		build_delete_sql(sink);
	pin_resolved(spec, sink);
	return sink;
}

/* The table spec names, locked AccessShareLock; sets relid and relname. */
static Relation
open_sink_table(SinkSpec *spec, SinkPlan *sink)
{
	MemoryContext ctx = CurrentMemoryContext;
	List	   *names = NIL;
	Relation	rel;

	PG_TRY();
	{
		names = stringToQualifiedNameList(spec->table);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(ctx);
		FlushErrorState();
		spec_error(sink_path(spec->path, "table"), ERRCODE_INVALID_NAME,
				   "A table name as in a query: orders_total, public.orders_total or \"Mixed Case\".",
				   "\"%s\" is not a table name", spec->table);
	}
	PG_END_TRY();
	sink->relid = RangeVarGetRelid(makeRangeVarFromNameList(names), AccessShareLock, true);
	if (!OidIsValid(sink->relid))
		spec_error(sink_path(spec->path, "table"), ERRCODE_UNDEFINED_TABLE,
				   psprintf("Create the table before the job; an unqualified name is looked up in search_path (%s).",
							namespace_search_path),
				   "table \"%s\" does not exist", spec->table);
	rel = table_open(sink->relid, NoLock);
	if (rel->rd_rel->relkind != RELKIND_RELATION && rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
		spec_error(sink_path(spec->path, "table"), ERRCODE_WRONG_OBJECT_TYPE, "A sink is an ordinary or partitioned table.",
				   "\"%s\" is not a table", spec->table);
	sink->relname = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
											   RelationGetRelationName(rel));
	return rel;
}

/*
 * A sink column for each column of the table named after an output field
 * (keys: the conflict columns).  Returns the table's columns as a hint
 * lists them.
 */
static char *
map_columns(JobPlan *plan, SinkPlan *sink, Relation rel, List *keys)
{
	TupleDesc	desc = RelationGetDescr(rel);
	StringInfoData colnames;

	sink->columns = palloc0(sizeof(SinkColumn) * desc->natts);
	initStringInfo(&colnames);
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);
		char	   *attname = NameStr(att->attname);
		int			slot;
		SinkColumn *col;

		if (att->attisdropped)
			continue;
		appendStringInfo(&colnames, "%s%s %s", colnames.len ? ", " : "", quote_identifier(attname),
						 format_type_with_typemod(att->atttypid, att->atttypmod));
		if (att->attgenerated || att->attidentity == ATTRIBUTE_IDENTITY_ALWAYS)
			continue;
		slot = field_scope_lookup(plan->out_scope, attname);
		if (slot < 0)
		{
			if (att->attnotnull && !att->atthasdef && att->attidentity == '\0')
				spec_error(sink_path(sink->path, "table"), ERRCODE_NOT_NULL_VIOLATION,
						   psprintf("Make a field named \"%s\" (in map, key_by or aggregate), give the column a default, or drop NOT NULL.",
									attname),
						   "column \"%s\" of table %s is NOT NULL, has no default, and no field of the job is named after it",
						   attname, sink->relname);
			continue;
		}
		col = &sink->columns[sink->ncolumns++];
		col->name = pstrdup(attname);
		col->type = att->atttypid;
		col->typmod = att->atttypmod;
		col->collation = att->attcollation;
		col->slot = slot;
		col->is_key = list_member(keys, makeString(attname));
		get_typlenbyvalalign(getBaseType(col->type), &col->typlen, &col->typbyval, &col->typalign);
		col->cast = expr_compile_cast(slot, plan->out_scope, att->atttypid, att->atttypmod,
									  plan->out_paths[slot] ? plan->out_paths[slot] : sink_path(sink->path, "table"),
									  psprintf("column \"%s\" of type", attname));
		plan->out_schema->fields[slot].referenced = true;
		if (col->is_key)
			sink->nkeys++;
	}
	return colnames.data;
}

/* Every conflict column must receive a field. */
static void
check_keys_fed(SinkPlan *sink, SinkSpec *spec, List *keys)
{
	ListCell   *lc;

	if (sink->nkeys == list_length(keys))
		return;
	foreach(lc, keys)
	{
		bool		found = false;

		for (int i = 0; i < sink->ncolumns; i++)
			if (sink->columns[i].is_key && strcmp(sink->columns[i].name, strVal(lfirst(lc))) == 0)
				found = true;
		if (!found)
			spec_error(spec->key ? sink_path(spec->path, "key") : sink_path(spec->path, "table"), ERRCODE_INVALID_PARAMETER_VALUE,
					   psprintf("Name a field \"%s\" in key_by or map, or use \"mode\": \"append\".",
								strVal(lfirst(lc))),
					   "conflict column \"%s\" of table %s receives no field",
					   strVal(lfirst(lc)), sink->relname);
	}
}

/*
 * An aggregate's every output must reach a column; a record's fields, some
 * of them at least.
 */
static void
check_outputs_fed(JobPlan *plan, SinkPlan *sink, const char *colnames)
{
	if (!plan->aggregated)
	{
		if (sink->ncolumns == 0)
			spec_error(sink_path(sink->path, "table"), ERRCODE_UNDEFINED_COLUMN,
					   psprintf("Columns receive the fields of the same name (key, value, topic, partition, offset, timestamp, headers, and those made by map or key_by). The table's columns: %s.",
								colnames),
					   "no column of table %s is named after a field of the job", sink->relname);
		return;
	}
	for (int s = 0; s < plan->out_schema->nfields; s++)
	{
		bool		fed = false;

		for (int i = 0; i < sink->ncolumns; i++)
			if (sink->columns[i].slot == s)
				fed = true;
		if (!fed)
			spec_error(plan->out_paths[s], ERRCODE_UNDEFINED_COLUMN,
					   psprintf("Add the column, or rename the field. The table's columns: %s.", colnames),
					   "table %s has no column \"%s\"", sink->relname, plan->out_schema->fields[s].name);
	}
}

/* A merged session replaces its parts' rows: deletes go by the conflict key. */
static void
check_session_key(JobPlan *plan, SinkPlan *sink)
{
	bool		ok = sink->upsert;

	if (!plan->window || plan->window->type != WINDOW_SESSION)
		return;
	for (int i = 0; ok && i < sink->ncolumns; i++)
		if (sink->columns[i].is_key && sink->columns[i].slot > plan->nkeys)
			ok = false;			/* only key fields and window_start */
	if (!ok)
		spec_error(sink->path, ERRCODE_INVALID_PARAMETER_VALUE,
				   psprintf("Give table %s a primary key such as (key fields..., window_start): a merged session's row then replaces the rows of its parts.",
							sink->relname),
				   "session windows need an upsert sink whose conflict key is made of the key fields and window_start");
}

/*
 * From now on the name means this schema's table, and the mode is the one
 * it resolved to: a table of the same name placed earlier in the
 * search_path, or a primary key dropped, changes neither.
 */
static void
pin_resolved(SinkSpec *spec, SinkPlan *sink)
{
	spec->table = sink->relname;
	if (spec->mode == SINK_MODE_DEFAULT && spec->key == NIL)
		spec->mode = sink->upsert ? SINK_MODE_UPSERT : SINK_MODE_APPEND;
}

/*
 * Conflict columns (as String nodes) of an upsert sink, NIL for append;
 * *index: the unique index that decides a conflict.  A deferrable one is
 * refused: ON CONFLICT cannot use it, and a violation would show only at
 * COMMIT, past the point where a row can be told from the others.
 */
static List *
sink_key_columns(Relation rel, SinkSpec *spec, bool *upsert, Oid *index)
{
	List	   *keys = NIL;
	Oid			pk = RelationGetPrimaryKeyIndex(rel);

	*upsert = false;
	*index = InvalidOid;
	if (spec->mode == SINK_MODE_APPEND)
		return NIL;
	if (spec->key != NIL)
		keys = spec_key_columns(rel, spec, index);
	else if (!OidIsValid(pk) && deferrable_primary_key(rel))
		spec_error(sink_path(spec->path, "table"), ERRCODE_FEATURE_NOT_SUPPORTED,
				   "An upsert needs its conflict key checked at once: make the primary key NOT DEFERRABLE, name the columns of a non-deferrable unique index in \"key\", or use \"mode\": \"append\".",
				   "the primary key of table %s is deferrable", RelationGetRelationName(rel));
	else if (OidIsValid(pk))
	{
		Relation	idx = index_open(pk, AccessShareLock);

		for (int i = 0; i < idx->rd_index->indnkeyatts; i++)
			keys = lappend(keys, makeString(get_attname(RelationGetRelid(rel),
														idx->rd_index->indkey.values[i], false)));
		index_close(idx, AccessShareLock);
		*index = pk;
	}
	else if (spec->mode == SINK_MODE_UPSERT)
		spec_error(sink_path(spec->path, "mode"), ERRCODE_INVALID_COLUMN_REFERENCE,
				   "Add a primary key, name the conflict columns in \"key\", or use \"mode\": \"append\".",
				   "table %s has no primary key to upsert on", RelationGetRelationName(rel));
	*upsert = keys != NIL;
	return keys;
}

/* The columns sink.key names, and the unique index on exactly them. */
static List *
spec_key_columns(Relation rel, SinkSpec *spec, Oid *index)
{
	List	   *keys = NIL;
	ListCell   *lc;
	bool		deferrable;

	foreach(lc, spec->key)
	{
		char	   *name = lfirst(lc);

		if (get_attnum(RelationGetRelid(rel), name) == InvalidAttrNumber)
			spec_error(sink_path(spec->path, "key"), ERRCODE_UNDEFINED_COLUMN, "Name columns of the sink table.",
					   "table %s has no column \"%s\"", RelationGetRelationName(rel), name);
		keys = lappend(keys, makeString(name));
	}
	*index = unique_index_on(rel, keys, &deferrable);
	if (!OidIsValid(*index) && deferrable)
		spec_error(sink_path(spec->path, "key"), ERRCODE_FEATURE_NOT_SUPPORTED,
				   "An upsert needs its conflict key checked at once: make the constraint NOT DEFERRABLE, or use \"mode\": \"append\".",
				   "the unique index on these columns of table %s is deferrable",
				   RelationGetRelationName(rel));
	if (!OidIsValid(*index))
		spec_error(sink_path(spec->path, "key"), ERRCODE_INVALID_COLUMN_REFERENCE,
				   "An upsert needs a primary key or a unique, non-partial, non-deferrable index on the key columns.",
				   "table %s has no unique index on exactly these columns",
				   RelationGetRelationName(rel));
	return keys;
}

SinkPlan *
plan_sink_again(JobPlan *plan)
{
	return plan_sink(plan, false);
}

Oid
plan_sink_key_index(SinkSpec *spec, Oid relid)
{
	Relation	rel = table_open(relid, NoLock);
	Oid			index;

	if (spec->key != NIL)
	{
		List	   *keys = NIL;
		ListCell   *lc;
		bool		deferrable;

		foreach(lc, spec->key)
			keys = lappend(keys, makeString(lfirst(lc)));
		index = unique_index_on(rel, keys, &deferrable);
	}
	else
		index = RelationGetPrimaryKeyIndex(rel);
	table_close(rel, NoLock);
	return index;
}

Jsonb *
plan_pin_sink(Jsonb *doc, JobPlan *plan)
{
	SinkSpec   *spec = &plan->spec->sink;
	char	   *index = psprintf("%d", spec->index);
	const char *table_path[] = {"sinks", index, "table"};
	const char *mode_path[] = {"sinks", index, "mode"};
	int			skip = spec->index < 0 ? 1 : 0;	/* "sink": {"sink", "table"} */

	if (spec->type == SINK_KAFKA || spec->type == SINK_PULSAR)
		return doc;				/* a topic's name resolves to nothing else later */
	if (skip)
		table_path[1] = mode_path[1] = "sink";
	doc = spec_jsonb_set(doc, table_path + skip, lengthof(table_path) - skip,
						 spec_jsonb_string(spec->table), true);
	if (spec->mode != SINK_MODE_DEFAULT)
		doc = spec_jsonb_set(doc, mode_path + skip, lengthof(mode_path) - skip,
							 spec_jsonb_string(spec_choice_name(spec_sink_modes, spec->mode)), true);
	return doc;
}

Oid
plan_sink_relid(SinkSpec *spec, LOCKMODE lockmode)
{
	RangeVar   *rv = makeRangeVarFromNameList(stringToQualifiedNameList(spec->table));

	return RangeVarGetRelid(rv, lockmode, true);
}

/* The relcache knows only an immediate primary key as one. */
static bool
deferrable_primary_key(Relation rel)
{
	ListCell   *lc;
	bool		found = false;

	foreach(lc, RelationGetIndexList(rel))
	{
		HeapTuple	tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(lfirst_oid(lc)));

		if (!HeapTupleIsValid(tup))
			continue;
		if (((Form_pg_index) GETSTRUCT(tup))->indisprimary &&
			!((Form_pg_index) GETSTRUCT(tup))->indimmediate)
			found = true;
		ReleaseSysCache(tup);
	}
	return found;
}

/*
 * A unique, immediate, non-partial index on exactly these columns, or
 * InvalidOid; *deferrable: a deferrable one would have matched.
 */
static Oid
unique_index_on(Relation rel, List *columns, bool *deferrable)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	Oid			found = InvalidOid;

	*deferrable = false;
	foreach(lc, indexes)
	{
		Relation	idx = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index form = idx->rd_index;
		bool		match = form->indisunique &&
			heap_attisnull(idx->rd_indextuple, Anum_pg_index_indpred, NULL) &&
			heap_attisnull(idx->rd_indextuple, Anum_pg_index_indexprs, NULL) &&
			form->indnkeyatts == list_length(columns);

		for (int i = 0; match && i < form->indnkeyatts; i++)
		{
			char	   *att = get_attname(RelationGetRelid(rel), form->indkey.values[i], false);

			if (!list_member(columns, makeString(att)))
				match = false;
		}
		if (match && !form->indimmediate)
			*deferrable = true;
		else if (match && !OidIsValid(found))
			found = RelationGetRelid(idx);
		index_close(idx, AccessShareLock);
	}
	return found;
}

/*
 * The buffer merges rows of one key as the conflict index would: by its
 * operator class's equality in its collation (numeric 1.0 and 1.00, citext,
 * a nondeterministic collation, -0.0 and 0.0), with a hash function that
 * agrees with that equality.  Two rows the index sees as one key must never
 * reach one INSERT ... ON CONFLICT DO UPDATE.
 */
static void
sink_key_equality(SinkPlan *sink, Relation rel, Oid index, bool refuse_unhashable)
{
	Relation	idx = index_open(index, AccessShareLock);

	sink->key_nulls_distinct = !idx->rd_index->indnullsnotdistinct;
	for (int i = 0; i < idx->rd_index->indnkeyatts; i++)
	{
		char	   *att = get_attname(RelationGetRelid(rel), idx->rd_index->indkey.values[i], false);
		Oid			opcintype = idx->rd_opcintype[i];
		Oid			eqop = InvalidOid;
		RegProcedure lhs_hash = InvalidOid;
		RegProcedure rhs_hash = InvalidOid;
		bool		equal_image = false;

		if (idx->rd_rel->relam == BTREE_AM_OID)
		{
			Oid			image_proc = get_opfamily_proc(idx->rd_opfamily[i], opcintype, opcintype,
													   BTEQUALIMAGE_PROC);

			eqop = get_opfamily_member(idx->rd_opfamily[i], opcintype, opcintype,
									   BTEqualStrategyNumber);

			/*
			 * The row hash (sink_table.c) takes equalimage to mean that
			 * equal values have equal bytes.  bpchar's opfamilies claim it
			 * in some releases though 'a' and 'a ' are equal (for a btree
			 * it costs only some deduplication): a bpchar key goes by its
			 * type's hash whatever the release says.  A column that a
			 * bpchar opclass indexes is bpchar or binary-coercible to it,
			 * and a bpchar column takes only bpchar opclasses: the opclass's
			 * input type tells.
			 */
			equal_image = OidIsValid(eqop) && OidIsValid(image_proc) && opcintype != BPCHAROID &&
				DatumGetBool(OidFunctionCall1Coll(image_proc, idx->rd_indcollation[i],
												  ObjectIdGetDatum(opcintype)));
		}
		if (!OidIsValid(eqop))
			eqop = lookup_type_cache(opcintype, TYPECACHE_EQ_OPR)->eq_opr;
		if (OidIsValid(eqop))
			(void) get_op_hash_functions(eqop, &lhs_hash, &rhs_hash);
		for (int c = 0; c < sink->ncolumns; c++)
		{
			SinkColumn *col = &sink->columns[c];
			Oid			base;

			if (!col->is_key || strcmp(col->name, att) != 0)
				continue;

			/*
			 * Without a hash every row of the buffer meets in one bucket
			 * (quadratic); an array's or a row's hash fails at run time
			 * when an element type has none.
			 */
			base = getBaseType(col->type);
			if (OidIsValid(lhs_hash) && (type_is_array(base) || type_is_rowtype(base) ||
										 type_is_range(base) || type_is_multirange(base)) &&
				!OidIsValid(lookup_type_cache(base, TYPECACHE_HASH_PROC)->hash_proc))
				lhs_hash = InvalidOid;
			if (!OidIsValid(lhs_hash) && refuse_unhashable)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 spec_errmsg(sink_path(sink->path, "table"), "conflict column \"%s\" of table %s has type %s, whose equality has no hash function",
									 col->name, sink->relname, format_type_be(col->type)),
						 errdetail("An upsert merges the rows of each key in a hash table before it writes them."),
						 errhint("Key the table on a type with a hash operator class (cast money to numeric, bit or tsvector to text), or use \"mode\": \"append\".")));
			col->key_eq_op = eqop;
			col->key_eq_proc = OidIsValid(eqop) ? get_opcode(eqop) : InvalidOid;
			col->key_hash_proc = lhs_hash;
			col->key_collation = idx->rd_indcollation[i];
			col->key_hash_image = equal_image;
		}
	}
	index_close(idx, AccessShareLock);
}

/* The owner must be able to do what the sink statement does. */
static void
check_column_privileges(Oid relid, SinkPlan *sink, const char *relname)
{
	AclMode		needed = ACL_INSERT | (sink->upsert ? ACL_UPDATE | ACL_SELECT : 0);

	/* All of them on the table will do (pg_class_aclcheck would take any one). */
	if (pg_class_aclmask(relid, GetUserId(), needed, ACLMASK_ALL) == needed)
		return;
	for (int i = 0; i < sink->ncolumns; i++)
	{
		SinkColumn *col = &sink->columns[i];
		AttrNumber	attnum = get_attnum(relid, col->name);
		AclMode		mode = ACL_INSERT;

		if (sink->upsert)
			mode |= col->is_key ? ACL_SELECT : ACL_UPDATE;
		for (AclMode m = 1; m <= mode; m <<= 1)
		{
			if (!(mode & m))
				continue;
			if (pg_class_aclcheck(relid, GetUserId(), m) != ACLCHECK_OK &&
				pg_attribute_aclcheck(relid, attnum, GetUserId(), m) != ACLCHECK_OK)
				spec_error(sink_path(sink->path, "table"), ERRCODE_INSUFFICIENT_PRIVILEGE,
						   psprintf("A job writes as its owner: grant %s on the table to the job's owner.",
									sink->upsert ? "INSERT, SELECT and UPDATE" : "INSERT"),
						   "role \"%s\" may not %s column \"%s\" of table %s",
						   GetUserNameFromId(GetUserId(), false),
						   m == ACL_INSERT ? "insert into" : m == ACL_UPDATE ? "update" : "select",
						   col->name, relname);
		}
	}
}

/*
 * Column i's values as rows, from parameter $i+1, and the parameter's type
 * (set in sink->param_types, which the caller allocated): an array of the
 * column's base type, or for a type that has no array type (an array type:
 * PostgreSQL has no arrays of arrays) its values as text, cast back to it.
 */
static char *
column_unnest(SinkPlan *sink, int i)
{
	SinkColumn *col = &sink->columns[i];
	Oid			array = get_array_type(getBaseType(col->type));

	col->via_text = !OidIsValid(array);
	sink->param_types[i] = col->via_text ? TEXTARRAYOID : array;
	if (col->via_text)
		return psprintf("pg_catalog.unnest($%d)::%s", i + 1,
						format_type_extended(col->type, -1, FORMAT_TYPE_FORCE_QUALIFY));
	return psprintf("pg_catalog.unnest($%d)", i + 1);
}

/*
 * One statement writes a whole batch: each column's values arrive as one
 * array parameter and unnest() turns them back into rows.  The unnest()
 * calls stand in the select list, where they run in step and a composite
 * value stays one column (in FROM, it would expand into its fields).
 * Every function and operator is schema-qualified and the parameters are
 * typed by SPI: nothing resolves through the job's search_path, where a
 * role with CREATE in an earlier schema could put its own unnest().
 */
static void
build_insert_sql(SinkPlan *sink)
{
	StringInfoData sql;
	bool		any_update = false;

	sink->param_types = palloc(sizeof(Oid) * sink->ncolumns);
	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s (", sink->relname);
	for (int i = 0; i < sink->ncolumns; i++)
		appendStringInfo(&sql, "%s%s", i ? ", " : "", quote_identifier(sink->columns[i].name));
	appendStringInfoString(&sql, ") SELECT ");
	for (int i = 0; i < sink->ncolumns; i++)
	{
		appendStringInfo(&sql, "%s%s", i ? ", " : "", column_unnest(sink, i));
	}
	if (sink->upsert)
	{
		bool		first = true;

		appendStringInfoString(&sql, " ON CONFLICT (");
		for (int i = 0; i < sink->ncolumns; i++)
		{
			if (!sink->columns[i].is_key)
				continue;
			appendStringInfo(&sql, "%s%s", first ? "" : ", ", quote_identifier(sink->columns[i].name));
			first = false;
		}
		appendStringInfoString(&sql, ") DO UPDATE SET ");
		first = true;
		for (int i = 0; i < sink->ncolumns; i++)
		{
			const char *c = quote_identifier(sink->columns[i].name);

			if (sink->columns[i].is_key)
				continue;
			appendStringInfo(&sql, "%s%s = EXCLUDED.%s", first ? "" : ", ", c, c);
			first = false;
			any_update = true;
		}
		if (!any_update)
		{
			/* Only key columns: a row that exists already says everything. */
			sql.len -= strlen(" DO UPDATE SET ");
			sql.data[sql.len] = '\0';
			appendStringInfoString(&sql, " DO NOTHING");
		}
	}
	sink->insert_sql = sql.data;
}

/*
 * DELETE of the rows of some keys (a merged session's replaced parts):
 * the key arrays are the insert's parameters of the key columns, compared
 * with the conflict index's equality in its collation.
 */
static void
build_delete_sql(SinkPlan *sink)
{
	StringInfoData sql;
	bool		first = true;

	initStringInfo(&sql);
	appendStringInfo(&sql, "DELETE FROM %s AS mailer_t USING (SELECT ", sink->relname);
	for (int i = 0; i < sink->ncolumns; i++)
	{
		if (!sink->columns[i].is_key)
			continue;
		appendStringInfo(&sql, "%s%s AS k%d", first ? "" : ", ", column_unnest(sink, i), i + 1);
		first = false;
	}
	appendStringInfoString(&sql, ") AS mailer_d WHERE ");
	first = true;
	for (int i = 0; i < sink->ncolumns; i++)
	{
		SinkColumn *col = &sink->columns[i];

		if (!col->is_key)
			continue;
		appendStringInfo(&sql, "%smailer_t.%s %s mailer_d.k%d", first ? "" : " AND ",
						 quote_identifier(col->name), qualified_operator(col->key_eq_op), i + 1);
		if (OidIsValid(col->key_collation))
		{
			HeapTuple	tup = SearchSysCache1(COLLOID, ObjectIdGetDatum(col->key_collation));
			Form_pg_collation coll;

			if (!HeapTupleIsValid(tup))
				elog(ERROR, "cache lookup failed for collation %u", col->key_collation);
			coll = (Form_pg_collation) GETSTRUCT(tup);
			appendStringInfo(&sql, " COLLATE %s",
							 quote_qualified_identifier(get_namespace_name(coll->collnamespace),
														NameStr(coll->collname)));
			ReleaseSysCache(tup);
		}
		first = false;
	}
	sink->delete_sql = sql.data;
}

/* OPERATOR(schema.name), so that no search_path decides which one runs. */
static char *
qualified_operator(Oid op)
{
	HeapTuple	tup = SearchSysCache1(OPEROID, ObjectIdGetDatum(op));
	char	   *result;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for operator %u", op);
	result = psprintf("OPERATOR(%s.%s)",
					  quote_identifier(get_namespace_name(((Form_pg_operator) GETSTRUCT(tup))->oprnamespace)),
					  NameStr(((Form_pg_operator) GETSTRUCT(tup))->oprname));
	ReleaseSysCache(tup);
	return result;
}

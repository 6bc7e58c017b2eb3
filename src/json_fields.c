/*
 * json_fields.c
 *		Top-level JSON fields straight from the message text (json_fields.h).
 *
 * Building a jsonb for every message costs more than everything else a
 * simple job does per record, while most jobs read a few top-level fields.
 * The scanner below validates the JSON text as PostgreSQL's parser would
 * (RFC 8259 grammar; \u0000 refused) and keeps the last occurrence of each
 * wanted key, as jsonb does.  A field's value then becomes what ->> or ->
 * would give: strings unescaped, numbers as numeric prints them, nested
 * values through jsonb itself.
 */
#include "postgres.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/jsonb.h"

#include "json_fields.h"

/* A wanted field's value as found: [start, end) of its JSON text. */
typedef struct FieldSpan
{
	const char *start;
	const char *end;
} FieldSpan;

typedef struct Scanner
{
	const char *p;
	const char *end;
	const char *text;
	int			len;
} Scanner;

typedef struct Analysis
{
	bool		other_use;		/* the jsonb value is used whole somewhere */
	JsonFields *jf;
	RecordSchema *schema;
	bool		rewrite;
} Analysis;

static bool analyse(Node *node, Analysis *a);
static Node *rewrite(Node *node, Analysis *a);

static bool
is_value_param(Node *node)
{
	return node && IsA(node, Param) && ((Param *) node)->paramkind == PARAM_EXTERN &&
		((Param *) node)->paramid == FIELD_VALUE + 1;
}

/* value->>'k' or value->'k' (as operator or function): its key, else NULL. */
static char *
field_access(Node *node, bool *as_text)
{
	Oid			func;
	List	   *args;
	Node	   *key;

	if (IsA(node, OpExpr))
	{
		func = ((OpExpr *) node)->opfuncid;
		args = ((OpExpr *) node)->args;
	}
	else if (IsA(node, FuncExpr))
	{
		func = ((FuncExpr *) node)->funcid;
		args = ((FuncExpr *) node)->args;
	}
	else
		return NULL;
	if ((func != F_JSONB_OBJECT_FIELD_TEXT && func != F_JSONB_OBJECT_FIELD) ||
		list_length(args) != 2 || !is_value_param(linitial(args)))
		return NULL;
	key = lsecond(args);
	if (!IsA(key, Const) || ((Const *) key)->constisnull)
		return NULL;
	*as_text = func == F_JSONB_OBJECT_FIELD_TEXT;
	return TextDatumGetCString(((Const *) key)->constvalue);
}

/* The field's slot, made on first use. */
static int
field_slot(Analysis *a, const char *key, bool as_text)
{
	JsonFields *jf = a->jf;
	JsonField  *f = NULL;
	int		   *slot;

	for (int i = 0; i < jf->nfields; i++)
		if (strcmp(jf->fields[i].key, key) == 0)
			f = &jf->fields[i];
	if (f == NULL)
	{
		jf->fields = jf->nfields ? repalloc(jf->fields, sizeof(JsonField) * (jf->nfields + 1)) :
			palloc(sizeof(JsonField));
		f = &jf->fields[jf->nfields++];
		f->key = pstrdup(key);
		f->key_len = strlen(key);
		f->text_slot = f->jsonb_slot = -1;
	}
	slot = as_text ? &f->text_slot : &f->jsonb_slot;
	if (*slot < 0)
		*slot = record_schema_add(a->schema, psprintf("value%s'%s'", as_text ? "->>" : "->", key),
								  as_text ? TEXTOID : JSONBOID, -1,
								  as_text ? DEFAULT_COLLATION_OID : InvalidOid);
	return *slot;
}

static bool
analyse(Node *node, Analysis *a)
{
	bool		as_text;

	if (node == NULL)
		return false;
	if (field_access(node, &as_text) != NULL)
		return false;
	if (is_value_param(node))
	{
		a->other_use = true;
		return true;
	}
	return expression_tree_walker(node, analyse, a);
}

static Node *
rewrite(Node *node, Analysis *a)
{
	bool		as_text;
	char	   *key;

	if (node == NULL)
		return NULL;
	key = field_access(node, &as_text);
	if (key != NULL)
	{
		RecordField *f;
		Param	   *param = makeNode(Param);

		param->paramkind = PARAM_EXTERN;
		param->paramid = field_slot(a, key, as_text) + 1;
		f = &a->schema->fields[param->paramid - 1];
		f->referenced = true;
		param->paramtype = f->type;
		param->paramtypmod = -1;
		param->paramcollid = f->collation;
		param->location = -1;
		return (Node *) param;
	}
	return expression_tree_mutator(node, rewrite, a);
}

/* Every expression over the record's fields, to look at or rewrite. */
static void
for_each_expr(JobPlan *plan, void (*fn) (CompiledExpr *e, Analysis *a), Analysis *a)
{
	fn(plan->event_time, a);
	for (int i = 0; i < plan->nsteps; i++)
	{
		fn(plan->steps[i]->expr, a);
		for (int j = 0; j < plan->steps[i]->nexprs; j++)
			fn(plan->steps[i]->exprs[j], a);
	}
	for (int i = 0; i < plan->naggs; i++)
		fn(plan->aggs[i]->arg, a);
	if (plan->out_schema == plan->schema)
		for (int i = 0; i < plan->sink->ncolumns; i++)
			fn(plan->sink->columns[i].cast, a);
}

static void
analyse_expr(CompiledExpr *e, Analysis *a)
{
	if (e)
		(void) analyse((Node *) e->expr, a);
}

static void
rewrite_expr(CompiledExpr *e, Analysis *a)
{
	if (e)
		e->expr = (Expr *) rewrite((Node *) e->expr, a);
}

JsonFields *
json_fields_plan(JobPlan *plan)
{
	Analysis	a = {0};

	/* \u escapes are decoded to UTF-8 here: other encodings take the jsonb path. */
	if (plan->spec->source.format != FORMAT_JSON || GetDatabaseEncoding() != PG_UTF8)
		return NULL;
	a.schema = plan->schema;
	for_each_expr(plan, analyse_expr, &a);
	/* A sink column fed the value itself needs the jsonb too. */
	if (plan->out_schema == plan->schema)
		for (int i = 0; i < plan->sink->ncolumns; i++)
			if (plan->sink->columns[i].slot == FIELD_VALUE)
				a.other_use = true;
	if (a.other_use)
		return NULL;
	a.jf = palloc0(sizeof(JsonFields));
	for_each_expr(plan, rewrite_expr, &a);
	plan->schema->fields[FIELD_VALUE].referenced = false;
	return a.jf;
}

/*
 * The scanner
 */

static void pg_attribute_noreturn()
syntax_error(Scanner *s, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
			 errmsg("invalid input syntax for type json"),
			 errdetail("%s at byte %d of the message.", what, (int) (s->p - s->text))));
}

static inline void
skip_space(Scanner *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		s->p++;
}

static int
hex_value(Scanner *s, const char *p)
{
	int			v = 0;

	for (int i = 0; i < 4; i++)
	{
		char		c = p[i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			syntax_error(s, "\"\\u\" must be followed by four hexadecimal digits");
	}
	return v;
}

/*
 * A string at s->p (the opening quote): validated and skipped; when out is
 * not NULL, its unescaped bytes are appended.
 */
static void
scan_string(Scanner *s, StringInfo out)
{
	const char *run;

	s->p++;						/* the quote */
	run = s->p;
	for (;;)
	{
		unsigned char c;

		if (s->p >= s->end)
			syntax_error(s, "Unterminated string");
		c = (unsigned char) *s->p;
		if (c == '"')
			break;
		if (c < 0x20)
			syntax_error(s, "Control characters must be escaped in strings");
		if (c != '\\')
		{
			s->p++;
			continue;
		}
		if (out)
			appendBinaryStringInfo(out, run, s->p - run);
		if (s->p + 1 >= s->end)
			syntax_error(s, "Unterminated string");
		switch (s->p[1])
		{
			case '"':
			case '\\':
			case '/':
				if (out)
					appendStringInfoChar(out, s->p[1]);
				s->p += 2;
				break;
			case 'b':
			case 'f':
			case 'n':
			case 'r':
			case 't':
				if (out)
					appendStringInfoChar(out, s->p[1] == 'b' ? '\b' : s->p[1] == 'f' ? '\f' :
										 s->p[1] == 'n' ? '\n' : s->p[1] == 'r' ? '\r' : '\t');
				s->p += 2;
				break;
			case 'u':
				{
					pg_wchar	cp;

					if (s->p + 6 > s->end)
						syntax_error(s, "\"\\u\" must be followed by four hexadecimal digits");
					cp = hex_value(s, s->p + 2);
					s->p += 6;
					if (cp >= 0xD800 && cp <= 0xDBFF)
					{
						int			low;

						if (s->p + 6 > s->end || s->p[0] != '\\' || s->p[1] != 'u' ||
							(low = hex_value(s, s->p + 2)) < 0xDC00 || low > 0xDFFF)
							syntax_error(s, "Unicode high surrogate must not follow a high surrogate, and must be followed by a low one");
						cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
						s->p += 6;
					}
					else if (cp >= 0xDC00 && cp <= 0xDFFF)
						syntax_error(s, "Unicode low surrogate must follow a high surrogate");
					if (cp == 0)
						ereport(ERROR,
								(errcode(ERRCODE_UNTRANSLATABLE_CHARACTER),
								 errmsg("unsupported Unicode escape sequence"),
								 errdetail("\\u0000 cannot be converted to text.")));
					if (out)
					{
						unsigned char buf[8];

						unicode_to_utf8(cp, buf);
						appendBinaryStringInfo(out, (char *) buf, pg_utf_mblen(buf));
					}
				}
				break;
			default:
				syntax_error(s, "Escape sequence is invalid");
		}
		run = s->p;
	}
	if (out)
		appendBinaryStringInfo(out, run, s->p - run);
	s->p++;						/* the quote */
}

static void
scan_digits(Scanner *s)
{
	if (s->p >= s->end || *s->p < '0' || *s->p > '9')
		syntax_error(s, "Number is invalid");
	while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
		s->p++;
}

static void
scan_number(Scanner *s)
{
	if (*s->p == '-')
		s->p++;
	if (s->p < s->end && *s->p == '0')
		s->p++;
	else
		scan_digits(s);
	if (s->p < s->end && *s->p == '.')
	{
		s->p++;
		scan_digits(s);
	}
	if (s->p < s->end && (*s->p == 'e' || *s->p == 'E'))
	{
		s->p++;
		if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
			s->p++;
		scan_digits(s);
	}
}

static void scan_value(Scanner *s, int depth, JsonFields *jf, FieldSpan *spans);

static void
scan_literal(Scanner *s, const char *word)
{
	int			n = strlen(word);

	if (s->end - s->p < n || memcmp(s->p, word, n) != 0)
		syntax_error(s, "Token is invalid");
	s->p += n;
}

/*
 * A value at s->p.  At depth 0, an object's members whose key is wanted
 * have their value's span noted in spans (the last one wins, as in jsonb).
 */
static void
scan_value(Scanner *s, int depth, JsonFields *jf, FieldSpan *spans)
{
	StringInfoData key;

	skip_space(s);
	if (s->p >= s->end)
		syntax_error(s, "The input string ended unexpectedly");
	check_stack_depth();
	switch (*s->p)
	{
		case '{':
			s->p++;
			skip_space(s);
			if (s->p < s->end && *s->p == '}')
			{
				s->p++;
				return;
			}
			if (depth == 0)
				initStringInfo(&key);
			for (;;)
			{
				int			wanted = -1;
				const char *start;

				skip_space(s);
				if (s->p >= s->end || *s->p != '"')
					syntax_error(s, "Expected string");
				if (depth == 0)
				{
					resetStringInfo(&key);
					scan_string(s, &key);
					for (int i = 0; i < jf->nfields; i++)
						if (jf->fields[i].key_len == key.len &&
							memcmp(jf->fields[i].key, key.data, key.len) == 0)
							wanted = i;
				}
				else
					scan_string(s, NULL);
				skip_space(s);
				if (s->p >= s->end || *s->p != ':')
					syntax_error(s, "Expected \":\"");
				s->p++;
				skip_space(s);
				start = s->p;
				scan_value(s, depth + 1, jf, spans);
				if (wanted >= 0)
				{
					spans[wanted].start = start;
					spans[wanted].end = s->p;
				}
				skip_space(s);
				if (s->p < s->end && *s->p == ',')
				{
					s->p++;
					continue;
				}
				if (s->p < s->end && *s->p == '}')
				{
					s->p++;
					return;
				}
				syntax_error(s, "Expected \",\" or \"}\"");
			}
		case '[':
			s->p++;
			skip_space(s);
			if (s->p < s->end && *s->p == ']')
			{
				s->p++;
				return;
			}
			for (;;)
			{
				scan_value(s, depth + 1, jf, spans);
				skip_space(s);
				if (s->p < s->end && *s->p == ',')
				{
					s->p++;
					continue;
				}
				if (s->p < s->end && *s->p == ']')
				{
					s->p++;
					return;
				}
				syntax_error(s, "Expected \",\" or \"]\"");
			}
		case '"':
			scan_string(s, NULL);
			return;
		case 't':
			scan_literal(s, "true");
			return;
		case 'f':
			scan_literal(s, "false");
			return;
		case 'n':
			scan_literal(s, "null");
			return;
		default:
			if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))
			{
				scan_number(s);
				return;
			}
			syntax_error(s, "Token is invalid");
	}
}

static Datum
span_jsonb(FieldSpan *span)
{
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(pnstrdup(span->start, span->end - span->start)));
}

/* What value->>'key' gives for a field's JSON text. */
static Datum
span_text(FieldSpan *span, bool *isnull)
{
	const char *p = span->start;
	int			n = span->end - span->start;

	*isnull = false;
	switch (*p)
	{
		case '"':
			{
				StringInfoData buf;
				Scanner		s = {p, span->end, p, n};

				initStringInfo(&buf);
				scan_string(&s, &buf);
				return PointerGetDatum(cstring_to_text_with_len(buf.data, buf.len));
			}
		case 'n':
			*isnull = true;
			return (Datum) 0;
		case 't':
		case 'f':
			return PointerGetDatum(cstring_to_text_with_len(p, n));
		case '{':
		case '[':
			{
				Jsonb	   *jb = DatumGetJsonbP(span_jsonb(span));

				return PointerGetDatum(cstring_to_text(JsonbToCString(NULL, &jb->root, VARSIZE(jb))));
			}
		default:
			/* A number: as numeric prints it, as jsonb stores numbers as numeric. */
			if (memchr(p, 'e', n) || memchr(p, 'E', n) || (n > 1 && p[0] == '-' && p[1] == '0'))
			{
				Datum		num = DirectFunctionCall3(numeric_in, CStringGetDatum(pnstrdup(p, n)),
													  ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));

				return PointerGetDatum(cstring_to_text(DatumGetCString(DirectFunctionCall1(numeric_out, num))));
			}
			return PointerGetDatum(cstring_to_text_with_len(p, n));
	}
}

void
json_fields_extract(JsonFields *jf, const char *text, int len, Record *rec)
{
	Scanner		s = {text, text + len, text, len};
	FieldSpan  *spans = palloc0(sizeof(FieldSpan) * Max(jf->nfields, 1));
	bool		is_object;

	skip_space(&s);
	is_object = s.p < s.end && *s.p == '{';
	scan_value(&s, 0, jf, spans);
	skip_space(&s);
	if (s.p != s.end)
		syntax_error(&s, "Expected end of input");

	for (int i = 0; i < jf->nfields; i++)
	{
		JsonField  *f = &jf->fields[i];
		bool		found = is_object && spans[i].start != NULL;

		if (f->text_slot >= 0)
		{
			rec->isnull[f->text_slot] = true;
			if (found)
				rec->values[f->text_slot] = span_text(&spans[i], &rec->isnull[f->text_slot]);
		}
		if (f->jsonb_slot >= 0)
		{
			rec->isnull[f->jsonb_slot] = !found;
			if (found)
				rec->values[f->jsonb_slot] = span_jsonb(&spans[i]);
		}
	}
}

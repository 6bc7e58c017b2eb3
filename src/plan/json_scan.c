/*
 * json_scan.c
 *		Top-level JSON fields straight from the message text (json_scan.h).
 *
 * Building a jsonb for every message costs more than everything else a
 * simple job does per record, while most jobs read a few top-level fields.
 * The scanner below validates the JSON text as PostgreSQL's parser would
 * (RFC 8259 grammar; \u0000 refused) and keeps the last occurrence of each
 * wanted key, as jsonb does.  A field's value then becomes what ->> or ->
 * would give: strings unescaped, numbers as numeric prints them, nested
 * values through jsonb itself.
 *
 * Where the scanner could decide differently from jsonb_in, it declines and
 * the message goes through jsonb_in and the operators themselves: nesting
 * deeper than JSON_FIELDS_MAX_DEPTH (jsonb_in's stack depth limit is not
 * ours) and messages over JSON_FIELDS_MAX_LEN (jsonb's size limits).  The
 * differential fuzzer in test/fuzz holds the two to the same answers.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/int.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/numeric.h"

#include "plan/json_scan.h"

/* Deeper nesting is left to jsonb_in, whose stack depth limit then decides. */
#define JSON_FIELDS_MAX_DEPTH 128

/* Larger messages are left to jsonb_in: below this, no jsonb limit is reached. */
#define JSON_FIELDS_MAX_LEN (16 * 1024 * 1024)

/* Numbers longer than this may exceed numeric's weight or scale. */
#define JSON_FIELDS_SAFE_NUMBER_LEN 1000

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
	bool		declined;		/* too deep: leave the message to jsonb_in */
	bool		jsonb_errors;	/* invalid JSON fails as jsonb_in says it */
} Scanner;

/*
 * A job that builds the value (JsonFields.lazy_value) built it from every
 * message before, so its dead letters carry jsonb_in's error for invalid
 * JSON: give that one, from the whole message, the scanner having found
 * the message invalid.
 */
static void
fail_as_jsonb(Scanner *s)
{
	if (s->jsonb_errors)
		(void) DirectFunctionCall1(jsonb_in, CStringGetDatum(pnstrdup(s->text, s->len)));
}

static void pg_attribute_noreturn()
syntax_error(Scanner *s, const char *what)
{
	fail_as_jsonb(s);
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
 * A \u escape at s->p (a surrogate pair takes two): skipped, and its
 * character appended to out in UTF-8 when out is not NULL.
 */
static void
scan_unicode_escape(Scanner *s, StringInfo out)
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
	{
		fail_as_jsonb(s);
		ereport(ERROR,
				(errcode(ERRCODE_UNTRANSLATABLE_CHARACTER),
				 errmsg("unsupported Unicode escape sequence"),
				 errdetail("\\u0000 cannot be converted to text.")));
	}
	if (out)
	{
		unsigned char buf[8];

		unicode_to_utf8(cp, buf);
		appendBinaryStringInfo(out, (char *) buf, pg_utf_mblen(buf));
	}
}

/* A byte that stands for itself in a JSON string. */
static inline bool
is_plain_string_byte(unsigned char c)
{
	return c >= 0x20 && c != '"' && c != '\\';
}

#define BYTES_OF(c) (UINT64CONST(0x0101010101010101) * (c))

/*
 * Whether the 8 bytes at p may hold a byte that does not stand for itself
 * in a string: a quote, a backslash or a control character.  (A zero byte
 * of w ^ BYTES_OF(c) is a byte c; subtracting 0x20 from each byte borrows
 * from those below 0x20.  A byte found may be wrong only after a right one:
 * the caller then goes byte by byte.)
 */
static inline bool
may_end_plain_run(const char *p)
{
	uint64		w;
	uint64		q;
	uint64		b;

	memcpy(&w, p, sizeof(w));
	q = w ^ BYTES_OF('"');
	b = w ^ BYTES_OF('\\');
	return (((q - BYTES_OF(0x01)) & ~q) |
			((b - BYTES_OF(0x01)) & ~b) |
			((w - BYTES_OF(0x20)) & ~w)) & BYTES_OF(0x80);
}

/*
 * A string at s->p (the opening quote): validated and skipped; when out is
 * not NULL, its unescaped bytes are appended.  True if it had escapes.
 */
static bool
scan_string(Scanner *s, StringInfo out)
{
	const char *run;
	bool		escaped = false;

	s->p++;						/* the quote */
	run = s->p;
	for (;;)
	{
		unsigned char c;

		while (s->end - s->p >= 8 && !may_end_plain_run(s->p))
			s->p += 8;
		while (s->p < s->end && is_plain_string_byte((unsigned char) *s->p))
			s->p++;
		if (s->p >= s->end)
			syntax_error(s, "Unterminated string");
		c = (unsigned char) *s->p;
		if (c == '"')
			break;
		if (c < 0x20)
			syntax_error(s, "Control characters must be escaped in strings");
		escaped = true;
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
				scan_unicode_escape(s, out);
				break;
			default:
				syntax_error(s, "Escape sequence is invalid");
		}
		run = s->p;
	}
	if (out)
		appendBinaryStringInfo(out, run, s->p - run);
	s->p++;						/* the quote */
	return escaped;
}

static void
scan_digits(Scanner *s)
{
	if (s->p >= s->end || *s->p < '0' || *s->p > '9')
		syntax_error(s, "Number is invalid");
	while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
		s->p++;
}

/*
 * The number at s->p: skipped if it is one by the JSON grammar.  True if it
 * has an exponent.
 */
static bool
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
		return true;
	}
	return false;
}

/* PostgreSQL's JSON_ALPHANUMERIC_CHAR: what its lexer reads as one word. */
static inline bool
is_word_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		c == '_' || IS_HIGHBIT_SET(c);
}

/*
 * Fail as PostgreSQL's lexer would on the token at s->p, without moving.
 * jsonb_in lexes the token after a number before it converts the number.
 */
static void
lex_next_token(Scanner *s)
{
	Scanner		t = *s;
	const char *word;

	skip_space(&t);
	if (t.p >= t.end || (*t.p != '\0' && strchr("{}[],:", *t.p) != NULL))
		return;
	if (*t.p == '"')
	{
		scan_string(&t, NULL);
		return;
	}
	if (*t.p == '-' || (*t.p >= '0' && *t.p <= '9'))
	{
		scan_number(&t);
		if (t.p < t.end && is_word_char(*t.p))
			syntax_error(&t, "Token is invalid");
		return;
	}
	word = t.p;
	while (t.p < t.end && is_word_char(*t.p))
		t.p++;
	if ((t.p - word == 4 && (memcmp(word, "true", 4) == 0 || memcmp(word, "null", 4) == 0)) ||
		(t.p - word == 5 && memcmp(word, "false", 5) == 0))
		return;
	syntax_error(&t, "Token is invalid");
}

/*
 * A number, which jsonb_in converts to numeric: one with an exponent or
 * many digits may be out of numeric's range, and is converted here too, so
 * that it fails as it would there (and after the same next token).  As in
 * PostgreSQL's lexer, letters or digits right after it make it an invalid
 * token, before any conversion.
 */
static void
scan_numeric(Scanner *s)
{
	const char *start = s->p;
	bool		exponent;
	int			n;

	exponent = scan_number(s);
	if (s->p < s->end && is_word_char(*s->p))
		syntax_error(s, "Token is invalid");
	n = s->p - start;
	if (n > JSON_FIELDS_SAFE_NUMBER_LEN || exponent)
	{
		lex_next_token(s);
		(void) DirectFunctionCall3(numeric_in, CStringGetDatum(pnstrdup(start, n)),
								   ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
	}
}

/*
 * A token in the wrong place.  PostgreSQL's parser has lexed it before it
 * sees that, so an invalid token (\u0000 in a string is another SQLSTATE)
 * is the error reported.
 */
static void pg_attribute_noreturn()
grammar_error(Scanner *s, const char *what)
{
	lex_next_token(s);
	syntax_error(s, what);
}

static void scan_value(Scanner *s, int depth, JsonFields *jf, FieldSpan *spans);
static void scan_object(Scanner *s, int depth, JsonFields *jf, FieldSpan *spans);
static void scan_array(Scanner *s, int depth, JsonFields *jf, FieldSpan *spans);
static int	scan_key(Scanner *s, JsonFields *jf);
static bool scan_empty(Scanner *s, char close);
static bool scan_separator(Scanner *s, char close, const char *expected);

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
	skip_space(s);
	if (s->p >= s->end)
		syntax_error(s, "The input string ended unexpectedly");
	if (depth > JSON_FIELDS_MAX_DEPTH)
	{
		s->declined = true;
		return;
	}
	/* Frames here are small: a check every few levels is enough. */
	if (depth % 16 == 15)
		check_stack_depth();
	switch (*s->p)
	{
		case '{':
			scan_object(s, depth, jf, spans);
			return;
		case '[':
			scan_array(s, depth, jf, spans);
			return;
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
				scan_numeric(s);
				return;
			}
			syntax_error(s, "Token is invalid");
	}
}

/* The object at s->p; at depth 0, its wanted members' spans. */
static void
scan_object(Scanner *s, int depth, JsonFields *jf, FieldSpan *spans)
{
	if (scan_empty(s, '}'))
		return;
	do
	{
		int			wanted = -1;
		const char *start;

		skip_space(s);
		if (s->p >= s->end || *s->p != '"')
			grammar_error(s, "Expected string");
		if (depth == 0)
			wanted = scan_key(s, jf);
		else
			scan_string(s, NULL);
		skip_space(s);
		if (s->p >= s->end || *s->p != ':')
			grammar_error(s, "Expected \":\"");
		s->p++;
		skip_space(s);
		start = s->p;
		scan_value(s, depth + 1, jf, spans);
		if (s->declined)
			return;
		if (wanted >= 0)
		{
			spans[wanted].start = start;
			spans[wanted].end = s->p;
		}
	} while (scan_separator(s, '}', "Expected \",\" or \"}\""));
}

static void
scan_array(Scanner *s, int depth, JsonFields *jf, FieldSpan *spans)
{
	if (scan_empty(s, ']'))
		return;
	do
	{
		scan_value(s, depth + 1, jf, spans);
		if (s->declined)
			return;
	} while (scan_separator(s, ']', "Expected \",\" or \"]\""));
}

/*
 * A top-level member's key: the index of the wanted field it names, or -1.
 * A key without escapes is compared as it stands in the text.
 */
static int
scan_key(Scanner *s, JsonFields *jf)
{
	const char *key = s->p + 1;
	bool		escaped = scan_string(s, NULL);
	int			len = s->p - 1 - key;

	if (escaped)
	{
		Scanner		k = {key - 1, s->p, key - 1, len + 2};

		resetStringInfo(&jf->scratch);
		scan_string(&k, &jf->scratch);
		key = jf->scratch.data;
		len = jf->scratch.len;
	}
	/* Keys are distinct in jf. */
	for (int i = 0; i < jf->nfields; i++)
		if (jf->fields[i].key_len == len && memcmp(jf->fields[i].key, key, len) == 0)
			return i;
	return -1;
}

/*
 * Past the opening bracket at s->p; true, and past the closing one too,
 * when that follows at once.
 */
static bool
scan_empty(Scanner *s, char close)
{
	s->p++;
	skip_space(s);
	if (s->p < s->end && *s->p == close)
	{
		s->p++;
		return true;
	}
	return false;
}

/* After a member or an element: true past a comma, false past close. */
static bool
scan_separator(Scanner *s, char close, const char *expected)
{
	skip_space(s);
	if (s->p < s->end && *s->p == ',')
	{
		s->p++;
		return true;
	}
	if (s->p < s->end && *s->p == close)
	{
		s->p++;
		return false;
	}
	grammar_error(s, expected);
}

static Datum
span_jsonb(FieldSpan *span)
{
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(pnstrdup(span->start, span->end - span->start)));
}

/* What value->>'key' gives for a field's JSON text. */
static Datum
span_text(JsonFields *jf, FieldSpan *span, bool *isnull)
{
	const char *p = span->start;
	int			n = span->end - span->start;

	*isnull = false;
	switch (*p)
	{
		case '"':
			{
				Scanner		s = {p, span->end, p, n};

				/* Most strings have no escapes: their text is as it stands. */
				if (memchr(p + 1, '\\', n - 2) == NULL)
					return PointerGetDatum(cstring_to_text_with_len(p + 1, n - 2));
				resetStringInfo(&jf->scratch);
				scan_string(&s, &jf->scratch);
				return PointerGetDatum(cstring_to_text_with_len(jf->scratch.data, jf->scratch.len));
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

/* fn(jb, key) as its SQL operator calls it: the result may be NULL. */
static Datum
call_field(PGFunction fn, Datum jb, JsonField *f, bool *isnull)
{
	LOCAL_FCINFO(fcinfo, 2);
	Datum		result;

	InitFunctionCallInfoData(*fcinfo, NULL, 2, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = jb;
	fcinfo->args[0].isnull = false;
	fcinfo->args[1].value = PointerGetDatum(cstring_to_text_with_len(f->key, f->key_len));
	fcinfo->args[1].isnull = false;
	result = fn(fcinfo);
	*isnull = fcinfo->isnull;
	return result;
}

/*
 * What computes a record's pending fields: the message text and, per
 * wanted field, where its value is in it (or the jsonb built from it, when
 * the scanner declined the message).
 */
typedef struct JsonPending
{
	JsonFields *jf;
	const char *text;
	int			len;
	bool		is_object;
	Datum		jb;				/* 0 unless built at once */
	Datum		value;			/* the value built lazily, 0 until then: one
								 * jsonb shared by the record and its copies
								 * (a flat_map's outputs) */
	FieldSpan	spans[FLEXIBLE_ARRAY_MEMBER];
} JsonPending;

/* Mark rec's lazily computed fields pending. */
static void
set_pending(JsonFields *jf, const char *text, int len, Record *rec, FieldSpan *spans,
			bool is_object, Datum jb)
{
	JsonPending *jp;

	if (!jf->lazy_value && jf->ntyped == 0)
		return;
	jp = palloc(offsetof(JsonPending, spans) + sizeof(FieldSpan) * jf->nfields);
	jp->jf = jf;
	jp->text = text;
	jp->len = len;
	jp->is_object = is_object;
	jp->jb = jb;
	jp->value = (Datum) 0;
	if (spans)
		memcpy(jp->spans, spans, sizeof(FieldSpan) * jf->nfields);
	rec->json = jp;
	rec->pending = palloc0(sizeof(bool) * jf->nslots);
	for (int i = 0; i < jf->ntyped; i++)
		rec->pending[jf->typed[i].slot] = true;
	if (jf->lazy_value)
	{
		rec->isnull[FIELD_VALUE] = false;
		if (jb != (Datum) 0)
			rec->values[FIELD_VALUE] = jb;
		else
			rec->pending[FIELD_VALUE] = true;
	}
}

/* The fields through jsonb_in and the operators, for what the scanner declines. */
static void
extract_with_jsonb(JsonFields *jf, const char *text, int len, Record *rec)
{
	Datum		jb = DirectFunctionCall1(jsonb_in, CStringGetDatum(pnstrdup(text, len)));

	for (int i = 0; i < jf->nfields; i++)
	{
		JsonField  *f = &jf->fields[i];

		if (f->text_slot >= 0)
			rec->values[f->text_slot] = call_field(jsonb_object_field_text, jb, f,
												   &rec->isnull[f->text_slot]);
		if (f->jsonb_slot >= 0)
			rec->values[f->jsonb_slot] = call_field(jsonb_object_field, jb, f,
													&rec->isnull[f->jsonb_slot]);
	}
	set_pending(jf, text, len, rec, NULL, false, jb);
}

/*
 * The scratch buffer is kept from message to message, but not at the size
 * of the largest string ever seen (up to JSON_FIELDS_MAX_LEN, in a context
 * no checkpoint accounts for): above this it is given back after use, and a
 * small one made again.  Copying a string this long costs more than that.
 */
#define SCRATCH_KEEP_MAX	(64 * 1024)
#define SCRATCH_INITIAL		1024

static void
scratch_trim(JsonFields *jf)
{
	if (jf->scratch.data != NULL && jf->scratch.maxlen > SCRATCH_KEEP_MAX)
	{
		pfree(jf->scratch.data);
		jf->scratch.data = MemoryContextAlloc(GetMemoryChunkContext(jf), SCRATCH_INITIAL);
		jf->scratch.maxlen = SCRATCH_INITIAL;
		resetStringInfo(&jf->scratch);
	}
}

void
json_fields_extract(JsonFields *jf, const char *text, int len, Record *rec)
{
	Scanner		s = {text, text + len, text, len, false};
	FieldSpan  *spans;
	bool		is_object;

	if (len > JSON_FIELDS_MAX_LEN)
	{
		extract_with_jsonb(jf, text, len, rec);
		return;
	}
	if (jf->spans == NULL)
	{
		MemoryContext cxt = GetMemoryChunkContext(jf);

		jf->spans = MemoryContextAlloc(cxt, sizeof(FieldSpan) * Max(jf->nfields, 1));
		jf->scratch.data = MemoryContextAlloc(cxt, SCRATCH_INITIAL);
		jf->scratch.maxlen = SCRATCH_INITIAL;
		resetStringInfo(&jf->scratch);
	}
	/* Also after a previous message that failed half way. */
	scratch_trim(jf);
	spans = jf->spans;
	memset(spans, 0, sizeof(FieldSpan) * jf->nfields);
	s.jsonb_errors = jf->lazy_value;
	skip_space(&s);
	is_object = s.p < s.end && *s.p == '{';
	scan_value(&s, 0, jf, spans);
	if (s.declined)
	{
		scratch_trim(jf);
		extract_with_jsonb(jf, text, len, rec);
		return;
	}
	skip_space(&s);
	if (s.p != s.end)
		grammar_error(&s, "Expected end of input");

	for (int i = 0; i < jf->nfields; i++)
	{
		JsonField  *f = &jf->fields[i];
		bool		found = is_object && spans[i].start != NULL;

		if (f->text_slot >= 0)
		{
			rec->isnull[f->text_slot] = true;
			if (found)
				rec->values[f->text_slot] = span_text(jf, &spans[i], &rec->isnull[f->text_slot]);
		}
		if (f->jsonb_slot >= 0)
		{
			rec->isnull[f->jsonb_slot] = !found;
			if (found)
				rec->values[f->jsonb_slot] = span_jsonb(&spans[i]);
		}
	}
	set_pending(jf, text, len, rec, spans, is_object, (Datum) 0);
	scratch_trim(jf);
}

/*
 * The text value->>'key' gives for a field, as the C string the cast's
 * output function would make of it; NULL for SQL NULL.  The usual values
 * (strings, plain numbers, true and false) are copied straight from the
 * message into the scratch buffer.
 */
static char *
field_cstring(JsonPending *jp, JsonField *f, int field)
{
	JsonFields *jf = jp->jf;
	FieldSpan  *span = &jp->spans[field];
	const char *p = span->start;
	int			n = span->end - span->start;
	bool		isnull;
	Datum		d;

	if (jp->jb != (Datum) 0)
		d = call_field(jsonb_object_field_text, jp->jb, f, &isnull);
	else if (!jp->is_object || p == NULL)
		return NULL;
	else
	{
		bool		plain;

		switch (*p)
		{
			case '"':
				plain = memchr(p + 1, '\\', n - 2) == NULL;
				p++;
				n -= 2;
				break;
			case 't':
			case 'f':
				plain = true;
				break;
			case '-':
			case '0':
			case '1':
			case '2':
			case '3':
			case '4':
			case '5':
			case '6':
			case '7':
			case '8':
			case '9':
				/* As span_text: numeric_out's form when it differs from the text's. */
				plain = !(memchr(p, 'e', n) || memchr(p, 'E', n) || (n > 1 && p[0] == '-' && p[1] == '0'));
				break;
			default:
				plain = false;
		}
		if (plain)
		{
			resetStringInfo(&jf->scratch);
			appendBinaryStringInfo(&jf->scratch, p, n);
			return jf->scratch.data;
		}
		d = span_text(jf, span, &isnull);
	}
	return isnull ? NULL : TextDatumGetCString(d);
}

/*
 * A JSON number without an exponent and of at most 18 digits, as an int64
 * and its count of decimals: numeric_in's value and display scale, built
 * without parsing the text again.  False for any other field.
 */
static bool
plain_decimal(JsonPending *jp, int field, int64 *val, int *scale)
{
	FieldSpan  *span = &jp->spans[field];
	const char *p = span->start;
	bool		negative = false;
	int			digits = 0;
	int64		v = 0;

	if (jp->jb != (Datum) 0 || !jp->is_object || p == NULL)
		return false;
	if (*p == '-')
	{
		negative = true;
		p++;
	}
	*scale = -1;
	for (; p < span->end; p++)
	{
		if (*p == '.' && *scale < 0)
		{
			*scale = 0;
			continue;
		}
		if (*p < '0' || *p > '9' || ++digits > 18)
			return false;
		v = v * 10 + (*p - '0');
		if (*scale >= 0)
			(*scale)++;
	}
	if (digits == 0)
		return false;
	*scale = Max(*scale, 0);
	*val = negative ? -v : v;
	return true;
}

/*
 * Whether plain_decimal's value and scale can be made into the numeric
 * directly, exactly on every PostgreSQL 15 minor release.
 *
 * Before upstream commit b2d47928 (back-patched to 14, in a 15 minor
 * release we do not require), int64_div_fast_to_numeric was wrong with
 * log10val2 <= 0, with log10val2 a multiple of DEC_DIGITS (4), and in its
 * slow path, taken when val1 times 10^(4 - log10val2 % 4) overflows int64
 * (10^log10val2 computed in an int).
 * PostgreSQL itself only ever calls it with 3 or 6, through the path that
 * multiplies without overflow.  So it is used only there: a scale that is
 * not a multiple of 4 and a value whose multiple fits in int64.  A scale of
 * 0 is int64_to_numeric, as int8_numeric makes it.  Anything else goes to
 * numeric_in, which costs little next to the rest of the record.
 */
static bool
direct_numeric_ok(int64 val, int scale)
{
	static const int64 factor[] = {1, 1000, 100, 10};
	int64		product;

	if (scale == 0)
		return true;
	if (scale % 4 == 0)
		return false;
	return !pg_mul_s64_overflow(val, factor[scale % 4], &product);
}

void
json_field_build(Record *rec, int slot)
{
	JsonPending *jp = rec->json;
	MemoryContext old = MemoryContextSwitchTo(GetMemoryChunkContext(rec->values));

	if (slot == FIELD_VALUE)
	{
		/*
		 * Built once for the message, in the context of its JsonPending
		 * (which every copy of the record shares, and which lives as long as
		 * the text it points into): a flat_map's outputs all take this one
		 * value, as when it was built with the record.
		 */
		if (jp->value == (Datum) 0)
		{
			char	   *text;

			MemoryContextSwitchTo(GetMemoryChunkContext(jp));
			text = pnstrdup(jp->text, jp->len);
			/* The scanner found the text valid: this fails only as the scanner would have. */
			jp->value = DirectFunctionCall1(jsonb_in, CStringGetDatum(text));
			pfree(text);
		}
		rec->values[FIELD_VALUE] = jp->value;
	}
	else
	{
		JsonTypedField *t = NULL;
		char	   *str;
		int64		val;
		int			scale;

		for (int i = 0; i < jp->jf->ntyped && t == NULL; i++)
			if (jp->jf->typed[i].slot == slot)
				t = &jp->jf->typed[i];
		Assert(t != NULL);
		if (t->finfo == NULL)
		{
			FmgrInfo   *finfo = MemoryContextAlloc(GetMemoryChunkContext(jp->jf), sizeof(FmgrInfo));

			fmgr_info_cxt(t->input, finfo, GetMemoryChunkContext(jp->jf));
			t->finfo = finfo;
		}
		/*
		 * The usual amount or id, 12.34 or 17: the input function's result,
		 * made directly.  An integer out of its type's range goes to the
		 * input function, for its error.
		 */
		if (t->type == NUMERICOID && plain_decimal(jp, t->field, &val, &scale) &&
			direct_numeric_ok(val, scale))
		{
			rec->values[slot] = NumericGetDatum(scale == 0 ? int64_to_numeric(val) :
												int64_div_fast_to_numeric(val, scale));
			rec->isnull[slot] = false;
		}
		else if ((t->type == INT8OID || t->type == INT4OID || t->type == INT2OID) &&
				 plain_decimal(jp, t->field, &val, &scale) && scale == 0 &&
				 (t->type == INT8OID ||
				  (t->type == INT4OID && val >= PG_INT32_MIN && val <= PG_INT32_MAX) ||
				  (t->type == INT2OID && val >= PG_INT16_MIN && val <= PG_INT16_MAX)))
		{
			rec->values[slot] = t->type == INT8OID ? Int64GetDatum(val) :
				t->type == INT4OID ? Int32GetDatum((int32) val) : Int16GetDatum((int16) val);
			rec->isnull[slot] = false;
		}
		else
		{
			str = field_cstring(jp, &jp->jf->fields[t->field], t->field);
			/* The input function is strict: NULL gives NULL, as the cast does. */
			rec->isnull[slot] = str == NULL;
			rec->values[slot] = str == NULL ? (Datum) 0 :
				InputFunctionCall(t->finfo, str, t->ioparam, -1);
			scratch_trim(jp->jf);
		}
	}
	rec->pending[slot] = false;
	MemoryContextSwitchTo(old);
}

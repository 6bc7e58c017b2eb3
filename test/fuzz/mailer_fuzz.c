/*
 * mailer_fuzz.c
 *		Differential fuzzing of mailer's two hand-written parsers against
 *		PostgreSQL's own: the JSON field scanner (src/plan/json_scan.c) against
 *		jsonb_in with ->> and ->, and the ISO 8601 fast path (src/base/iso_time.c)
 *		against timestamptz_in.
 *
 * A test-only module, never installed: test/fuzz/run.sh builds it with
 * AddressSanitizer and loads it into a throwaway cluster.  The reference
 * parsers live in the server binary, so the comparison runs inside a
 * backend.  Both parser files are compiled in here (not linked from
 * mailer.so) so that ASan instruments them and their static functions are
 * reachable; every input is handed to them followed by poisoned bytes, as a
 * Kafka message is not NUL-terminated, so that a read past its end is
 * reported.
 *
 * An input passes when the fast path gives each field (as text and as
 * jsonb) or the timestamp exactly as PostgreSQL does, or the same error
 * (same SQLSTATE), or (times only) declines and leaves it to timestamptz_in.
 */
#include "../../src/plan/json_scan.c"
#include "../../src/base/iso_time.c"

#include "common/pg_prng.h"
#include "funcapi.h"
#include <sanitizer/asan_interface.h>
#include "portability/instr_time.h"
#include "utils/memutils.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(mailer_fuzz_json);
PG_FUNCTION_INFO_V1(mailer_fuzz_json_check);
PG_FUNCTION_INFO_V1(mailer_fuzz_iso);
PG_FUNCTION_INFO_V1(mailer_fuzz_iso_check);
PG_FUNCTION_INFO_V1(mailer_fuzz_asan_selftest);

/* Keys read from every JSON input, each as ->> and as ->; generated keys overlap them. */
static const char *const fuzz_keys[] = {"a", "b", "k", "", "\xc3\xa9", "ab"};
#define NKEYS lengthof(fuzz_keys)
#define NSLOTS (NKEYS * 2)

/* Up to this many mismatches are described in a run's report. */
#define MAX_REPORTED 10

/* What one parser made of one input. */
typedef struct Outcome
{
	bool		error;
	char		sqlstate[6];
	char	   *message;
	bool		isnull[NSLOTS];
	char	   *value[NSLOTS];	/* ->> text, or jsonb_out of -> */
} Outcome;

/*
 * ASan's options, read when the module loads it: the server overwrites its
 * environment (the ps display), so ASAN_OPTIONS would not be seen.  The
 * runtime comes in with this module, not first in the process, so its
 * allocator does not see malloc: inputs get poisoned guard bytes instead
 * (guarded_copy).  Reports go to stderr, the server's log.
 */
const char *__asan_default_options(void);

const char *
__asan_default_options(void)
{
	return "verify_asan_link_order=0:detect_leaks=0:halt_on_error=1";
}

/*
 * Note the current error in o and clear it.
 *
 * An ERROR's longjmp skipped the epilogues of the instrumented frames it
 * unwound, and without ASan's longjmp interceptor (the runtime is not
 * preloaded) their redzones stay poisoned: unpoison the stack below this
 * frame, deeper than the harness and the scanner ever go.
 */
static void
catch_error(Outcome *o, MemoryContext cxt)
{
	uintptr_t	sp = (uintptr_t) __builtin_frame_address(0);
	ErrorData  *ed;

	ASAN_UNPOISON_MEMORY_REGION((void *) (sp - 512 * 1024), 512 * 1024);
	MemoryContextSwitchTo(cxt);
	ed = CopyErrorData();
	FlushErrorState();
	o->error = true;
	strlcpy(o->sqlstate, unpack_sql_state(ed->sqlerrcode), sizeof(o->sqlstate));
	o->message = ed->message;
}

static JsonFields *
fuzz_fields(void)
{
	static JsonFields *jf = NULL;

	if (jf == NULL)
	{
		jf = MemoryContextAllocZero(TopMemoryContext, sizeof(JsonFields));
		jf->nfields = NKEYS;
		jf->fields = MemoryContextAllocZero(TopMemoryContext, sizeof(JsonField) * NKEYS);
		for (int i = 0; i < NKEYS; i++)
		{
			jf->fields[i].key = (char *) fuzz_keys[i];
			jf->fields[i].key_len = strlen(fuzz_keys[i]);
			jf->fields[i].text_slot = 2 * i;
			jf->fields[i].jsonb_slot = 2 * i + 1;
		}
	}
	return jf;
}

static char *
slot_string(int slot, Datum d)
{
	if (slot % 2 == 0)
		return TextDatumGetCString(d);
	return DatumGetCString(DirectFunctionCall1(jsonb_out, d));
}

/*
 * A copy of the input whose end is followed by poisoned bytes, so that
 * ASan reports any read past it (a Kafka message is not NUL-terminated).
 * The end is aligned to ASan's 8-byte granule; a read before the start is
 * caught from 8 bytes on.
 */
#define GUARD 64

static char *
guarded_copy(const char *data, int len, char **base)
{
	int			pad = (8 - len % 8) % 8;
	char	   *buf = aligned_alloc(8, GUARD + pad + len + GUARD);
	char	   *copy = buf + GUARD + pad;

	memcpy(copy, data, len);
	ASAN_POISON_MEMORY_REGION(buf, GUARD);
	ASAN_POISON_MEMORY_REGION(copy + len, GUARD);
	*base = buf;
	return copy;
}

static void
guarded_free(char *base, int len)
{
	int			pad = (8 - len % 8) % 8;

	ASAN_UNPOISON_MEMORY_REGION(base, GUARD + pad + len + GUARD);
	free(base);
}

/* The scanner, on a guarded copy of the input (as the pipeline calls it). */
static void
json_fast(const char *data, int len, Outcome *o)
{
	MemoryContext cxt = CurrentMemoryContext;
	char	   *base;
	char	   *buf = guarded_copy(data, len, &base);
	Datum		values[NSLOTS];
	Record		rec = {0};

	memset(o, 0, sizeof(*o));
	rec.values = values;
	rec.isnull = o->isnull;
	PG_TRY();
	{
		json_fields_extract(fuzz_fields(), buf, len, &rec);
		for (int i = 0; i < NSLOTS; i++)
			if (!o->isnull[i])
				o->value[i] = slot_string(i, values[i]);
	}
	PG_CATCH();
	{
		catch_error(o, cxt);
	}
	PG_END_TRY();
	guarded_free(base, len);
}

/* fn(jb, key) as the SQL operator calls it, which may return NULL. */
static Datum
reference_field(PGFunction fn, Datum jb, const char *key, bool *isnull)
{
	LOCAL_FCINFO(fcinfo, 2);
	Datum		result;

	InitFunctionCallInfoData(*fcinfo, NULL, 2, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = jb;
	fcinfo->args[0].isnull = false;
	fcinfo->args[1].value = CStringGetTextDatum(key);
	fcinfo->args[1].isnull = false;
	result = fn(fcinfo);
	*isnull = fcinfo->isnull;
	return result;
}

/* PostgreSQL: what the pipeline does without the scanner, then ->> and ->. */
static void
json_reference(const char *data, int len, Outcome *o)
{
	MemoryContext cxt = CurrentMemoryContext;

	memset(o, 0, sizeof(*o));
	PG_TRY();
	{
		Datum		jb = DirectFunctionCall1(jsonb_in, CStringGetDatum(pnstrdup(data, len)));

		for (int i = 0; i < NKEYS; i++)
			for (int j = 0; j < 2; j++)
			{
				int			slot = 2 * i + j;
				Datum		d = reference_field(j == 0 ? jsonb_object_field_text : jsonb_object_field,
										   jb, fuzz_keys[i], &o->isnull[slot]);

				if (!o->isnull[slot])
					o->value[slot] = slot_string(slot, d);
			}
	}
	PG_CATCH();
	{
		catch_error(o, cxt);
	}
	PG_END_TRY();
}

/* An input as a readable E'' literal, cut short if long. */
static char *
show_input(const char *data, int len)
{
	StringInfoData buf;
	int			n = Min(len, 300);

	initStringInfo(&buf);
	appendStringInfoString(&buf, "E'");
	for (int i = 0; i < n; i++)
	{
		unsigned char c = data[i];

		if (c == '\'' || c == '\\')
			appendStringInfo(&buf, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			appendStringInfo(&buf, "\\x%02x", c);
		else
			appendStringInfoChar(&buf, c);
	}
	appendStringInfoChar(&buf, '\'');
	if (n < len)
		appendStringInfo(&buf, " (first %d of %d bytes)", n, len);
	return buf.data;
}

/*
 * One JSON input through both paths: NULL if they agree, else what differs.
 * *rejected is set when the pipeline refuses the bytes before either parser
 * (a zero byte or invalid UTF-8): the scanner still runs, for ASan only.
 */
static char *
json_compare(const char *data, int len, bool *rejected, bool *failed)
{
	Outcome		fast;
	Outcome		ref;

	json_fast(data, len, &fast);
	*failed = fast.error;
	*rejected = memchr(data, '\0', len) != NULL || !pg_verify_mbstr(PG_UTF8, data, len, true);
	if (*rejected)
		return NULL;
	json_reference(data, len, &ref);
	if (fast.error != ref.error)
		return psprintf("input %s: scanner %s, jsonb_in %s",
						show_input(data, len),
						fast.error ? psprintf("fails (%s %s)", fast.sqlstate, fast.message) : "accepts",
						ref.error ? psprintf("fails (%s %s)", ref.sqlstate, ref.message) : "accepts");
	if (fast.error)
		return strcmp(fast.sqlstate, ref.sqlstate) == 0 ? NULL :
			psprintf("input %s: scanner fails with %s (%s), jsonb_in with %s (%s)",
					 show_input(data, len), fast.sqlstate, fast.message, ref.sqlstate, ref.message);
	for (int i = 0; i < NSLOTS; i++)
		if (fast.isnull[i] != ref.isnull[i] ||
			(!fast.isnull[i] && strcmp(fast.value[i], ref.value[i]) != 0))
			return psprintf("input %s: value%s'%s' is %s from the scanner, %s from jsonb",
							show_input(data, len), i % 2 ? "->" : "->>", fuzz_keys[i / 2],
							fast.isnull[i] ? "NULL" : quote_literal_cstr(fast.value[i]),
							ref.isnull[i] ? "NULL" : quote_literal_cstr(ref.value[i]));
	return NULL;
}

/*
 * One time input: NULL if the fast path declines, or accepts with the
 * value timestamptz_in gives; else what differs.
 */
static char *
iso_compare(const char *data, int len, bool *accepted)
{
	MemoryContext cxt = CurrentMemoryContext;
	char	   *base;
	char	   *buf = guarded_copy(data, len, &base);
	TimestampTz fast;
	TimestampTz ref = 0;
	Outcome		o = {0};

	*accepted = iso_time_parse(buf, len, &fast);
	guarded_free(base, len);
	/* text never holds a zero byte; the fast path saw it for ASan only */
	if (!*accepted || memchr(data, '\0', len) != NULL)
		return NULL;
	PG_TRY();
	{
		ref = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in,
													  CStringGetDatum(pnstrdup(data, len)),
													  ObjectIdGetDatum(InvalidOid),
													  Int32GetDatum(-1)));
	}
	PG_CATCH();
	{
		catch_error(&o, cxt);
	}
	PG_END_TRY();
	if (o.error)
		return psprintf("input %s: fast path accepts %s, timestamptz_in fails (%s %s)",
						show_input(data, len), timestamptz_to_str(fast), o.sqlstate, o.message);
	if (fast != ref)
		return psprintf("input %s: fast path gives %s, timestamptz_in %s",
						show_input(data, len), timestamptz_to_str(fast), timestamptz_to_str(ref));
	return NULL;
}

/*
 * The generators: structure-aware, from a seed, biased toward the edges
 * (escapes, surrogates, number limits, nesting, field ranges, offsets),
 * then sometimes mutated at the byte level (truncation, flips, splices).
 */

static pg_prng_state rng;

static int
rnd(int n)
{
	return (int) pg_prng_uint64_range(&rng, 0, n - 1);
}

static bool
chance(int percent)
{
	return rnd(100) < percent;
}

static const char *
pick(const char *const *list, int n)
{
	return list[rnd(n)];
}

#define PICK(list) pick(list, lengthof(list))

static void
gen_space(StringInfo out)
{
	static const char *const odd[] = {" ", "\t", "\n", "\r", "\r\n", "  \t ", "\f", "\v",
	"\xc2\xa0", "\xe2\x80\x8b", "\xef\xbb\xbf", "\x00"};

	if (chance(70))
		return;
	if (chance(97))
		appendStringInfoString(out, odd[rnd(5)]);
	else
	{
		int			i = rnd(lengthof(odd));

		appendBinaryStringInfo(out, odd[i], i == lengthof(odd) - 1 ? 1 : strlen(odd[i]));
	}
}

static void
gen_digits(StringInfo out, int n)
{
	for (int i = 0; i < n; i++)
		appendStringInfoChar(out, '0' + rnd(10));
}

static void
gen_number(StringInfo out)
{
	static const char *const edge[] = {
		"0", "-0", "-0.0", "0.0", "-0.000", "1", "-1", "0.5", "-0.5", "10", "1.50", "100.000",
		"1e400", "1E-400", "1e1000", "1e1001", "1e-1000", "1e-1001", "1e+1000", "-1e1001",
		"1e+5", "1.5E+2", "0e0", "-0e-0", "0e99999999999", "1e0000000000000000000005",
		"1e-0000000000000000000005", "1e2147483648", "1e-2147483649", "9e147483647",
		"9223372036854775808", "-9223372036854775809", "1.7976931348623157e308", "4.9e-324",
		"123456789012345678901234567890.123456789", "1e131071", "1e131072", "1e-16383",
		"1e-16384", "0.1e1001", "10e-1001", "0.0e-1000", "-0.0E+0", "1E0"};
	static const char *const bad[] = {
		"01", "00", "-", "+1", ".5", "5.", "1.e5", "1e", "1e+", "-e1", "0x10", "Infinity",
		"NaN", "-Infinity", "1_000", "-01", "1.0e+", "2.", "--1", "1-", "1e1e1", "1e5x"};

	if (chance(3))
	{
		appendStringInfoString(out, PICK(bad));
		return;
	}
	switch (rnd(6))
	{
		case 0:
		case 1:
			appendStringInfoString(out, PICK(edge));
			return;
		case 2:
			if (chance(30))
				appendStringInfoChar(out, '-');
			appendStringInfoChar(out, '1' + rnd(9));
			gen_digits(out, rnd(20));
			return;
		case 3:
			/* long digit runs: around the numeric weight and scale limits */
			{
				static const int sizes[] = {999, 1000, 1001, 16383, 16384, 16385, 131071,
				131072, 131073, 140000};
				int			n = chance(80) ? rnd(2000) : sizes[rnd(lengthof(sizes))];

				if (chance(50))
				{
					appendStringInfoString(out, "0.");
					gen_digits(out, n);
				}
				else
				{
					appendStringInfoChar(out, '1');
					gen_digits(out, n);
				}
				if (chance(30))
					appendStringInfo(out, "e%d", rnd(2400) - 1200);
				return;
			}
		default:
			if (chance(20))
				appendStringInfoChar(out, '-');
			appendStringInfoString(out, chance(30) ? "0" : "7");
			if (chance(50))
			{
				appendStringInfoChar(out, '.');
				gen_digits(out, 1 + rnd(8));
			}
			if (chance(50))
			{
				appendStringInfoChar(out, "eE"[rnd(2)]);
				if (chance(60))
					appendStringInfoChar(out, "+-"[rnd(2)]);
				appendStringInfo(out, "%d", chance(70) ? rnd(20) : rnd(3000));
			}
			return;
	}
}

static void
gen_string_body(StringInfo out)
{
	static const char *const piece[] = {
		"a", "b", "k", "ab", "x y", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
		"\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t",
		"\\u0061", "\\u00e9", "\\u00E9", "\\u20ac", "\\uFFFF", "\\uFFFE", "\\u0001",
		"\\u001f", "\\u007f", "\\ud83d\\ude00", "\\uD83D\\uDE00", "\\udbff\\udfff", "\x7f",
		"\\u0022", "\\u005c", "\\u002F", "\\u000a", "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf"};
	static const char *const bad[] = {
		"\\u0000", "\\ud800", "\\udc00", "\\udc00\\ud800", "\\ud800\\ud800", "\\ud800\\n",
		"\\ud800x", "\\ud800\\u0041", "\\ud800\\u", "\\ud800\\udc0", "\\ud800\\u0000", "\\u12",
		"\\u", "\\uzzzz", "\\u00g0", "\\x41", "\\a", "\\'", "\\U0041", "\\0", "\\", "\x01",
		"\x1f", "\t", "\n", "\xff", "\xc3", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80",
		"\xe2\x82", "\x80", "\"", "\\ude00"};

	int			n = rnd(5);

	for (int i = 0; i < n; i++)
		appendStringInfoString(out, chance(3) ? PICK(bad) : chance(60) ? piece[rnd(8)] : PICK(piece));
	if (chance(1))
		appendStringInfoChar(out, '\0');
}

static void
gen_string(StringInfo out)
{
	appendStringInfoChar(out, '"');
	gen_string_body(out);
	if (chance(98))
		appendStringInfoChar(out, '"');
}

static void
gen_key(StringInfo out)
{
	static const char *const keys[] = {
		"\"a\"", "\"b\"", "\"k\"", "\"\"", "\"ab\"", "\"\xc3\xa9\"", "\"\\u00e9\"", "\"\\u0061\"",
		"\"\\u0061b\"", "\"A\"", "\"a \"", "\"e\xcc\x81\"", "\"\\u0065\\u0301\"",
		"\"k\\/\"", "\"\\ud83d\\ude00\"", "\"\\u0062\"", "\"a\\u0000\"", "a", "'a'", "1", "null",
	"\"b"};

	if (chance(85))
		appendStringInfoString(out, keys[rnd(10)]);
	else if (chance(80))
		appendStringInfoString(out, keys[rnd(16)]);
	else if (chance(30))
		appendStringInfoString(out, PICK(keys));
	else
		gen_string(out);
}

static void gen_value(StringInfo out, int depth);

static void
gen_container(StringInfo out, int depth, bool object)
{
	int			n = rnd(depth == 0 ? 8 : 4);

	appendStringInfoChar(out, object ? '{' : '[');
	gen_space(out);
	for (int i = 0; i < n; i++)
	{
		if (i > 0)
		{
			if (chance(99))
				appendStringInfoChar(out, ',');
			gen_space(out);
		}
		if (object)
		{
			gen_key(out);
			gen_space(out);
			if (chance(99))
				appendStringInfoChar(out, ':');
			gen_space(out);
		}
		gen_value(out, depth + 1);
		gen_space(out);
	}
	if (n > 0 && chance(2))
		appendStringInfoChar(out, ',');
	if (chance(98))
		appendStringInfoChar(out, object ? '}' : ']');
	else if (chance(50))
		appendStringInfoChar(out, object ? ']' : '}');
}

static void
gen_value(StringInfo out, int depth)
{
	static const char *const literal[] = {"true", "false", "null", "tru", "nul", "True",
	"NULL", "truex", "nulll", "f", "undefined", "'a'", "@", "}", "]", ":"};
	int			kind = rnd(100);

	if (depth > 6)
		kind = 30 + rnd(70);
	if (kind < 18)
		gen_container(out, depth, true);
	else if (kind < 28)
		gen_container(out, depth, false);
	else if (kind < 55)
		gen_string(out);
	else if (kind < 85)
		gen_number(out);
	else if (kind < 98)
		appendStringInfoString(out, literal[rnd(3)]);
	else
		appendStringInfoString(out, PICK(literal));
}

/* Deep nesting: around the scanner's and the parser's limits. */
static void
gen_deep(StringInfo out)
{
	static const int depths[] = {10, 100, 1000, 3000, 5000, 10000, 30000, 100000, 300000};
	int			d = chance(50) ? rnd(12000) : depths[rnd(lengthof(depths))];
	bool		close = chance(80);

	appendStringInfoString(out, "{\"a\": 1, \"k\": ");
	for (int i = 0; i < d; i++)
		appendStringInfoString(out, chance(50) ? "[" : "{\"a\":");
	appendStringInfoString(out, "0");
	if (close)
	{
		/* close what was opened, innermost first */
		for (int i = out->len - 1; i >= 0 && d > 0; i--)
		{
			if (out->data[i] == '[')
			{
				appendStringInfoChar(out, ']');
				d--;
			}
			else if (out->data[i] == '{' && i > 0)
			{
				appendStringInfoChar(out, '}');
				d--;
			}
		}
		appendStringInfoString(out, ", \"b\": 2}");
	}
}

/* Byte-level damage to a generated input. */
static void
mutate(StringInfo buf)
{
	int			n = 1 + rnd(3);

	for (int m = 0; m < n && buf->len > 0; m++)
	{
		int			pos = rnd(buf->len);

		switch (rnd(5))
		{
			case 0:				/* truncate */
				buf->len = pos;
				buf->data[pos] = '\0';
				break;
			case 1:				/* replace a byte */
				buf->data[pos] = chance(50) ? (char) rnd(256) : "{}[]\":,\\-+.eE0u \t"[rnd(18)];
				break;
			case 2:				/* delete a byte */
				memmove(buf->data + pos, buf->data + pos + 1, buf->len - pos);
				buf->len--;
				break;
			case 3:				/* duplicate a slice */
				{
					int			len = Min(1 + rnd(16), buf->len - pos);
					char	   *slice = pnstrdup(buf->data + pos, len);

					appendBinaryStringInfo(buf, slice, len);
					memmove(buf->data + pos + len, buf->data + pos, buf->len - len - pos);
					memcpy(buf->data + pos, slice, len);
				}
				break;
			default:			/* trailing garbage */
				appendStringInfoString(buf, chance(50) ? " x" : "}");
				break;
		}
	}
}

static void
gen_json(StringInfo out)
{
	resetStringInfo(out);
	gen_space(out);
	if (chance(2))
		gen_deep(out);
	else if (chance(85))
		gen_container(out, 0, true);
	else
		gen_value(out, 0);
	gen_space(out);
	if (chance(15))
		mutate(out);
}

static void
gen_time(StringInfo out)
{
	static const char *const years[] = {"0000", "0001", "1999", "2000", "2024", "2023", "1900",
	"9999", "10000", "99999", "-2024", "+2024", "202", "1", "2024x", "\xd9\xa2\x30\x32\x34"};
	static const char *const seps[] = {"T", " ", "t", "  ", "", "T ", "_", "\t"};
	static const char *const offsets[] = {
		"Z", "z", "", "+00", "-00", "+05", "+0530", "+05:30", "-03:30", "+14:00", "-14:00",
		"+1459", "+14:59", "+15:59", "+16:00", "+1", "+053", "+05:3", "+05:", "+053000",
		"+05:30:00", "+05:30:15", "-12", "+12:00 ", " +05:00", " UTC", "UTC", " Z", "+00:00Z",
		" Europe/Paris", " America/New_York", " EST", "PST", " MSK", "+05:30 BC", " BC", " AD",
		"[UTC]", "Z ", "+24", "+99:99", "+1:00", "+01:60", "-0000", "+ 05", "GMT+5", "+05 ",
		"Zx", "+05x", "\n"};
	char		num[16];
	int			year = rnd(100) < 80 ? 1 + rnd(9999) : -1;

	resetStringInfo(out);
	if (chance(3))
		appendStringInfoChar(out, ' ');
	if (year > 0)
		appendStringInfo(out, "%04d", year);
	else
		appendStringInfoString(out, PICK(years));
	appendStringInfoString(out, chance(95) ? "-" : PICK(seps));
	if (chance(90))
		appendStringInfo(out, "%02d", 1 + rnd(12));
	else
		appendStringInfoString(out, chance(50) ? "00" : chance(50) ? "13" : "2");
	appendStringInfoString(out, chance(97) ? "-" : "/");
	if (chance(90))
		appendStringInfo(out, "%02d", chance(50) ? 28 + rnd(4) : 1 + rnd(31));
	else
		appendStringInfoString(out, chance(50) ? "00" : chance(50) ? "32" : "1");
	appendStringInfoString(out, chance(85) ? "T" : PICK(seps));
	snprintf(num, sizeof(num), "%02d", chance(95) ? rnd(24) : 24 + rnd(2));
	appendStringInfoString(out, chance(97) ? num : "1");
	appendStringInfo(out, ":%02d", chance(97) ? rnd(60) : 60);
	if (chance(95))
		appendStringInfo(out, ":%02d", chance(95) ? rnd(60) : 60 + rnd(2));
	if (chance(50))
	{
		appendStringInfoChar(out, chance(95) ? '.' : ',');
		gen_digits(out, chance(90) ? rnd(7) : rnd(14));
	}
	appendStringInfoString(out, chance(70) ? offsets[rnd(11)] : PICK(offsets));
	if (chance(3))
		appendStringInfoString(out, PICK(seps));
	if (chance(10))
		mutate(out);
}

/* A run's counts and the first mismatches. */
typedef struct RunResult
{
	int64		cases;
	int64		counted;		/* JSON: the scanner failed; times: the fast path accepted */
	int64		mismatches;
	StringInfoData report;
} RunResult;

static void
note(RunResult *r, char *diff)
{
	if (diff == NULL)
		return;
	if (r->mismatches++ < MAX_REPORTED)
		appendStringInfo(&r->report, "%s%s", r->report.len ? "\n" : "", diff);
}

static Datum
run_result(FunctionCallInfo fcinfo, RunResult *r)
{
	TupleDesc	tupdesc;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	values[0] = Int64GetDatum(r->cases);
	values[1] = Int64GetDatum(r->counted);
	values[2] = Int64GetDatum(r->mismatches);
	values[3] = CStringGetTextDatum(r->report.data);
	return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls));
}

/*
 * The generated inputs of one run: seed, then seconds or max_cases,
 * whichever ends first.
 */
static Datum
fuzz_run(FunctionCallInfo fcinfo, bool json)
{
	int64		seed = PG_GETARG_INT64(0);
	double		seconds = PG_GETARG_FLOAT8(1);
	int64		max_cases = PG_GETARG_INT64(2);
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "fuzz case",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old;
	RunResult	r = {0};
	StringInfoData input;
	instr_time	start;
	instr_time	now;

	initStringInfo(&r.report);
	initStringInfo(&input);
	pg_prng_seed(&rng, (uint64) seed);
	INSTR_TIME_SET_CURRENT(start);
	while (r.cases < max_cases)
	{
		char	   *diff;

		if (r.cases % 64 == 0)
		{
			CHECK_FOR_INTERRUPTS();
			INSTR_TIME_SET_CURRENT(now);
			INSTR_TIME_SUBTRACT(now, start);
			if (INSTR_TIME_GET_DOUBLE(now) >= seconds)
				break;
		}
		(json ? gen_json : gen_time) (&input);
		old = MemoryContextSwitchTo(cxt);
		if (json)
		{
			bool		rejected;
			bool		failed;

			diff = json_compare(input.data, input.len, &rejected, &failed);
			r.counted += failed;
		}
		else
		{
			bool		accepted;

			diff = iso_compare(input.data, input.len, &accepted);
			r.counted += accepted;
		}
		MemoryContextSwitchTo(old);
		if (diff)
			note(&r, psprintf("case %lld of seed %lld: %s", (long long) r.cases, (long long) seed, diff));
		MemoryContextReset(cxt);
		r.cases++;
	}
	return run_result(fcinfo, &r);
}

/* mailer_fuzz_json(seed, seconds, max_cases) -> (cases, scanner_errors, mismatches, report) */
Datum
mailer_fuzz_json(PG_FUNCTION_ARGS)
{
	return fuzz_run(fcinfo, true);
}

/* mailer_fuzz_iso(seed, seconds, max_cases) -> (cases, fast_accepted, mismatches, report) */
Datum
mailer_fuzz_iso(PG_FUNCTION_ARGS)
{
	return fuzz_run(fcinfo, false);
}

/* One given JSON input (a corpus file): NULL if both paths agree. */
Datum
mailer_fuzz_json_check(PG_FUNCTION_ARGS)
{
	bytea	   *in = PG_GETARG_BYTEA_PP(0);
	bool		rejected;
	bool		failed;
	char	   *diff = json_compare(VARDATA_ANY(in), VARSIZE_ANY_EXHDR(in), &rejected, &failed);

	if (diff == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(diff));
}

/* One given time input: NULL if the fast path declines or agrees. */
Datum
mailer_fuzz_iso_check(PG_FUNCTION_ARGS)
{
	bytea	   *in = PG_GETARG_BYTEA_PP(0);
	bool		accepted;
	char	   *diff = iso_compare(VARDATA_ANY(in), VARSIZE_ANY_EXHDR(in), &accepted);

	if (diff == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(diff));
}

/* Reads one byte past a guarded input: ASan must stop the backend. */
Datum
mailer_fuzz_asan_selftest(PG_FUNCTION_ARGS)
{
	char	   *base;
	char	   *buf = guarded_copy("abc", 3, &base);
	volatile char c = buf[3];

	guarded_free(base, 3);
	PG_RETURN_INT32(c);
}

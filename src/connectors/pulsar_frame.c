/*
 * pulsar_frame.c
 *		The JSON of Pulsar's WebSocket frames, parsed in place and written
 *		(pulsar_frame.h).
 *
 * A frame is one flat JSON object whose only nested value we read is
 * "properties" (an object of strings). So this is not a general JSON
 * parser: it reads strings in place, copies the few scalars it keeps into
 * fixed buffers, and skips any other value, nested at most MAX_DEPTH deep.
 * A frame that breaks JSON's rules is rejected, never half-read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "connectors/pulsar_frame.h"

/* Deeper nesting in a frame is an error (frames are flat). */
#define MAX_DEPTH 16

typedef struct Cursor
{
	char	   *start;
	char	   *p;
	char	   *end;
	char	   *err;
	size_t		errsize;
} Cursor;

static bool
fail(Cursor *c, const char *what)
{
	snprintf(c->err, c->errsize, "%s at byte %ld of the frame", what, (long) (c->p - c->start));
	return false;
}

static void
skip_ws(Cursor *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
		c->p++;
}

static bool
expect(Cursor *c, char ch)
{
	skip_ws(c);
	if (c->p >= c->end || *c->p != ch)
		return false;
	c->p++;
	return true;
}

static int
hex4(const char *s)
{
	int			v = 0;

	for (int i = 0; i < 4; i++)
	{
		char		h = s[i];

		v <<= 4;
		if (h >= '0' && h <= '9')
			v |= h - '0';
		else if (h >= 'a' && h <= 'f')
			v |= h - 'a' + 10;
		else if (h >= 'A' && h <= 'F')
			v |= h - 'A' + 10;
		else
			return -1;
	}
	return v;
}

/* UTF-8 of a code point at w; returns the bytes written. */
static int
put_utf8(char *w, unsigned int cp)
{
	if (cp < 0x80)
	{
		w[0] = (char) cp;
		return 1;
	}
	if (cp < 0x800)
	{
		w[0] = (char) (0xC0 | (cp >> 6));
		w[1] = (char) (0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000)
	{
		w[0] = (char) (0xE0 | (cp >> 12));
		w[1] = (char) (0x80 | ((cp >> 6) & 0x3F));
		w[2] = (char) (0x80 | (cp & 0x3F));
		return 3;
	}
	w[0] = (char) (0xF0 | (cp >> 18));
	w[1] = (char) (0x80 | ((cp >> 12) & 0x3F));
	w[2] = (char) (0x80 | ((cp >> 6) & 0x3F));
	w[3] = (char) (0x80 | (cp & 0x3F));
	return 4;
}

/*
 * A string, unescaped in place and NUL-terminated; *out points at it. The
 * written text never outruns the read position (each escape is longer than
 * what it stands for), so the NUL lands at or before the closing quote,
 * which has been read by then. \u0000 is refused: the text could not be
 * NUL-terminated.
 */
static bool
parse_string(Cursor *c, char **out)
{
	char	   *w;

	skip_ws(c);
	if (c->p >= c->end || *c->p != '"')
		return fail(c, "a string expected");
	w = *out = ++c->p;
	while (c->p < c->end && *c->p != '"')
	{
		unsigned char ch = (unsigned char) *c->p;

		if (ch < 0x20)
			return fail(c, "a control character in a string");
		if (ch != '\\')
		{
			*w++ = *c->p++;
			continue;
		}
		if (c->end - c->p < 2)
			return fail(c, "an unfinished escape");
		c->p++;
		switch (*c->p++)
		{
			case '"': *w++ = '"'; break;
			case '\\': *w++ = '\\'; break;
			case '/': *w++ = '/'; break;
			case 'b': *w++ = '\b'; break;
			case 'f': *w++ = '\f'; break;
			case 'n': *w++ = '\n'; break;
			case 'r': *w++ = '\r'; break;
			case 't': *w++ = '\t'; break;
			case 'u':
				{
					int			cp;

					if (c->end - c->p < 4 || (cp = hex4(c->p)) < 0)
						return fail(c, "a bad \\u escape");
					c->p += 4;
					if (cp == 0)
						return fail(c, "\\u0000 in a string");
					if (cp >= 0xD800 && cp <= 0xDBFF)
					{
						int			lo;

						if (c->end - c->p < 6 || c->p[0] != '\\' || c->p[1] != 'u' ||
							(lo = hex4(c->p + 2)) < 0xDC00 || lo > 0xDFFF)
							return fail(c, "a lone surrogate");
						c->p += 6;
						cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
					}
					else if (cp >= 0xDC00 && cp <= 0xDFFF)
						return fail(c, "a lone surrogate");
					w += put_utf8(w, (unsigned int) cp);
					break;
				}
			default:
				return fail(c, "a bad escape");
		}
	}
	if (c->p >= c->end)
		return fail(c, "an unterminated string");
	c->p++;						/* the closing quote */
	*w = '\0';
	return true;
}

/* The digits at c->p: how many (none is no error here). */
static int
digits(Cursor *c)
{
	int			n = 0;

	while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
	{
		c->p++;
		n++;
	}
	return n;
}

/*
 * A number, true, false or null: its text copied into buf (cut to size).
 * Numbers follow JSON's grammar exactly (no leading zeros, no bare '.'), so
 * that what this accepts is what PostgreSQL's json accepts.
 */
static bool
parse_scalar(Cursor *c, char *buf, size_t size)
{
	char	   *start;
	size_t		n;

	skip_ws(c);
	start = c->p;
	if (c->p < c->end && (*c->p == '-' || (*c->p >= '0' && *c->p <= '9')))
	{
		if (*c->p == '-')
			c->p++;
		if (c->p < c->end && *c->p == '0')
			c->p++;
		else if (digits(c) == 0)
			return fail(c, "a bad number");
		if (c->p < c->end && *c->p == '.')
		{
			c->p++;
			if (digits(c) == 0)
				return fail(c, "a bad number");
		}
		if (c->p < c->end && (*c->p == 'e' || *c->p == 'E'))
		{
			c->p++;
			if (c->p < c->end && (*c->p == '+' || *c->p == '-'))
				c->p++;
			if (digits(c) == 0)
				return fail(c, "a bad number");
		}
	}
	else
	{
		while (c->p < c->end && *c->p >= 'a' && *c->p <= 'z')
			c->p++;
	}
	n = c->p - start;
	if (n == 0)
		return fail(c, "a value expected");
	/* A literal, or a number not run into letters ("1x"). */
	if ((*start >= 'a' && *start <= 'z') ?
		!((n == 4 && memcmp(start, "true", 4) == 0) ||
		  (n == 5 && memcmp(start, "false", 5) == 0) ||
		  (n == 4 && memcmp(start, "null", 4) == 0)) :
		(c->p < c->end && ((*c->p >= 'a' && *c->p <= 'z') || (*c->p >= 'A' && *c->p <= 'Z'))))
		return fail(c, "a bad literal");
	if (buf != NULL && size > 0)
	{
		if (n >= size)
			n = size - 1;
		memcpy(buf, start, n);
		buf[n] = '\0';
	}
	return true;
}

static bool skip_value(Cursor *c, int depth);

/* The members or elements of an object or array, each skipped. */
static bool
skip_container(Cursor *c, int depth, char close)
{
	if (depth > MAX_DEPTH)
		return fail(c, "nesting too deep");
	if (expect(c, close))
		return true;
	for (;;)
	{
		char	   *name;

		if (close == '}' && (!parse_string(c, &name) || !expect(c, ':')))
			return fail(c, "a member expected");
		if (!skip_value(c, depth + 1))
			return false;
		if (expect(c, close))
			return true;
		if (!expect(c, ','))
			return fail(c, "',' expected");
	}
}

static bool
skip_value(Cursor *c, int depth)
{
	char	   *s;

	skip_ws(c);
	if (c->p >= c->end)
		return fail(c, "a value expected");
	if (*c->p == '"')
		return parse_string(c, &s);
	if (*c->p == '{' || *c->p == '[')
	{
		char		close = *c->p == '{' ? '}' : ']';

		c->p++;
		return skip_container(c, depth, close);
	}
	return parse_scalar(c, NULL, 0);
}

/* A string or null (*out NULL). */
static bool
parse_string_or_null(Cursor *c, char **out)
{
	char		lit[8];

	skip_ws(c);
	if (c->p < c->end && *c->p == '"')
		return parse_string(c, out);
	if (!parse_scalar(c, lit, sizeof(lit)) || strcmp(lit, "null") != 0)
		return fail(c, "a string or null expected");
	*out = NULL;
	return true;
}

/* A string or a scalar, its text copied into buf; null leaves "". */
static bool
parse_text(Cursor *c, char *buf, size_t size)
{
	char	   *s;

	skip_ws(c);
	if (c->p < c->end && *c->p == '"')
	{
		if (!parse_string(c, &s))
			return false;
		snprintf(buf, size, "%s", s);
		return true;
	}
	if (!parse_scalar(c, buf, size))
		return false;
	if (strcmp(buf, "null") == 0)
		buf[0] = '\0';
	return true;
}

static bool
parse_properties(Cursor *c, PulsarMessage *msg)
{
	/* A member named twice: the last one counts, as in PostgreSQL's jsonb. */
	msg->nproperties = 0;
	if (!expect(c, '{'))
	{
		char		lit[8];

		if (parse_scalar(c, lit, sizeof(lit)) && strcmp(lit, "null") == 0)
			return true;
		return fail(c, "properties: an object expected");
	}
	if (expect(c, '}'))
		return true;
	for (;;)
	{
		char	   *name;
		char	   *value;

		if (!parse_string(c, &name) || !expect(c, ':') || !parse_string_or_null(c, &value))
			return false;
		/* A name given twice: the last value counts, as in jsonb. */
		for (int i = 0; i < msg->nproperties; i++)
			if (strcmp(msg->property_names[i], name) == 0)
			{
				msg->property_names[i] = msg->property_names[--msg->nproperties];
				msg->property_values[i] = msg->property_values[msg->nproperties];
				break;
			}
		if (value != NULL)
		{
			if (msg->nproperties == PULSAR_MAX_PROPERTIES)
				return fail(c, "more than 64 properties (PULSAR_MAX_PROPERTIES)");
			msg->property_names[msg->nproperties] = name;
			msg->property_values[msg->nproperties++] = value;
		}
		if (expect(c, '}'))
			return true;
		if (!expect(c, ','))
			return fail(c, "properties: ',' expected");
	}
}

static const signed char b64_value[256] = {
	['A'] = 1, ['B'] = 2, ['C'] = 3, ['D'] = 4, ['E'] = 5, ['F'] = 6, ['G'] = 7,
	['H'] = 8, ['I'] = 9, ['J'] = 10, ['K'] = 11, ['L'] = 12, ['M'] = 13,
	['N'] = 14, ['O'] = 15, ['P'] = 16, ['Q'] = 17, ['R'] = 18, ['S'] = 19,
	['T'] = 20, ['U'] = 21, ['V'] = 22, ['W'] = 23, ['X'] = 24, ['Y'] = 25,
	['Z'] = 26, ['a'] = 27, ['b'] = 28, ['c'] = 29, ['d'] = 30, ['e'] = 31,
	['f'] = 32, ['g'] = 33, ['h'] = 34, ['i'] = 35, ['j'] = 36, ['k'] = 37,
	['l'] = 38, ['m'] = 39, ['n'] = 40, ['o'] = 41, ['p'] = 42, ['q'] = 43,
	['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48, ['w'] = 49,
	['x'] = 50, ['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54, ['2'] = 55,
	['3'] = 56, ['4'] = 57, ['5'] = 58, ['6'] = 59, ['7'] = 60, ['8'] = 61,
	['9'] = 62, ['+'] = 63, ['/'] = 64,
};								/* the digit's value + 1: 0 is "not base64" */

/*
 * Standard base64 (Java's Base64.getEncoder(), which the broker uses)
 * decoded from src into dst, which may be src itself: the output is never
 * longer than what has been read. Returns the byte count, or -1.
 */
static long
base64_decode(const char *src, size_t n, unsigned char *dst)
{
	size_t		out = 0;
	unsigned int acc = 0;
	int			bits = 0;
	size_t		i;

	/* Whole groups of four, as Java's encoder writes, at most two of them '='. */
	if (n % 4 != 0)
		return -1;
	if (n > 0 && src[n - 1] == '=')
		n -= (n > 1 && src[n - 2] == '=') ? 2 : 1;
	for (i = 0; i < n; i++)
	{
		int			v = b64_value[(unsigned char) src[i]];

		if (v == 0)
			return -1;
		acc = (acc << 6) | (unsigned int) (v - 1);
		bits += 6;
		if (bits >= 8)
		{
			bits -= 8;
			dst[out++] = (unsigned char) (acc >> bits);
		}
	}
	/* A last digit that carries a whole byte's worth is not base64. */
	if (bits >= 6)
		return -1;
	return (long) out;
}

static size_t
base64_encode(const unsigned char *src, size_t n, char *dst)
{
	static const char digits[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t		out = 0;
	size_t		i;

	for (i = 0; i + 2 < n; i += 3)
	{
		dst[out++] = digits[src[i] >> 2];
		dst[out++] = digits[((src[i] & 3) << 4) | (src[i + 1] >> 4)];
		dst[out++] = digits[((src[i + 1] & 15) << 2) | (src[i + 2] >> 6)];
		dst[out++] = digits[src[i + 2] & 63];
	}
	if (i < n)
	{
		dst[out++] = digits[src[i] >> 2];
		if (i + 1 < n)
		{
			dst[out++] = digits[((src[i] & 3) << 4) | (src[i + 1] >> 4)];
			dst[out++] = digits[(src[i + 1] & 15) << 2];
		}
		else
		{
			dst[out++] = digits[(src[i] & 3) << 4];
			dst[out++] = '=';
		}
		dst[out++] = '=';
	}
	return out;
}

/* What a frame's member means to one kind of frame: false on an error. */
typedef bool (*MemberParser) (Cursor *c, const char *name, void *into);

/*
 * A frame: one object, each member handed to parse_member, and nothing
 * after it but white space.
 */
static bool
parse_frame(char *text, size_t len, char *err, size_t errsize,
			MemberParser parse_member, void *into)
{
	Cursor		c = {text, text, text + len, err, errsize};

	if (!expect(&c, '{'))
		return fail(&c, "a frame is a JSON object");
	if (!expect(&c, '}'))
	{
		for (;;)
		{
			char	   *name;

			if (!parse_string(&c, &name) || !expect(&c, ':'))
				return fail(&c, "a member expected");
			if (!parse_member(&c, name, into))
				return false;
			if (expect(&c, '}'))
				break;
			if (!expect(&c, ','))
				return fail(&c, "',' expected");
		}
	}
	skip_ws(&c);
	return c.p == c.end || fail(&c, "text after the frame's object");
}

/* The payload's text until it is decoded; the other members are kept as they are. */
typedef struct MessageParse
{
	PulsarMessage *msg;
	char	   *payload;
} MessageParse;

static bool
message_member(Cursor *c, const char *name, void *into)
{
	MessageParse *mp = into;
	PulsarMessage *msg = mp->msg;

	if (strcmp(name, "messageId") == 0)
		return parse_string(c, &msg->message_id);
	if (strcmp(name, "payload") == 0)
		return parse_string(c, &mp->payload);
	if (strcmp(name, "key") == 0)
		return parse_string_or_null(c, &msg->key);
	if (strcmp(name, "publishTime") == 0)
		return parse_text(c, msg->publish_time, sizeof(msg->publish_time));
	if (strcmp(name, "eventTime") == 0)
		return parse_text(c, msg->event_time, sizeof(msg->event_time));
	if (strcmp(name, "properties") == 0)
		return parse_properties(c, msg);
	return skip_value(c, 1);
}

bool
pulsar_parse_message(char *text, size_t len, PulsarMessage *msg,
					 char *err, size_t errsize)
{
	MessageParse mp = {msg, NULL};
	long		n;

	memset(msg, 0, sizeof(*msg));
	if (!parse_frame(text, len, err, errsize, message_member, &mp))
		return false;
	if (msg->message_id == NULL || mp.payload == NULL)
	{
		snprintf(err, errsize, "a message frame without %s",
				 msg->message_id == NULL ? "messageId" : "payload");
		return false;
	}
	n = base64_decode(mp.payload, strlen(mp.payload), (unsigned char *) mp.payload);
	if (n < 0)
	{
		snprintf(err, errsize, "the payload is not base64");
		return false;
	}
	msg->payload = (unsigned char *) mp.payload;
	msg->payload_len = (size_t) n;
	return true;
}

static bool
ack_member(Cursor *c, const char *name, void *into)
{
	PulsarAck  *ack = into;

	if (strcmp(name, "result") == 0)
		return parse_string(c, &ack->result);
	if (strcmp(name, "messageId") == 0)
		return parse_string_or_null(c, &ack->message_id);
	if (strcmp(name, "context") == 0)
		return parse_string_or_null(c, &ack->context);
	if (strcmp(name, "errorMsg") == 0)
		return parse_string_or_null(c, &ack->error);
	return skip_value(c, 1);
}

bool
pulsar_parse_ack(char *text, size_t len, PulsarAck *ack, char *err, size_t errsize)
{
	memset(ack, 0, sizeof(*ack));
	if (!parse_frame(text, len, err, errsize, ack_member, ack))
		return false;
	if (ack->result == NULL)
	{
		snprintf(err, errsize, "an acknowledgement without result");
		return false;
	}
	return true;
}

/* A protobuf varint at *p (before end); false if cut short or too long. */
static bool
varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
	*v = 0;
	for (int shift = 0; shift < 64; shift += 7)
	{
		if (*p >= end)
			return false;
		*v |= (uint64_t) (**p & 0x7F) << shift;
		if ((*(*p)++ & 0x80) == 0)
			return true;
	}
	return false;
}

/*
 * The id is Pulsar's MessageIdData protobuf: ledgerId = 1, entryId = 2
 * (uint64), partition = 3, batch_index = 4 (int32, default -1), then
 * fields we do not need (an ack set, a batch size, a chunk's first id).
 */
bool
pulsar_message_id_decode(const char *base64, PulsarMessageId *id)
{
	unsigned char buf[256];
	size_t		n = strlen(base64);
	long		len;
	const unsigned char *p = buf;
	const unsigned char *end;
	bool		have_ledger = false;
	bool		have_entry = false;

	if (n > sizeof(buf) * 4 / 3 || (len = base64_decode(base64, n, buf)) < 0)
		return false;
	end = buf + len;
	id->ledger = id->entry = -1;
	id->partition = id->batch_index = -1;
	while (p < end)
	{
		uint64_t	tag;
		uint64_t	v;

		if (!varint(&p, end, &tag))
			return false;
		switch (tag & 7)
		{
			case 0:				/* varint */
				if (!varint(&p, end, &v))
					return false;
				switch (tag >> 3)
				{
					case 1: id->ledger = (int64_t) v; have_ledger = true; break;
					case 2: id->entry = (int64_t) v; have_entry = true; break;
					case 3: id->partition = (int32_t) v; break;
					case 4: id->batch_index = (int32_t) v; break;
				}
				break;
			case 1:				/* 64 bits */
				if (end - p < 8)
					return false;
				p += 8;
				break;
			case 2:				/* length-delimited */
				if (!varint(&p, end, &v) || v > (uint64_t) (end - p))
					return false;
				p += v;
				break;
			case 5:				/* 32 bits */
				if (end - p < 4)
					return false;
				p += 4;
				break;
			default:
				return false;
		}
	}
	return have_ledger && have_entry;
}

/* One protobuf varint field (wire type 0) of the given number. */
static size_t
put_varint_field(unsigned char *dst, int field, uint64_t v)
{
	size_t		n = 0;

	dst[n++] = (unsigned char) (field << 3);
	do
	{
		dst[n] = v & 0x7f;
		v >>= 7;
		if (v)
			dst[n] |= 0x80;
		n++;
	} while (v);
	return n;
}

/*
 * The MessageIdData a reader's messageId parameter takes, as
 * pulsar_message_id_decode reads it: ledger and entry, the partition and
 * the batch index only when not -1 (an int32's -1 is ten bytes of varint).
 */
bool
pulsar_message_id_encode(const PulsarMessageId *id, char *out, size_t outsize)
{
	unsigned char buf[48];
	size_t		n = 0;

	if (id->ledger < 0 || id->entry < 0)
		return false;
	n += put_varint_field(buf + n, 1, (uint64_t) id->ledger);
	n += put_varint_field(buf + n, 2, (uint64_t) id->entry);
	if (id->partition >= 0)
		n += put_varint_field(buf + n, 3, (uint64_t) id->partition);
	if (id->batch_index >= 0)
		n += put_varint_field(buf + n, 4, (uint64_t) id->batch_index);
	if (outsize < (n + 2) / 3 * 4 + 1)
		return false;
	out[base64_encode(buf, n, out)] = '\0';
	return true;
}

bool
pulsar_message_id_is_duplicate(const PulsarMessageId *id)
{
	return id->ledger == -1 && id->entry == -1;
}

/* JSON string text (quotes included) of s: at most 6 bytes per byte + 2. */
static size_t
json_quote(const char *s, char *dst)
{
	size_t		out = 0;

	dst[out++] = '"';
	for (; *s; s++)
	{
		unsigned char ch = (unsigned char) *s;

		if (ch == '"' || ch == '\\')
		{
			dst[out++] = '\\';
			dst[out++] = (char) ch;
		}
		else if (ch < 0x20)
			out += sprintf(dst + out, "\\u%04x", ch);
		else
			dst[out++] = (char) ch;
	}
	dst[out++] = '"';
	return out;
}

char *
pulsar_frame_send(const unsigned char *payload, size_t payload_len,
				  const char *key, int nproperties,
				  const char *const *names, const char *const *values,
				  const char *context, size_t *len)
{
	size_t		size = 64 + (payload_len + 2) / 3 * 4;
	char	   *buf;
	size_t		n = 0;

	/* Room first, so the writing below needs no checks. */
	if (key)
		size += 16 + 6 * strlen(key);
	if (context)
		size += 16 + 6 * strlen(context);
	size += 20;
	for (int i = 0; i < nproperties; i++)
		size += 8 + 6 * (strlen(names[i]) + strlen(values[i]));
	if ((buf = malloc(size)) == NULL)
		return NULL;
	n += sprintf(buf + n, "{\"payload\":\"");
	n += base64_encode(payload, payload_len, buf + n);
	buf[n++] = '"';
	if (key)
	{
		n += sprintf(buf + n, ",\"key\":");
		n += json_quote(key, buf + n);
	}
	if (context)
	{
		n += sprintf(buf + n, ",\"context\":");
		n += json_quote(context, buf + n);
	}
	if (nproperties > 0)
	{
		n += sprintf(buf + n, ",\"properties\":{");
		for (int i = 0; i < nproperties; i++)
		{
			if (i > 0)
				buf[n++] = ',';
			n += json_quote(names[i], buf + n);
			buf[n++] = ':';
			n += json_quote(values[i], buf + n);
		}
		buf[n++] = '}';
	}
	buf[n++] = '}';
	buf[n] = '\0';
	*len = n;
	return buf;
}

char *
pulsar_frame_ack(const char *message_id, size_t *len)
{
	size_t		n = strlen(message_id);
	char	   *buf;

	for (size_t i = 0; i < n; i++)
		if (b64_value[(unsigned char) message_id[i]] == 0 && message_id[i] != '=')
			return NULL;
	if ((buf = malloc(n + 20)) == NULL)
		return NULL;
	*len = (size_t) sprintf(buf, "{\"messageId\":\"%s\"}", message_id);
	return buf;
}

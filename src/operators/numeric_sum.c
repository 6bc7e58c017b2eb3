/*
 * numeric_sum.c
 *		Scaled int128 sums of numeric values (numeric_sum.h).
 *
 * numeric_add detoasts both arguments, unpacks their base-10000 digits,
 * adds and packs a new value: most of a sum(numeric) job's aggregate time.
 * The values a stream sums (amounts, prices) nearly always fit an int128
 * at their scale, and numeric addition is exact with the larger display
 * scale as its result's, so an int128 times 10^scale is the same sum.
 *
 * The bytes are numeric's on-disk format, which PostgreSQL keeps stable
 * across releases (pg_upgrade copies it as is): a uint16 header, then
 * base-10000 digits.  The header is special (NaN, +-Infinity), short (sign,
 * display scale up to 63 and weight in -64..63 in the header) or long
 * (sign and display scale in the header, then an int16 weight).  Building
 * a value strips leading and trailing zero digits and takes the short
 * form when it can, as make_result in numeric.c does, so a sum built here
 * has the bytes numeric_add's would.
 */
#include "postgres.h"

#include "fmgr.h"

#include "operators/numeric_sum.h"

#define NBASE 10000
#define HDR_SIGN_MASK 0xC000
#define HDR_NEG 0x4000
#define HDR_SHORT 0x8000
#define HDR_SPECIAL 0xC000
#define SHORT_SIGN 0x2000
#define SHORT_DSCALE_MASK 0x1F80
#define SHORT_DSCALE_SHIFT 7
#define SHORT_WEIGHT_SIGN 0x0040
#define SHORT_WEIGHT_MASK 0x003F
#define LONG_DSCALE_MASK 0x3FFF
#define UINT128_ALL (~(uint128) 0)
#define INT128_HIGHEST ((int128) (UINT128_ALL >> 1))

/*
 * 10^0 .. 10^38 (uint128 holds up to about 3.4 * 10^38), constant: no
 * run-time fill, no branch on each use.  Past 10^19 a uint64 literal
 * cannot hold them, so they are 10^19 times one.
 */
#define P19 ((uint128) UINT64CONST(10000000000000000000))
static const uint128 pow10_128[39] = {
	UINT64CONST(1),
	UINT64CONST(10),
	UINT64CONST(100),
	UINT64CONST(1000),
	UINT64CONST(10000),
	UINT64CONST(100000),
	UINT64CONST(1000000),
	UINT64CONST(10000000),
	UINT64CONST(100000000),
	UINT64CONST(1000000000),
	UINT64CONST(10000000000),
	UINT64CONST(100000000000),
	UINT64CONST(1000000000000),
	UINT64CONST(10000000000000),
	UINT64CONST(100000000000000),
	UINT64CONST(1000000000000000),
	UINT64CONST(10000000000000000),
	UINT64CONST(100000000000000000),
	UINT64CONST(1000000000000000000),
	UINT64CONST(10000000000000000000),
	P19 * UINT64CONST(10),
	P19 * UINT64CONST(100),
	P19 * UINT64CONST(1000),
	P19 * UINT64CONST(10000),
	P19 * UINT64CONST(100000),
	P19 * UINT64CONST(1000000),
	P19 * UINT64CONST(10000000),
	P19 * UINT64CONST(100000000),
	P19 * UINT64CONST(1000000000),
	P19 * UINT64CONST(10000000000),
	P19 * UINT64CONST(100000000000),
	P19 * UINT64CONST(1000000000000),
	P19 * UINT64CONST(10000000000000),
	P19 * UINT64CONST(100000000000000),
	P19 * UINT64CONST(1000000000000000),
	P19 * UINT64CONST(10000000000000000),
	P19 * UINT64CONST(100000000000000000),
	P19 * UINT64CONST(1000000000000000000),
	P19 * UINT64CONST(10000000000000000000)
};

static inline uint128
ten_to(int n)
{
	return pow10_128[n];
}

bool
numeric_sum_parse(const char *data, int len, int128 *v, int *scale)
{
	uint16		header;
	int			hdr;
	int			weight;
	int			dscale;
	bool		neg;
	int			ndigits;
	uint128		n = 0;
	int			exp10;

	if (len < (int) sizeof(uint16))
		return false;
	memcpy(&header, data, sizeof(uint16));
	if ((header & HDR_SIGN_MASK) == HDR_SPECIAL)
		return false;			/* NaN, Infinity, -Infinity */
	if (header & HDR_SHORT)
	{
		hdr = sizeof(uint16);
		neg = (header & SHORT_SIGN) != 0;
		dscale = (header & SHORT_DSCALE_MASK) >> SHORT_DSCALE_SHIFT;
		weight = (header & SHORT_WEIGHT_SIGN) ? (int) (header & SHORT_WEIGHT_MASK) - 64 :
			(int) (header & SHORT_WEIGHT_MASK);
	}
	else
	{
		int16		w;

		hdr = sizeof(uint16) + sizeof(int16);
		if (len < hdr)
			return false;
		memcpy(&w, data + sizeof(uint16), sizeof(int16));
		neg = (header & HDR_SIGN_MASK) == HDR_NEG;
		dscale = header & LONG_DSCALE_MASK;
		weight = w;
	}
	if (dscale > NUMERIC_SUM_MAX_SCALE)
		return false;
	if (weight > 9)
		return false;			/* a first digit at 10000^10 = 10^40 or more: cannot fit */
	ndigits = (len - hdr) / (int) sizeof(int16);
	/* The last digit counts 10000^(weight - ndigits + 1); the sum counts 10^-dscale. */
	exp10 = (weight - ndigits + 1) * 4 + dscale;
	if (exp10 < -3)
		return false;			/* a whole digit past the display scale: numeric's arithmetic makes none */
	for (int i = 0; i < ndigits; i++)
	{
		uint16		d;
		uint128		base = NBASE;

		memcpy(&d, data + hdr + i * sizeof(uint16), sizeof(uint16));
		/*
		 * The last digit pads the display scale to whole base-10000 digits:
		 * drop the padding (zeros) as it comes, since n with it could
		 * overflow where the value does not (39 significant digits fit).
		 */
		if (i == ndigits - 1 && exp10 < 0)
		{
			if (d % ten_to(-exp10) != 0)
				return false;	/* digits past the display scale, as above */
			d /= ten_to(-exp10);
			base = ten_to(4 + exp10);
			exp10 = 0;
		}
		if (__builtin_mul_overflow(n, base, &n) ||
			__builtin_add_overflow(n, (uint128) d, &n))
			return false;
	}
	if (n != 0 && exp10 > 0)
	{
		if (exp10 > 38 || n > UINT128_ALL / ten_to(exp10))
			return false;
		n *= ten_to(exp10);
	}
	if (n > (uint128) INT128_HIGHEST)
		return false;
	*v = neg ? -(int128) n : (int128) n;
	*scale = dscale;
	return true;
}

bool
numeric_sum_from_datum(Datum d, int128 *v, int *scale)
{
	struct varlena *p = pg_detoast_datum_packed((struct varlena *) DatumGetPointer(d));

	return numeric_sum_parse(VARDATA_ANY(p), VARSIZE_ANY_EXHDR(p), v, scale);
}

bool
numeric_sum_add(int128 *v, int *scale, int128 x, int xscale)
{
	int128		a = *v;
	int			s = *scale;
	int128		r;

	if (xscale > NUMERIC_SUM_MAX_SCALE)
		return false;
	if (xscale > s)
	{
		if (__builtin_mul_overflow(a, (int128) ten_to(xscale - s), &a))
			return false;
		s = xscale;
	}
	else if (xscale < s && __builtin_mul_overflow(x, (int128) ten_to(s - xscale), &x))
		return false;
	if (__builtin_add_overflow(a, x, &r))
		return false;
	*v = r;
	*scale = s;
	return true;
}

int
numeric_sum_bytes(int128 v, int scale, char *buf)
{
	bool		neg = v < 0;
	uint128		mag = neg ? -(uint128) v : (uint128) v;
	uint128		ip;
	uint128		fp;
	int			nfrac = (scale + 3) / 4;
	int16		intd[12];
	int16		digits[24];
	int			nint = 0;
	int			n = 0;
	int			first = 0;
	int			weight;
	uint16		header;
	int			pos;

	Assert(scale >= 0 && scale <= NUMERIC_SUM_MAX_SCALE);
	if (mag <= PG_UINT64_MAX && scale <= 19)
	{
		uint64		p = (uint64) ten_to(scale);

		ip = (uint64) mag / p;
		fp = (uint64) mag % p;
	}
	else
	{
		ip = mag / ten_to(scale);
		fp = mag % ten_to(scale);
	}
	/* 64-bit division where the value allows: far cheaper than 128-bit */
	while (ip > PG_UINT64_MAX)
	{
		intd[nint++] = (int16) (ip % NBASE);
		ip /= NBASE;
	}
	for (uint64 ip64 = (uint64) ip; ip64 != 0; ip64 /= NBASE)
		intd[nint++] = (int16) (ip64 % NBASE);
	for (int i = nint - 1; i >= 0; i--)
		digits[n++] = intd[i];
	/* The fraction padded to whole base-10000 digits: below 10^36, no overflow. */
	fp *= ten_to(nfrac * 4 - scale);
	for (int i = nfrac - 1; i >= 0; i--)
	{
		if (fp <= PG_UINT64_MAX)
		{
			for (uint64 fp64 = (uint64) fp; i >= 0; i--, fp64 /= NBASE)
				digits[n + i] = (int16) (fp64 % NBASE);
			break;
		}
		digits[n + i] = (int16) (fp % NBASE);
		fp /= NBASE;
	}
	n += nfrac;
	weight = nint - 1;
	/* As make_result: no leading or trailing zero digits; zero is positive, weight 0. */
	while (first < n && digits[first] == 0)
	{
		first++;
		weight--;
	}
	while (n > first && digits[n - 1] == 0)
		n--;
	if (n == first)
	{
		weight = 0;
		neg = false;
	}
	if (weight >= -64 && weight <= 63)	/* the scale, at most 32, fits the short form */
	{
		header = HDR_SHORT | (neg ? SHORT_SIGN : 0) | (scale << SHORT_DSCALE_SHIFT) |
			(weight < 0 ? SHORT_WEIGHT_SIGN : 0) | (weight & SHORT_WEIGHT_MASK);
		memcpy(buf, &header, sizeof(uint16));
		pos = sizeof(uint16);
	}
	else
	{
		int16		w = weight;

		header = (neg ? HDR_NEG : 0) | (scale & LONG_DSCALE_MASK);
		memcpy(buf, &header, sizeof(uint16));
		memcpy(buf + sizeof(uint16), &w, sizeof(int16));
		pos = sizeof(uint16) + sizeof(int16);
	}
	memcpy(buf + pos, digits + first, (n - first) * sizeof(int16));
	return pos + (n - first) * sizeof(int16);
}

Datum
numeric_sum_datum(int128 v, int scale)
{
	char		buf[NUMERIC_SUM_MAX_BYTES];
	int			len = numeric_sum_bytes(v, scale, buf);
	struct varlena *result = palloc(len + VARHDRSZ);

	SET_VARSIZE(result, len + VARHDRSZ);
	memcpy(VARDATA(result), buf, len);
	return PointerGetDatum(result);
}

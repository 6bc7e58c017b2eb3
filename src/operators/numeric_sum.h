/*
 * numeric_sum.h
 *		Sums of numeric values kept as a scaled int128 while they fit: the
 *		value times 10^scale, where scale is the largest display scale seen
 *		(numeric addition's own result scale).  aggregate.c falls back to
 *		numeric_add on what does not fit (NaN, Infinity, an overflow, a
 *		scale over NUMERIC_SUM_MAX_SCALE).
 */
#ifndef NUMERIC_SUM_H
#define NUMERIC_SUM_H

/*
 * Up to this scale a sum stays scaled: 10^32 leaves int128 six decimal
 * digits of integer part at the largest scale, and the fraction padded to
 * base-10000 digits (numeric_sum_bytes) cannot overflow.
 */
#define NUMERIC_SUM_MAX_SCALE 32

/* The most bytes numeric_sum_bytes writes. */
#define NUMERIC_SUM_MAX_BYTES 64

/*
 * A numeric's bytes (its varlena data, without the length word) as *v at
 * *scale (its display scale); false when they do not fit.
 */
extern bool numeric_sum_parse(const char *data, int len, int128 *v, int *scale);

/* The same from a numeric datum (toasted or packed). */
extern bool numeric_sum_from_datum(Datum d, int128 *v, int *scale);

/*
 * *v at *scale plus x at xscale, at the larger scale; false (and *v, *scale
 * unchanged) on an overflow or a scale over NUMERIC_SUM_MAX_SCALE.
 */
extern bool numeric_sum_add(int128 *v, int *scale, int128 x, int xscale);

/*
 * The bytes of the numeric v at scale (varlena data, no length word) into
 * buf, exactly as PostgreSQL's own arithmetic would form them; their count.
 */
extern int	numeric_sum_bytes(int128 v, int scale, char *buf);

/* The same as a numeric datum, palloc'd. */
extern Datum numeric_sum_datum(int128 v, int scale);

#endif							/* NUMERIC_SUM_H */

/*
 * hash_flood: the keys a producer would choose to flood the keyed cache of
 * a running-totals job keyed by one text field, if the cache hashed with
 * PostgreSQL's unseeded hash_bytes (test/t/155_hash_flood.pl).
 *
 * The cache's key for such a job is 'A', the text's length as a native
 * int32, then its bytes (operators/keyed.c, running_total_key, and
 * state/serial.c).  Prints COUNT keys PREFIX<n> whose keys' unseeded
 * hashes agree in their low BITS bits, one a line.  Built by the test,
 * never installed.
 *
 * Usage: hash_flood PREFIX COUNT BITS
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* PostgreSQL's, from libpgcommon (common/hashfn.h) */
extern uint32_t hash_bytes(const unsigned char *k, int keylen);

int
main(int argc, char **argv)
{
	const char *prefix;
	long		count;
	int			bits;
	uint32_t	mask;
	long		found = 0;

	if (argc != 4 || (count = atol(argv[2])) <= 0 || (bits = atoi(argv[3])) <= 0 || bits > 32)
	{
		fprintf(stderr, "usage: hash_flood PREFIX COUNT BITS (1 to 32)\n");
		return 2;
	}
	prefix = argv[1];
	mask = bits == 32 ? UINT32_MAX : ((uint32_t) 1 << bits) - 1;
	for (unsigned long n = 0; found < count; n++)
	{
		unsigned char key[128];
		char		text[96];
		int32_t		len = snprintf(text, sizeof(text), "%s%lu", prefix, n);

		if (len <= 0 || len >= (int32_t) sizeof(text))
		{
			fprintf(stderr, "hash_flood: prefix too long\n");
			return 2;
		}
		key[0] = 'A';
		memcpy(key + 1, &len, sizeof(len));
		memcpy(key + 1 + sizeof(len), text, len);
		if ((hash_bytes(key, 1 + sizeof(len) + len) & mask) == 0)
		{
			puts(text);
			found++;
		}
	}
	return 0;
}

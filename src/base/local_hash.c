/*
 * local_hash.c
 *		The process's hash seed, and the seeded hash of a datum's image
 *		(base/local_hash.h).
 *
 * The seed is drawn in the process that hashes, on first use, never in the
 * postmaster: a seed drawn before the fork would be every worker's.
 */
#include "postgres.h"

#include "fmgr.h"

#include "base/local_hash.h"

uint64		local_hash_seed = 0;

void
local_hash_seed_init(void)
{
	uint64		seed = 0;

	while (seed == 0)
	{
		if (!pg_strong_random(&seed, sizeof(seed)))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("mailer could not draw a random hash seed"),
					 errhint("The server's random source (OpenSSL or /dev/urandom) must be readable.")));
	}
	local_hash_seed = seed;
}

/*
 * The bytes datum_image_eq compares: a by-value value's own bytes, a
 * fixed-length value's bytes, a varlena's data detoasted, a cstring's
 * characters.  A by-value Datum narrower than 8 bytes is cut to its type's
 * width: its spare bits depend on the function that made it (int4in
 * sign-extends, hashtext's result is zero-extended), and its type's
 * equality does not read them.
 */
uint32
local_hash_datum_image(Datum value, bool typbyval, int typlen)
{
	if (typbyval)
	{
		uint64		v = (uint64) value;

		if (typlen == 1)
			v &= UINT64CONST(0xFF);
		else if (typlen == 2)
			v &= UINT64CONST(0xFFFF);
		else if (typlen == 4)
			v &= UINT64CONST(0xFFFFFFFF);
		return local_hash_uint64(v);
	}
	if (typlen > 0)
		return local_hash_bytes(DatumGetPointer(value), typlen);
	if (typlen == -1)
	{
		struct varlena *v = pg_detoast_datum_packed((struct varlena *) DatumGetPointer(value));
		uint32		h = local_hash_bytes(VARDATA_ANY(v), VARSIZE_ANY_EXHDR(v));

		if ((Pointer) v != DatumGetPointer(value))
			pfree(v);
		return h;
	}
	Assert(typlen == -2);
	return local_hash_bytes(DatumGetPointer(value), strlen(DatumGetPointer(value)));
}

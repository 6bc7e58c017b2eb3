/*
 * produce_latency.c
 *		Produce-to-commit latency per batch (produce_latency.h).
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "runtime/produce_latency.h"

/*
 * Merge the batches two by two, each pair into one of their summed count
 * at their weighted mean: the sum of latencies stays what it was.
 */
static void
halve(ProduceLatency *pl)
{
	int			n = 0;

	for (int i = 0; i < pl->nbatches; i += 2)
	{
		uint64		count = pl->batches[i].count;
		TimestampTz mean = pl->batches[i].mean;

		if (i + 1 < pl->nbatches)
		{
			uint64		more = pl->batches[i + 1].count;

			mean += (TimestampTz) ((double) (pl->batches[i + 1].mean - mean) *
								   more / (count + more));
			count += more;
		}
		pl->batches[n].count = count;
		pl->batches[n].mean = mean;
		n++;
	}
	pl->nbatches = n;
}

void
produce_latency_add(ProduceLatency *pl, const SourceMessage *msgs, int n)
{
	TimestampTz first = 0;
	double		offsets = 0;	/* from first: a sum of timestamps would overflow */
	uint64		count = 0;

	for (int i = 0; i < n; i++)
	{
		if (TIMESTAMP_NOT_FINITE(msgs[i].timestamp))
			continue;
		if (count == 0)
			first = msgs[i].timestamp;
		offsets += (double) (msgs[i].timestamp - first);
		count++;
	}
	if (count == 0)
		return;
	if (pl->nbatches == PRODUCE_LATENCY_BATCHES)
		halve(pl);
	pl->batches[pl->nbatches].count = count;
	pl->batches[pl->nbatches].mean = first + (TimestampTz) (offsets / count);
	pl->nbatches++;
}

void
produce_latency_commit(ProduceLatency *pl, JobHistogram *h, TimestampTz commit_time)
{
	for (int i = 0; i < pl->nbatches; i++)
		job_histogram_observe(h, (double) (commit_time - pl->batches[i].mean) / USECS_PER_SEC,
							  pl->batches[i].count);
	pl->nbatches = 0;
}

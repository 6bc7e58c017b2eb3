/*
 * produce_latency.h
 *		Produce-to-commit latency: from a record's Kafka timestamp to the
 *		commit of the checkpoint that covers it, without a timestamp kept
 *		per record.
 *
 * Each batch read is kept as its count of timestamped records and their
 * mean timestamp; at the commit every batch of the epoch is observed as
 * count records of latency commit - mean.  The histogram's count and sum
 * are exact; only the spread of a batch's records over the buckets is lost
 * (docs/ARCHITECTURE.md, "Shared memory: job slots").
 */
#ifndef PRODUCE_LATENCY_H
#define PRODUCE_LATENCY_H

#include "connectors/source.h"
#include "jobs/job_histogram.h"

/* Batches of an epoch kept apart; past this many, neighbours are merged. */
#define PRODUCE_LATENCY_BATCHES 64

typedef struct ProduceLatency
{
	int			nbatches;
	struct
	{
		uint64		count;		/* records with a timestamp */
		TimestampTz mean;		/* their mean timestamp */
	}			batches[PRODUCE_LATENCY_BATCHES];
} ProduceLatency;

/* A batch read into the open epoch: its records that have a timestamp. */
extern void produce_latency_add(ProduceLatency *pl, const SourceMessage *msgs, int n);

/* The epoch committed at commit_time: observe its batches into h, and forget them. */
extern void produce_latency_commit(ProduceLatency *pl, JobHistogram *h, TimestampTz commit_time);

#endif							/* PRODUCE_LATENCY_H */

/*
 * barrier_cuts.h
 *		The barrier cuts of a Kafka source's barrier group: the records of
 *		the compacted topic __barrier_state, decoded, and a reader that keeps
 *		the complete cuts it has seen.
 *
 * Design: docs/ARCHITECTURE.md, "Barrier cuts".
 */
#ifndef BARRIER_CUTS_H
#define BARRIER_CUTS_H

#include "datatype/timestamp.h"

#include "plan/spec.h"

/* A cut's marker in one of the job's partitions: records below it are before the cut. */
typedef struct CutMarker
{
	int			topic;			/* index among the source's topics */
	int32		partition;
	int64		offset;
} CutMarker;

/* A complete cut, with the markers of the job's topics only (maybe none). */
typedef struct BarrierCut
{
	int64		epoch;			/* positive */
	int32		record_partition;	/* where its record is in the barrier topic */
	int64		record_offset;
	TimestampTz triggered_at;
	TimestampTz completed_at;
	int			nmarkers;
	CutMarker  *markers;
} BarrierCut;

/* What one record of __barrier_state says, for the group asked about. */
typedef enum BarrierRecordKind
{
	BARRIER_RECORD_OTHER,		/* a group or injection record, another group's */
	BARRIER_RECORD_CUT,			/* a complete cut of the group: *cut filled */
	BARRIER_RECORD_DELETED,		/* a tombstone of one of the group's cuts: *epoch */
	BARRIER_RECORD_PARTIAL,		/* a partial cut of the group: skipped */
	BARRIER_RECORD_MALFORMED	/* not of the format: why says how */
} BarrierRecordKind;

/*
 * Decode one record of __barrier_state for group (topics: the source's,
 * whose markers the cut keeps).  *cut is allocated in the current memory
 * context.
 */
extern BarrierRecordKind barrier_record_decode(const char *key, size_t key_len,
											   const char *value, size_t value_len,
											   const char *group, char **topics, int ntopics,
											   BarrierCut *cut, int64 *epoch,
											   char *why, size_t why_size);

/*
 * A digest of a cut's markers: two records of an epoch with the same
 * markers (a coordinator's retry, new times) hold a job at the same place.
 */
extern uint64 barrier_cut_digest(const BarrierCut *cut);

typedef struct BarrierReader BarrierReader;

/*
 * A reader of spec's barrier topic, of its own (assign and seek from the
 * beginning, no consumer group), that writes to wake_fd when records
 * arrive.  Its handle is destroyed by barrier_reader_close.
 */
extern BarrierReader *barrier_reader_open(KafkaSourceSpec *spec, const char *group_id,
										  char **topics, int ntopics, int wake_fd);

/*
 * Read what has arrived, without waiting; decided: the last cut the job
 * decided on (a complete cut at or below it that comes now is late).
 */
extern void barrier_reader_poll(BarrierReader *reader, int64 decided);

/* Whether the cuts published before the reader opened have all been read. */
extern bool barrier_reader_caught_up(BarrierReader *reader);

/*
 * The lowest complete cut above epoch seen so far, or NULL; cuts at or
 * below epoch are forgotten.
 */
extern const BarrierCut *barrier_reader_next(BarrierReader *reader, int64 above);

/*
 * The complete cut of epoch the reader holds once it has read the barrier
 * topic's partition past offset (where another reader found a record of
 * it): NULL before (*withdrawn false), or when a later record withdrew it
 * (*withdrawn true).
 */
extern const BarrierCut *barrier_reader_find(BarrierReader *reader, int64 epoch, int32 partition,
											 int64 offset, bool *withdrawn);

/*
 * Partial cuts and malformed records seen since the reader opened, and
 * complete cuts that came after a later one was decided on (late).
 */
extern void barrier_reader_counts(BarrierReader *reader, uint64 *partial, uint64 *malformed,
								  uint64 *late);

/* Why no cut can be read now (the topic is missing, the broker away), or NULL. */
extern const char *barrier_reader_error(BarrierReader *reader);

extern void barrier_reader_close(BarrierReader *reader);

#endif							/* BARRIER_CUTS_H */

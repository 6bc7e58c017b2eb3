/*
 * dead_letter.h
 *		Records that failed a step, buffered until the checkpoint that
 *		covers them writes them to mailer.dead_letters.
 *
 * Design: docs/ARCHITECTURE.md, "Dead letters and on_error".
 */
#ifndef DEAD_LETTER_H
#define DEAD_LETTER_H

typedef struct DeadLetterBuffer DeadLetterBuffer;

extern DeadLetterBuffer *dead_letter_buffer_create(MemoryContext parent);

/*
 * Keep one dead letter; NULL key or value (length -1) means absent, topic
 * NULL and partition, offset -1 mean unknown.  Everything is copied.
 */
extern void dead_letter_add(DeadLetterBuffer *dlq, const char *topic, int32 partition,
							int64 offset, const char *key, int key_len,
							const char *value, int value_len,
							const char *stage, const char *error);

extern int	dead_letter_count(DeadLetterBuffer *dlq);

/* A chunk's worth of bytes is buffered: the worker checkpoints early. */
extern bool dead_letter_full(DeadLetterBuffer *dlq);

/*
 * Insert them (inside the checkpoint transaction), in INSERTs of at most a
 * chunk of bytes each, and empty the buffer.
 */
extern void dead_letter_flush(DeadLetterBuffer *dlq, int64 job_id, int64 epoch);

/* Empty the buffer without writing (after a rolled-back checkpoint). */
extern void dead_letter_discard(DeadLetterBuffer *dlq);

#endif							/* DEAD_LETTER_H */

/*
 * pipeline.h
 *		The per-batch work of a job (pipeline.c).
 */
#ifndef PIPELINE_H
#define PIPELINE_H

#include "runtime/job.h"

/* Process a batch of messages through every stage. */
extern void pipeline_process(Job *job, SourceMessage *msgs, int n);

#endif							/* PIPELINE_H */

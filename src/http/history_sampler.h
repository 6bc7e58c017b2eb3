/*
 * history_sampler.h
 *		The HTTP worker's once-a-second sample of every job, for the
 *		dashboard's charts.
 */
#ifndef HISTORY_SAMPLER_H
#define HISTORY_SAMPLER_H

#include "utils/timestamp.h"

extern void history_sampler_tick(TimestampTz now);

#endif							/* HISTORY_SAMPLER_H */

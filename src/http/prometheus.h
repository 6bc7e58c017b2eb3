/*
 * prometheus.h
 *		/metrics: the jobs' metrics in Prometheus's text exposition format.
 */
#ifndef PROMETHEUS_H
#define PROMETHEUS_H

#include "lib/stringinfo.h"

/* Append the exposition to out; in a transaction with a snapshot. */
extern void prometheus_render(StringInfo out);

#endif							/* PROMETHEUS_H */

/*
 * cpu_prefetch.h
 *		Asking the CPU to fetch memory the worker will read soon, so that
 *		the cache misses of several records overlap instead of coming one
 *		after the other (runtime/pipeline.c fetches a record's keyed cache
 *		slot, entry and sessions a few records ahead).  A hint only: an
 *		address that is not mapped never faults.
 *
 * Not __builtin_prefetch: GCC takes it for an operation without side
 * effects, so a function that only prefetches is pure to it, and a call of
 * one defined in the same file, whose result nobody uses, is deleted as
 * dead code without a warning (GCC 12 at -O2, even when the function is
 * noinline).  A helper written that way compiled to nothing (BENCHMARKS.md,
 * "Measured and not kept: the memory checkpoint's prefetches, compiled this
 * time").  The instruction as volatile assembly is never deleted; other
 * CPUs fall back to the builtin, and to that risk.
 */
#ifndef CPU_PREFETCH_H
#define CPU_PREFETCH_H

/* x86-64's, and most arm64's */
#define CPU_CACHE_LINE 64

/* The cache line of p, into every level of the CPU's caches. */
static inline void
cpu_prefetch(const void *p)
{
#if defined(__x86_64__) || defined(__i386__)
	__asm__ __volatile__("prefetcht0 (%0)" : : "r"(p));
#elif defined(__aarch64__)
	__asm__ __volatile__("prfm pldl1keep, [%0]" : : "r"(p));
#else
	__builtin_prefetch(p);
#endif
}

/* Every cache line of [p, p + len). */
static inline void
cpu_prefetch_lines(const void *p, Size len)
{
	for (uintptr_t line = (uintptr_t) p & ~(uintptr_t) (CPU_CACHE_LINE - 1);
		 line < (uintptr_t) p + len; line += CPU_CACHE_LINE)
		cpu_prefetch((const void *) line);
}

#endif							/* CPU_PREFETCH_H */
